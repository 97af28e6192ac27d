"""`QueryFirstAttention`: Keras's `MultiHeadAttention` with its scores computed as
query x key, in the layout the softmax reads.

Written by hand because Keras computes the scores as `einsum("aecd,abcd->acbe", key,
query)`: TensorFlow's einsum multiplies in operand order, so the product comes out
[batch, heads, key, query] and is transposed to [batch, heads, query, key]: the largest
tensor of the layer (8 MB at ELECTRA-Small's 32 x 128), copied once more per layer (and its
gradient once more in training). Putting the query first gives the scores directly in that
layout: the exported ELECTRA-Small classifier answering 32 long texts on a 2-core AVX2 EPYC
spent 105 ms in transposes instead of 249 (TensorFlow's profiler).

It also masks by adding a bias: Keras's softmax replaces the masked scores with -1e9
(`where` over [batch, heads, query, key]) and zeroes them again after the softmax (a
second `where`), and the gradient passes back through both. A bias of 0 or -1e9 per key,
[batch, 1, 1, key], added to the scores gives the same probabilities (exp(-1e9 - max) is
0 in every float type, as after Keras's replacement) and leaves no op in the gradient:
the selects were 73 ms of an ELECTRA-Small pretraining step at 32 x 128 (2-core AVX-512
EPYC). Only a query that may attend to no key at all differs (Keras: zeros; here: a
uniform average); padding masks always leave the `[CLS]` key. Same softmax, dropout and
weights.

The heads are split and merged with `swap_positions_and_heads` instead of the transposes
einsum brings (see there), and the query scaling is left to a query projection that can
fold it into its weights (`put_query_first`). In inference, an attention of few scores
runs on TensorFlow's own kernels (`small_attention`).
"""

import math

import keras
import tensorflow as tf
# Keras's masked softmax's fill value (private, as the attention internals used here are).
from keras.src.layers.activations.softmax import _large_negative_number

from electra_tf.layers.inference import form_by_size, gradients_wanted, sequence_shape
from electra_tf.layers.integer_transpose import transpose_as_integers
from electra_tf.layers.onednn_batch_matmul import batch_matmul


@keras.saving.register_keras_serializable(package="electra_tf")
class QueryFirstAttention(keras.layers.MultiHeadAttention):
    """A `MultiHeadAttention` over one sequence axis whose scores come out of the matmul
    as [batch, heads, query, key]; causal masks, flash attention and other attention
    axes go through Keras's `_compute_attention` unchanged."""

    def _compute_attention(self, query, key, value, attention_mask=None, training=None,
                           return_attention_scores=False, use_causal_mask=False):
        scale = keras.ops.cast(self._inverse_sqrt_key_dim, query.dtype)
        scaled_by_projection = getattr(self._query_dense, "output_scale", None) is not None
        if (use_causal_mask or self._flash_attention or len(query.shape) != 4
                or tuple(self._attention_axes) != (1,)):
            if scaled_by_projection:  # Keras's attention scales the query itself
                query = keras.ops.divide(query, scale)
            return super()._compute_attention(query, key, value, attention_mask, training,
                                              return_attention_scores, use_causal_mask)
        if not scaled_by_projection:
            query = keras.ops.multiply(query, scale)
        # [batch, heads, positions, size]
        query, key, value = (swap_positions_and_heads(x) for x in (query, key, value))
        bias = None if attention_mask is None else _mask_bias(attention_mask, query.dtype)

        # In training on oneDNN's batch kernel where TensorFlow would run Eigen's (see there).
        matmul = batch_matmul if training else tf.matmul

        def attention():
            # [batch, heads, query, key]: "btnh,bsnh->bnts"
            scores = matmul(query, key, adjoint_b=True)
            if bias is not None:
                scores = scores + bias
            scores = self._softmax(scores)
            if self._dropout > 0.0:
                weights = self._dropout_layer(scores, training=training)
            else:
                weights = scores
            return matmul(weights, value), scores

        if training or gradients_wanted() or query.dtype != tf.float32:
            context, scores = attention()
        else:
            # Scores per head: batch x query x key.
            counts = (query.shape[0], query.shape[2], key.shape[2])
            context, scores = form_by_size(
                None if None in counts else math.prod(counts),
                lambda: _run_time_scores(query, key), SMALL_ATTENTION_MAX_SCORES,
                lambda: small_attention(query, key, value, bias), attention)
        # [batch, query, heads, size]: "bnts,bsnh->btnh"
        return swap_positions_and_heads(context), scores


