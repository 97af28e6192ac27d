"""`TransformerLayer`: keras-hub's `TransformerEncoder` whose post-LN forward pass outside
training picks its feed-forward layer's form by the number of rows.

Written by hand because keras-hub's `call` calls the feed-forward layer's two `Dense`
layers one after the other, each on its own, while `flat_dense.feedforward_in_halves`
(which says why, and where it pays) needs both at once. Outside training, a post-LN layer
runs `post_norm_output`: keras-hub's sublayers, called in keras-hub's order, with the
feed-forward layer in halves where it pays. Training, pre-LN layers, custom attention
masks and attention scores go through keras-hub's `call` unchanged.
"""

import keras
import keras_hub
import tensorflow as tf

from electra_tf.layers.closed_form_layer_normalization import layer_norms
from electra_tf.layers.flat_dense import (SPLIT_MAX_ROWS_ACTIVATED, FlatDense,
                                          feedforward_halves_max_rows, feedforward_in_halves,
                                          flat_matmul, leading_shape, run_time_rows)
from electra_tf.layers.flat_einsum_dense import feedforward_layers
from electra_tf.layers.inference import forms_picked_per_call, large_forms, small_forms
from electra_tf.layers.query_first_attention import self_attention


@keras.saving.register_keras_serializable(package="electra_tf")
class TransformerLayer(keras_hub.layers.TransformerEncoder):
    """A keras-hub `TransformerEncoder` computing its post-LN forward pass outside training
    as `post_norm_output` (the module says why)."""

    def call(self, inputs, padding_mask=None, attention_mask=None, training=None,
             return_attention_scores=False):
        if (training or self.normalize_first or padding_mask is None
                or attention_mask is not None or return_attention_scores):
            return super().call(inputs, padding_mask=padding_mask,
                                attention_mask=attention_mask, training=training,
                                return_attention_scores=return_attention_scores)
        return post_norm_output(self, inputs, inputs, padding_mask[:, None, :], training)


def post_norm_output(transformer_layer, query, value, attention_mask, training=None):
    """A built post-LN keras-hub `TransformerEncoder`'s output for `query` attending to
    `value` under `attention_mask` ([batch, query or 1, key]): its `call`'s sublayers in
    its order, but for the feed-forward layer, in the form `feedforward` picks."""
    y = self_attention(transformer_layer)(query=query, value=value,
                                          attention_mask=attention_mask, training=training)
    attention_norm, feedforward_norm = layer_norms(transformer_layer)
    y = attention_norm(transformer_layer._self_attention_dropout(y, training=training) + query)
    z = transformer_layer._feedforward_dropout(feedforward(transformer_layer, y, training),
                                               training=training)
    return feedforward_norm(z + y)


def feedforward(transformer_layer, x, training=None):
    """A built keras-hub `TransformerEncoder`'s feed-forward layer applied to `x` ([batch,
    positions, hidden]): outside training, float32, from `SPLIT_MAX_ROWS_ACTIVATED` + 1 to
    `feedforward_halves_max_rows` rows, `feedforward_in_halves`; else its two layers in
    turn. Rows unknown when tracing are chosen per call within `inference.forms_per_call`
    (exports), else the layers run in turn.

    An export's layer chooses first whether its rows are at most `SPLIT_MAX_ROWS_ACTIVATED`
    (its products then split, known to be within their limits, with no choice of their
    own), then whether they are at most the halves' limit (beyond it, each product
    chooses as before). Each choice adds nodes to every request (switches, merges, the
    branches' own shapes): an export's short single request took 2-4% longer than before
    this form, and longer still with the two choices the other way round (2-core
    Sapphire Rapids)."""
    intermediate, output = feedforward_layers(transformer_layer)

    def in_turn():
        return output(intermediate(x))

    limit = 0
    if (not training and x.dtype == tf.float32 and len(x.shape) == 3
            and all(type(layer) is FlatDense and layer.multiplies_flat() and layer.use_bias
                    and layer.kernel.dtype == tf.float32 for layer in (intermediate, output))
            and intermediate.units % 2 == 0):
        limit = feedforward_halves_max_rows(x.shape[-1], intermediate.units)
    rows = x.shape[0] * x.shape[1] if x.shape[:2].is_fully_defined() else None
    # Rows unknown, and no choice per call: Keras's `predict` function, or `predict`'s
    # function for few rows, whose products take the small forms.
    if limit <= SPLIT_MAX_ROWS_ACTIVATED or (rows is None and not forms_picked_per_call()):
        return in_turn()
    if rows is not None and not SPLIT_MAX_ROWS_ACTIVATED < rows <= limit:
        return in_turn()
    flat = tf.reshape(x, (-1, x.shape[-1]))
    if rows is not None:
        return tf.reshape(feedforward_in_halves(flat, intermediate, output),
                          x.shape[:-1].as_list() + [output.units])

    # Per call: the branches multiply 2-D rows, reshaped once outside them (each reshape
    # inside a `tf.cond`'s branch adds its own shape's nodes to every request).
    rows_now = run_time_rows(flat, 2)

    def in_turn_split():
        with small_forms():  # both products split: known to be within their limits here
            hidden = flat_matmul(flat, intermediate.kernel, intermediate.bias, 1,
                                 activation=intermediate.activation)
            return flat_matmul(hidden, output.kernel, output.bias, 1)

    def in_halves():
        return feedforward_in_halves(flat, intermediate, output)

    def in_turn_flat():
        with large_forms():  # beyond `limit`, itself at least every product's split limit
            return tf.reshape(in_turn(), (-1, output.units))

    y = tf.cond(rows_now <= SPLIT_MAX_ROWS_ACTIVATED, in_turn_split,
                lambda: tf.cond(rows_now <= limit, in_halves, in_turn_flat))
    return tf.reshape(y, tf.concat([leading_shape(x, 1), [output.units]], 0))
