"""Strategy selection and its errors, and what the runtime flags change in a model."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.layers.activations import fused_gelu
from electra_tf.training.runtime import RuntimeOptions, create_strategy


@pytest.mark.parametrize("strategy", ["auto", "cpu"])
def test_one_cpu_trains_under_the_default_strategy_as_from_python(strategy):
    # Not OneDeviceStrategy("/cpu:0"): its distributed dataset made `fit` 1.5-1.8x slower
    # on AVX2 CPUs (bench/fit_strategy.py).
    assert create_strategy(RuntimeOptions(strategy=strategy)) is tf.distribute.get_strategy()


def test_mirrored_without_accelerators_mirrors_the_cpu():
    chosen = create_strategy(RuntimeOptions(strategy="mirrored"))
    assert type(chosen) is tf.distribute.MirroredStrategy
    assert all("CPU" in device for device in chosen.extended.worker_devices)


@pytest.mark.parametrize("options, message", [
    (dict(strategy="gpu"), "--strategy gpu: TensorFlow sees no GPU on this machine; use "
                           "--strategy cpu"),
    (dict(strategy="tpu"), "--strategy tpu: cannot reach TPU .*Pass --tpu NAME"),
    (dict(strategy="multi_worker"), "reads the cluster from the TF_CONFIG"),
    (dict(strategy="horovod"), "--strategy='horovod'; choose one of auto, cpu"),
    (dict(mixed_precision="fp8"), "--mixed_precision='fp8'"),
])
def test_unusable_strategies_are_one_line_errors(options, message, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=message):
        create_strategy(RuntimeOptions(**options))


def test_fused_gelu_is_the_default_and_nofused_gelu_builds_keras_gelu():
    from electra_tf.runs.pretrain import build_model

    cfg = ElectraConfig.preset("tiny", vocab_size=100, max_seq_length=16)
    outputs = {}
    for fused in (True, False):
        keras.utils.set_random_seed(0)
        model, _ = build_model(cfg, RuntimeOptions(fused_gelu=fused))
        activation = model.discriminator.transformer_layers[0].activation
        assert (activation is fused_gelu) == fused
        assert (model.generator.transformer_layers[0].activation is fused_gelu) == fused
        ids = np.arange(16, dtype=np.int32)[None] + 5
        outputs[fused] = model.discriminator(
            {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids)})["sequence_output"].numpy()
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-5, atol=1e-5)