# Inference attention of at most SMALL_ATTENTION_MAX_SCORES scores per head runs as
# `small_attention` (it says why).
SMALL_ATTENTION_MAX_SCORES = 2048


def _run_time_scores(query, key):
    """Scores per head (batch x query x key) as a scalar tensor: of the sequences' shape
    (`inference.sequence_shape`) where it is given, else of `query` and `key`."""
    sequences = sequence_shape()
    if sequences is not None:
        return sequences[0] * sequences[1] * sequences[1]
    return tf.shape(query)[0] * tf.shape(query)[2] * tf.shape(key)[2]


def small_attention(query, key, value, bias=None):
    """The attention's context and probabilities ([batch, heads, query, size] and [batch,
    heads, query, key]) on TensorFlow's own kernels, for inference (no dropout).

    Written by hand because TensorFlow's oneDNN build runs every float batch matmul and
    softmax as oneDNN primitives, whose set-up per call outweighs an attention this small;
    `BatchMatMulV3`, which its oneDNN pass leaves to TensorFlow's kernel, and a softmax
    written out in five ops do not: ELECTRA-Small's 12 attentions of 20 tokens took
    0.86-0.91 ms instead of 1.74, those of 32 tokens 1.07 instead of 1.37; from about 48
    tokens, or 8 texts of 20, oneDNN was as fast or faster, at 32 texts of 128 tokens 2.8x
    (chained in a TF1 session; 2-core AMD EPYC Zen 4). The exported classifier's single
    short request took 0.81x as long, its other requests as long as before; with oneDNN
    off, every request as long as before."""
    scores = tf.raw_ops.BatchMatMulV3(x=query, y=key, Tout=query.dtype, adj_y=True)
    if bias is not None:
        scores = scores + bias
    exp = tf.exp(scores - tf.reduce_max(scores, -1, keepdims=True))
    probabilities = exp / tf.reduce_sum(exp, -1, keepdims=True)
    return tf.raw_ops.BatchMatMulV3(x=probabilities, y=value, Tout=query.dtype), probabilities


def swap_positions_and_heads(x):
    """[batch, positions, heads, size] <-> [batch, heads, positions, size]: `x` with axes 1
    and 2 swapped (its own inverse, and so its own gradient), as integers: an exported
    ELECTRA-Small classifier answered a short single request in 10.1 / 10.6 ms instead of
    11.5 / 12.0 with float transposes (48 per request; 2-core AVX-512 EPYC), with the same
    outputs (`integer_transpose` explains)."""
    if not gradients_wanted():
        return transpose_as_integers(x, [0, 2, 1, 3])
    return _swap_positions_and_heads(x)


@tf.custom_gradient
def _swap_positions_and_heads(x):
    # Integers have no gradient in TensorFlow: the swap's own is written out.
    return transpose_as_integers(x, [0, 2, 1, 3]), swap_positions_and_heads


def _mask_bias(attention_mask, dtype):
    """0 where `attention_mask` ([batch, query or 1, key], True or > 0.5 to attend) lets
    a query attend, the number Keras's masked softmax puts there elsewhere (-1e9; -3e4 in
    float16); [batch, 1, query or 1, key] of `dtype`."""
    if attention_mask.dtype != "bool":
        attention_mask = keras.ops.greater(attention_mask, 0.5)
    return keras.ops.expand_dims(
        keras.ops.where(attention_mask, keras.ops.zeros([], dtype),
                        keras.ops.full([], _large_negative_number(dtype), dtype)), 1)


def put_query_first(transformer_layer) -> None:
    """Makes a built keras-hub `TransformerEncoder`'s self-attention a
    `QueryFirstAttention`: the same object (projections, weights, names), another
    `_compute_attention`. keras-hub builds it as Keras's `MultiHeadAttention` with no way
    to choose the class. A query projection with an `output_scale`
    (`flat_einsum_dense.FlatEinsumDense`) is given the query scaling, which it folds into
    its weights in training (see there)."""
    attention = self_attention(transformer_layer)
    attention.__class__ = QueryFirstAttention
    if hasattr(attention._query_dense, "output_scale"):
        attention._query_dense.output_scale = attention._inverse_sqrt_key_dim


def self_attention(transformer_layer) -> keras.layers.MultiHeadAttention:
    """A built keras-hub `TransformerEncoder`'s self-attention layer (a private attribute
    of keras-hub's: this is its one home here)."""
    return transformer_layer._self_attention_layer
