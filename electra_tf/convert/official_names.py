"""The one place that knows our variables' names in the official ELECTRA TF1 checkpoints.

Every converter goes through this table: official TF1 checkpoints use these names as they
are, Hugging Face's names are a mechanical rewrite of them (`huggingface.py`), and a
keras-hub backbone has the same transformer layers as ours. The official layout is
`model/modeling.py` + `run_pretraining.py` of google-research/electra:

    electra/embeddings/{word,position,token_type}_embeddings, .../LayerNorm/{gamma,beta}
        (the shared block; `generator/embeddings/...` when the generator's is untied)
    {electra,generator}/embeddings_project/{kernel,bias}
    {electra,generator}/encoder/layer_<i>/attention/self/{query,key,value}/{kernel,bias}
        .../attention/output/dense, .../attention/output/LayerNorm,
        .../intermediate/dense, .../output/dense, .../output/LayerNorm
    generator_predictions/{dense,LayerNorm}/..., generator_predictions/output_bias
    discriminator_predictions/dense/..., discriminator_predictions/dense_1/...

Attention kernels are [hidden, hidden] there and [hidden, heads, head_size] in Keras'
`MultiHeadAttention`; both are row-major views of the same matrix, so a reshape converts.
"""

import numpy as np

from electra_tf.errors import ConfigError

DISCRIMINATOR_SCOPE = "electra"
GENERATOR_SCOPE = "generator"

# keras-hub `TransformerEncoder` weight (relative path) -> official name inside layer_<i>.
TRANSFORMER_LAYER = {
    **{f"self_attention_layer/{part}/{kind}": f"attention/self/{part}/{kind}"
       for part in ("query", "key", "value") for kind in ("kernel", "bias")},
    "self_attention_layer/attention_output/kernel": "attention/output/dense/kernel",
    "self_attention_layer/attention_output/bias": "attention/output/dense/bias",
    "self_attention_layer_norm/gamma": "attention/output/LayerNorm/gamma",
    "self_attention_layer_norm/beta": "attention/output/LayerNorm/beta",
    "feedforward_intermediate_dense/kernel": "intermediate/dense/kernel",
    "feedforward_intermediate_dense/bias": "intermediate/dense/bias",
    "feedforward_output_dense/kernel": "output/dense/kernel",
    "feedforward_output_dense/bias": "output/dense/bias",
    "feedforward_layer_norm/gamma": "output/LayerNorm/gamma",
    "feedforward_layer_norm/beta": "output/LayerNorm/beta",
}
DENSE = {"kernel": "kernel", "bias": "bias"}
_EMBEDDINGS = {
    "word_embeddings/embeddings": "word_embeddings",
    "position_embeddings/embeddings": "position_embeddings",
    "token_type_embeddings/embeddings": "token_type_embeddings",
    "layer_norm/gamma": "LayerNorm/gamma",
    "layer_norm/beta": "LayerNorm/beta",
    # Not a variable of the official format: a "gdes" block's word matrix is read as the
    # sum its `word_table` gives (`_WordTable`).
    "token_delta": None,
}
_GENERATOR_HEAD = {
    "intermediate_dense/kernel": "dense/kernel",
    "intermediate_dense/bias": "dense/bias",
    "intermediate_layer_norm/gamma": "LayerNorm/gamma",
    "intermediate_layer_norm/beta": "LayerNorm/beta",
    "output_bias": "output_bias",
}
_DISCRIMINATOR_HEAD = {
    "dense/kernel": "dense/kernel",
    "dense/bias": "dense/bias",
    "dense_prediction/kernel": "dense_1/kernel",
    "dense_prediction/bias": "dense_1/bias",
}


def is_generator_name(name: str) -> bool:
    """True for the generator's own variables (`generator/...`, `generator_predictions/...`)."""
    return name.startswith(GENERATOR_SCOPE)


def layer_weights(layer, prefix: str, table: dict) -> dict:
    """{official name: variable} for every weight of `layer`, named by `table`.

    A weight the table does not know is an error, so a library upgrade that renames or adds
    a weight cannot leave it silently unconverted. Weights the layer only borrows (the MLM
    head's tied word embeddings) live under their owner's path and are named there.
    """
    mapped = {}
    for variable in layer.weights:
        parts = variable.path.split("/")
        if layer.name not in parts:
            continue
        relative = "/".join(parts[parts.index(layer.name) + 1:])
        if relative not in table:
            raise KeyError(f"{variable.path}: no official name for {relative!r} "
                           f"in {type(layer).__name__} {layer.name!r}")
        if table[relative] is not None:
            mapped[f"{prefix}/{table[relative]}"] = variable
    return mapped


