"""The masked-language-model head whose output layer is the word-embedding matrix."""

import keras_hub

from electra_tf.layers.activations import gelu
from electra_tf.layers.initializers import weight_initializer


def tied_masked_lm_head(token_embedding, layer_norm_epsilon=1e-12, initializer_range=0.02,
                        name="mlm_predictions"):
    """keras-hub's `MaskedLMHead` with `token_embedding` (a `ReversibleEmbedding`)
    transposed as its output layer, plus its own bias.

    dense(embedding size, GELU) -> LayerNorm -> logits. Call it on a sequence
    [batch, seq, hidden] with `mask_positions` int [batch, n]; returns float32 logits
    [batch, n, vocab].
    """
    return keras_hub.layers.MaskedLMHead(
        token_embedding=token_embedding, intermediate_activation=gelu,
        layer_norm_epsilon=layer_norm_epsilon,
        kernel_initializer=weight_initializer(initializer_range),
        name=name,
        # Under mixed precision keras-hub adds its float32 bias to bfloat16 logits and
        # fails; a float32 head works and keeps the MLM softmax in float32 (the vocabulary
        # products run in the tied embedding's compute dtype: `ElectraEmbeddings`).
        dtype="float32")
