"""Synthetic inputs the speed benches share: an ELECTRA preset with BERT's uncased special
token ids, random token batches for it (speed does not depend on the text), and our
pretraining step to time on them."""

import electra_tf  # noqa: F401  (its CPU memory settings)
import numpy as np
import tensorflow as tf

from electra_tf.config import ElectraConfig

# Where BERT's uncased 30,522-token vocab keeps them.
SPECIAL_IDS = dict(pad_token_id=0, unk_token_id=100, cls_token_id=101, sep_token_id=102,
                   mask_token_id=103)


def preset_config(preset, vocab_size, seq_length, batch_size) -> ElectraConfig:
    return ElectraConfig.preset(preset, vocab_size=vocab_size, max_seq_length=seq_length,
                                batch_size=batch_size, **SPECIAL_IDS)


def random_batch(cfg, batch_size, seq_length, seed=0) -> dict:
    """A pretraining batch ([batch_size, seq_length] int32 each) of random ordinary tokens
    between [CLS] and [SEP], no padding."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(200, cfg.vocab_size, (batch_size, seq_length)).astype(np.int32)
    ids[:, 0], ids[:, -1] = cfg.cls_token_id, cfg.sep_token_id
    return {"input_word_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
            "input_type_ids": tf.zeros_like(ids)}


def pretraining_step(cfg, runtime_options):
    """Our pretraining step as `electra-pretrain` builds it (`runs.pretrain.build_model`):
    a function of a batch that returns when the step has finished."""
    from electra_tf.runs.pretrain import build_model

    model, _ = build_model(cfg, runtime_options)
    model.make_train_function()
    train_function = model.train_function

    def step(batch):
        float(train_function(iter([batch]))["loss"])

    return step
