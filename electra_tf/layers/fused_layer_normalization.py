"""`FusedLayerNormalization`: `ClosedFormLayerNormalization` whose forward and backward are
each one small XLA kernel, computing in float32 whatever the input's dtype.

Written by hand because neither Keras nor keras-hub provides it. TensorFlow runs a layer
norm as separate Eigen passes over the [batch, seq, hidden] activations (mean, squared
difference, mean, scale, shift; about as many again for the closed-form gradient), and
under bfloat16 Keras casts the activations to float32 and back around them, in both
directions. One kernel each way reads the activations in their own dtype and writes them
once: an ELECTRA-Small pretraining step on a 2-core AVX-512 EPYC was 3.2-4.6% shorter in
bfloat16 and 1.3-1.6% in float32 (`bench/runtime_option_ab.py`). The scale and shift
gradients (sums over batch and sequence) stay TensorFlow's: XLA's CPU column sums were
three times slower.

The same function as `ClosedFormLayerNormalization` (its statistics, in its order) to
float32 rounding. Like `FusedDropout`, only training runs use it
(`RuntimeOptions.fused_layer_norm`); models built elsewhere, and exports, keep
`ClosedFormLayerNormalization`.
"""

import keras
import tensorflow as tf

from electra_tf import traced
from electra_tf.layers.bfloat16_rounding import narrow
from electra_tf.layers.closed_form_layer_normalization import (
    ClosedFormLayerNormalization, layer_normalization, normalization_gradients,
    normalize_with_statistics)
from electra_tf.layers.row_buckets import padded_rows, rows_known


@traced.function(jit_compile=True)
def _forward(x, gamma, beta, epsilon):
    outputs, mean, reciprocal_std = normalize_with_statistics(
        tf.cast(x, tf.float32), gamma, beta, epsilon)
    return narrow(outputs, x.dtype), mean, reciprocal_std


@traced.function(jit_compile=True)
def _backward(x, gamma, mean, reciprocal_std, upstream):
    inputs_gradient, scaled_normalized = normalization_gradients(
        tf.cast(x, tf.float32), gamma, mean, reciprocal_std, tf.cast(upstream, tf.float32))
    return narrow(inputs_gradient, x.dtype), scaled_normalized


def _forward_in_buckets(x, gamma, beta, epsilon):
    padded, rows = padded_rows(x)
    outputs, mean, reciprocal_std = _forward(padded, gamma, beta, epsilon)
    return tf.reshape(outputs[:rows], tf.shape(x)), mean, reciprocal_std


def _backward_in_buckets(x, gamma, mean, reciprocal_std, upstream):
    padded, rows = padded_rows(x)
    inputs_gradient, scaled_normalized = _backward(
        padded, gamma, mean, reciprocal_std, padded_rows(upstream)[0])
    return (tf.reshape(inputs_gradient[:rows], tf.shape(x)),
            tf.reshape(scaled_normalized[:rows], tf.shape(x)))


def fused_layer_normalization(x, gamma, beta, epsilon: float):
    """`x` (any float dtype) normalized over its last axis, scaled by `gamma` and shifted by
    `beta` (float32), computed in float32; the output in `x`'s dtype. Where `x`'s rows are
    unknown until run time, the kernels run over them padded to a bucket (`row_buckets`):
    a few kernels compiled, not one for every batch shape (the statistics between the two
    directions keep the padded rows)."""
    forward, backward = ((_forward, _backward) if rows_known(x)
                         else (_forward_in_buckets, _backward_in_buckets))
    return layer_normalization(x, gamma, beta, tf.constant(epsilon, tf.float32),
                               forward=forward, backward=backward,
                               inference=lambda *arguments: forward(*arguments)[0])


@keras.saving.register_keras_serializable(package="electra_tf")
class FusedLayerNormalization(ClosedFormLayerNormalization):
    """A `ClosedFormLayerNormalization` computed by `fused_layer_normalization`; float64
    inputs and the cases it leaves to Keras (see there) go through its `call`."""

    def call(self, inputs):
        if inputs.dtype == tf.float64 or not self.closed_form_applies(inputs):
            return super().call(inputs)
        outputs = fused_layer_normalization(inputs, keras.ops.cast(self.gamma, "float32"),
                                            keras.ops.cast(self.beta, "float32"),
                                            self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)


def use_fused_layer_norms(model) -> list:
    """Makes every Keras `LayerNormalization` and `ClosedFormLayerNormalization` of a built
    `model` a `FusedLayerNormalization`: the same objects (weights, names, checkpoints),
    another `call`. keras-hub creates the generator head's norm with no way to choose its
    class. Returns the layers changed, each with its class before."""
    changed = []
    for layer in model._flatten_layers(include_self=False):
        if type(layer) in (keras.layers.LayerNormalization, ClosedFormLayerNormalization):
            changed.append((layer, type(layer)))
            layer.__class__ = FusedLayerNormalization
    return changed
