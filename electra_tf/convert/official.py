"""Official google-research/electra TF1 checkpoints: read, infer the config, write.

These are name-based checkpoints (`model.ckpt-1000000.index/.data-*`) holding the model
variables under the names in `official_names.py`, plus optimizer slots and `global_step`,
which conversion ignores.
"""

import os
import re
from typing import Optional

import tensorflow as tf

from electra_tf.errors import ConfigError
from electra_tf.convert import official_names
from electra_tf.convert.configs import GeneratorShape, make_config

# Training state, not model: Adam slots, the step counter, the sampling temperature.
_TRAINING_STATE = re.compile(r"(^|/)(adam_m|adam_v|global_step|temperature)$")
# The official code's default: one attention head per 64 hidden units (shapes cannot tell).
HEAD_SIZE = 64


def read_checkpoint(path: str) -> dict:
    """{official name: array} of a TF1 checkpoint's model variables."""
    try:
        reader = tf.train.load_checkpoint(path)
    except (tf.errors.NotFoundError, ValueError) as e:
        raise ConfigError(f"--checkpoint {path!r} is not a TF checkpoint (give the prefix, "
                          f"e.g. electra_small/model.ckpt-1000000): {e}") from e
    names = reader.get_variable_to_shape_map()
    return {name: reader.get_tensor(name) for name in sorted(names)
            if not _TRAINING_STATE.search(name)}


def write_checkpoint(weights: dict, prefix: str) -> str:
    """Writes {official name: array} as a TF1 name-based checkpoint; returns the prefix."""
    os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
    names = sorted(weights)
    tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                      tensors=[tf.constant(weights[name]) for name in names])
    return prefix


def _layer_count(weights: dict, scope: str) -> int:
    layers = {int(m.group(1)) for name in weights
              for m in [re.match(rf"{scope}/encoder/layer_(\d+)/", name)] if m}
    return max(layers) + 1 if layers else 0


def _tower_shape(weights: dict, scope: str, num_heads: Optional[int]) -> tuple:
    """(hidden, intermediate, heads, layers) of one tower, from its first layer's shapes."""
    layer = f"{scope}/encoder/layer_0"
    hidden = weights[f"{layer}/attention/self/query/kernel"].shape[1]
    intermediate = weights[f"{layer}/intermediate/dense/kernel"].shape[1]
    heads = num_heads or max(1, hidden // HEAD_SIZE)
    return hidden, intermediate, heads, _layer_count(weights, scope)


def infer_config(weights: dict, tokens: list, source: str, lower_case: Optional[bool] = None,
                 num_heads: Optional[int] = None, discriminator_only: bool = False):
    """The ElectraConfig of an official checkpoint, from its variable shapes.

    Head counts are not visible in shapes: the official rule (hidden / 64) is used unless
    `num_heads` (the discriminator's) is given.
    """
    scope = official_names.DISCRIMINATOR_SCOPE
    if f"{scope}/encoder/layer_0/attention/self/query/kernel" not in weights:
        raise ConfigError(f"{source} has no {scope}/encoder/layer_0 variables: not an "
                          "ELECTRA checkpoint (found e.g. "
                          f"{', '.join(list(weights)[:5]) or 'nothing'}).")
    words = weights[f"{scope}/embeddings/word_embeddings"]
    hidden, intermediate, heads, layers = _tower_shape(weights, scope, num_heads)
    generator = None
    has_generator = "generator/encoder/layer_0/attention/self/query/kernel" in weights
    if has_generator and not discriminator_only:
        g_hidden, g_intermediate, _, g_layers = _tower_shape(weights, "generator", None)
        g_heads = (max(1, int(round(heads * g_hidden / hidden))) if num_heads
                   else max(1, g_hidden // HEAD_SIZE))
        generator = GeneratorShape(g_hidden, g_intermediate, g_heads, g_layers,
                                   untied_embeddings="generator/embeddings/word_embeddings"
                                   in weights)
    return make_config(
        tokens, lower_case, generator, source,
        vocab_size=words.shape[0], embedding_size=words.shape[1], hidden_size=hidden,
        num_layers=layers, num_heads=heads, intermediate_size=intermediate,
        max_position_embeddings=weights[f"{scope}/embeddings/position_embeddings"].shape[0],
        type_vocab_size=weights[f"{scope}/embeddings/token_type_embeddings"].shape[0])


def has_discriminator_head(weights: dict) -> bool:
    return "discriminator_predictions/dense/kernel" in weights
