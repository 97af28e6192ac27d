"""keras-hub `ElectraBackbone` weights <-> official names (its pooler has no counterpart).

keras-hub's backbone is the discriminator encoder with the same `TransformerEncoder` layers
as ours, but its layers use the tanh approximation of GELU: a converted model matches it
only to about 1e-3, and matches the official/HF ELECTRA exactly.
"""

import os

from electra_tf import files
from electra_tf.errors import ConfigError
from electra_tf.convert import official_names
from electra_tf.convert.configs import check_weights_size, make_config

_SCOPE = official_names.DISCRIMINATOR_SCOPE
# Our config field -> the ElectraBackbone argument (and attribute) holding it.
_SIZES = {"vocab_size": "vocab_size", "embedding_size": "embedding_dim",
          "hidden_size": "hidden_dim", "num_layers": "num_layers", "num_heads": "num_heads",
          "intermediate_size": "intermediate_dim",
          "max_position_embeddings": "max_sequence_length", "type_vocab_size": "num_segments"}
_EMBEDDINGS = (
    ("token_embedding", {"embeddings": "word_embeddings"}),
    ("position_embedding", {"embeddings": "position_embeddings"}),
    ("segment_embedding", {"embeddings": "token_type_embeddings"}),
    ("embeddings_layer_norm", {"gamma": "LayerNorm/gamma", "beta": "LayerNorm/beta"}),
)


def load_backbone(path: str):
    """A keras-hub ElectraBackbone from a preset directory or a `.keras` file."""
    import keras
    import keras_hub

    if os.path.isdir(path):
        _check_preset_size(path)
        return keras_hub.models.ElectraBackbone.from_preset(path)
    if path.endswith(".keras") and os.path.isfile(path):
        return keras.saving.load_model(path)
    raise ConfigError(f"--checkpoint {path!r}: give a keras-hub preset directory (written by "
                      "`backbone.save_to_preset`) or a `.keras` file.")


def _check_preset_size(path: str) -> None:
    """`configs.check_weights_size` on a preset's config.json, before keras-hub builds it."""
    config_path, weights = (os.path.join(path, name)
                            for name in ("config.json", "model.weights.h5"))
    config = (files.read_json(config_path, "not a keras-hub preset file.") or {}).get(
        "config", {})
    if not os.path.isfile(weights):
        return  # keras-hub reports what is missing
    try:
        architecture = {ours: int(config[theirs]) for ours, theirs in _SIZES.items()}
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"{config_path} is not an ElectraBackbone config ({e!r}).") from e
    check_weights_size(architecture, [weights], config_path)


def preset_vocab(path: str):
    """The vocabulary saved beside a keras-hub preset, if any."""
    candidate = os.path.join(path, "assets", "tokenizer", "vocabulary.txt")
    return candidate if os.path.isfile(candidate) else None


def backbone_weights(backbone) -> dict:
    """{official name: variable} of a keras-hub ElectraBackbone, all but its `pooled_dense`
    pooler (ELECTRA has none: its "pooled output" is the [CLS] vector)."""
    mapped = {}
    for name, table in _EMBEDDINGS:
        mapped.update(official_names.layer_weights(
            backbone.get_layer(name), f"{_SCOPE}/embeddings", table))
    if backbone.hidden_dim != backbone.embedding_dim:
        mapped.update(official_names.layer_weights(
            backbone.get_layer("embeddings_projection"), f"{_SCOPE}/embeddings_project",
            official_names.DENSE))
    for i, layer in enumerate(backbone.transformer_layers):
        mapped.update(official_names.layer_weights(
            layer, f"{_SCOPE}/encoder/layer_{i}", official_names.TRANSFORMER_LAYER))
    return mapped


def new_backbone(config):
    """A keras-hub ElectraBackbone of `config`'s discriminator (random weights)."""
    import keras_hub

    return keras_hub.models.ElectraBackbone(
        dropout=config.dropout,
        **{theirs: getattr(config, ours) for ours, theirs in _SIZES.items()})


def backbone_config(backbone, tokens: list, lower_case, source: str):
    """Our `ElectraConfig` of a keras-hub ElectraBackbone."""
    return make_config(
        tokens, lower_case, None, source, dropout=backbone.dropout,
        **{ours: getattr(backbone, theirs) for ours, theirs in _SIZES.items()})
