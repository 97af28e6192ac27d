"""A pretrainer restored from a run trained by `electra-pretrain` compiles with any
optimizer: the run's own optimizer state is not carried onto it."""

import keras
import numpy as np
import tensorflow as tf

from electra_tf import run_dir
from electra_tf.pretraining.pretrainer import ElectraPretrainer


def test_a_restored_pretrainer_compiles_and_trains_with_another_optimizer(pretrained_dir):
    assert run_dir.open_pretrained(pretrained_dir).parts()["optimizer"]
    model = ElectraPretrainer.from_pretrained(pretrained_dir)
    assert isinstance(model, ElectraPretrainer)
    before = [v.numpy() for v in model.discriminator.weights]
    model.compile(optimizer=keras.optimizers.RMSprop(1e-4))
    ids = np.random.RandomState(0).randint(5, model.config.vocab_size, (4, 16)).astype("int32")
    batch = {"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": 0 * ids}
    model.fit(tf.data.Dataset.from_tensors(batch), verbose=0)
    assert int(model.optimizer.iterations) == 1
    assert any(not np.array_equal(b, v.numpy())
               for b, v in zip(before, model.discriminator.weights))