class _WordTable:
    """The word matrix of a gradient-disentangled embedding block (`tie_embeddings="gdes"`):
    the sum `ElectraEmbeddings.word_table` gives, read like a variable (never assigned:
    no other format holds a "gdes" model's parts)."""

    def __init__(self, embeddings):
        self.embeddings = embeddings
        self.shape = embeddings.token_embedding.embeddings.shape

    def numpy(self):
        return np.asarray(self.embeddings.word_table())


def encoder_weights(encoder, scope: str, embedding_scope: str) -> dict:
    """{official name: variable} for an `ElectraEncoder` (its embeddings included)."""
    mapped = layer_weights(encoder.embeddings, f"{embedding_scope}/embeddings", _EMBEDDINGS)
    if encoder.embeddings.gradient_disentangled:
        mapped[f"{embedding_scope}/embeddings/word_embeddings"] = _WordTable(
            encoder.embeddings)
    if encoder.embeddings_project is not None:
        mapped.update(layer_weights(encoder.embeddings_project,
                                    f"{scope}/embeddings_project", DENSE))
    for i, layer in enumerate(encoder.transformer_layers):
        mapped.update(layer_weights(layer, f"{scope}/encoder/layer_{i}", TRANSFORMER_LAYER))
    return mapped


def discriminator_weights(encoder, head=None) -> dict:
    """The discriminator encoder and, when given, its replaced-token-detection head."""
    mapped = encoder_weights(encoder, DISCRIMINATOR_SCOPE, DISCRIMINATOR_SCOPE)
    if head is not None:
        mapped.update(layer_weights(head, "discriminator_predictions", _DISCRIMINATOR_HEAD))
    return mapped


def generator_weights(pretrainer) -> dict:
    """The generator tower and its MLM head (without the shared embeddings' names twice)."""
    untied = pretrainer.generator.embeddings is not pretrainer.discriminator.embeddings
    mapped = encoder_weights(pretrainer.generator, GENERATOR_SCOPE,
                             GENERATOR_SCOPE if untied else DISCRIMINATOR_SCOPE)
    if pretrainer.config.tie_embeddings == "gdes":  # its own block, the word matrix borrowed
        mapped[f"{GENERATOR_SCOPE}/embeddings/word_embeddings"] = (
            pretrainer.generator.embeddings.token_embedding.embeddings)
    mapped.update(layer_weights(pretrainer.generator_head, "generator_predictions",
                                _GENERATOR_HEAD))
    return mapped


def pretrainer_weights(pretrainer, with_generator: bool = True, with_head: bool = True) -> dict:
    """{official name: variable} for an `ElectraPretrainer`: the discriminator, and its head
    and the generator unless left out."""
    mapped = discriminator_weights(pretrainer.discriminator,
                                   pretrainer.discriminator_head if with_head else None)
    if with_generator:
        mapped.update(generator_weights(pretrainer))
    return mapped


def official_shape(name: str, shape) -> tuple:
    """The shape a variable of ours with `shape` has under official `name`."""
    shape = tuple(shape)
    if "/attention/self/" in name:
        return (shape[0], int(np.prod(shape[1:]))) if name.endswith("kernel") else (
            int(np.prod(shape)),)
    if name.endswith("/attention/output/dense/kernel"):
        return (int(np.prod(shape[:-1])), shape[-1])
    return shape


def to_official(name: str, value: np.ndarray) -> np.ndarray:
    return np.reshape(value, official_shape(name, value.shape))


def assign(mapped: dict, weights: dict, source: str) -> None:
    """Sets every variable of `mapped` from `weights` ({official name: array}).

    Raises ConfigError listing every missing weight or shape mismatch, before assigning any.
    """
    missing = sorted(set(mapped) - set(weights))
    if missing:
        raise ConfigError(f"{source} lacks {len(missing)} weight(s) the model needs: "
                         + ", ".join(missing[:20]) + (" ..." if len(missing) > 20 else ""))
    wrong = [f"{name} is {tuple(weights[name].shape)}, the model needs "
             f"{official_shape(name, variable.shape)}"
             for name, variable in sorted(mapped.items())
             if tuple(weights[name].shape) != official_shape(name, variable.shape)]
    if wrong:
        raise ConfigError(f"{source}: shape mismatch: " + "; ".join(wrong[:10]))
    for name, variable in mapped.items():
        variable.assign(np.reshape(weights[name], variable.shape).astype(variable.dtype))


def read(mapped: dict) -> dict:
    """{official name: array in the official layout} from our variables."""
    return {name: to_official(name, np.asarray(variable.numpy()))
            for name, variable in mapped.items()}
