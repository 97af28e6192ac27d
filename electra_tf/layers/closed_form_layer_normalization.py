"""`ClosedFormLayerNormalization`: Keras's `LayerNormalization` with its gradient written out.

Written by hand because TensorFlow differentiates Keras's layer normalization op by op:
each broadcast in it (the mean and variance over the last axis, the scale and shift over
the leading ones) has dynamic shapes under `fit`, so its gradient is built from `Shape`,
`BroadcastGradientArgs`, `Sum` and `Reshape` ops, about 60 graph ops per normalization.
ELECTRA-Small's fine-tuning step held 1,700 of them (of 10,552) and the pretraining step
twice as many, all traced in Python and optimised by Grappler before the first step runs.
The closed form (the textbook layer-norm backward) is a dozen ops and fewer passes over the
activations. The forward pass is Keras's, operation for operation, so outputs are
bit-identical; gradients agree to float32 rounding. Graphs that take no gradients
(`inference_only`) normalize in a cheaper order instead (`normalize_for_inference`).
"""

import keras
import tensorflow as tf

from electra_tf.layers.inference import (gradients_wanted, onednn_at_run_time,
                                         onednn_layer_norms_wanted, sequence_shape)


@keras.saving.register_keras_serializable(package="electra_tf")
class ClosedFormLayerNormalization(keras.layers.LayerNormalization):
    """A `LayerNormalization` over the last axis with scale and offset, differentiated in
    closed form; other axes, `rms_scaling` or a missing scale or offset go through
    `LayerNormalization.call` unchanged."""

    def call(self, inputs):
        if not self.closed_form_applies(inputs):
            return super().call(inputs)
        # As Keras: statistics in at least float32, the output in the compute dtype.
        compute_dtype = keras.backend.result_type(inputs.dtype, "float32")
        outputs = layer_normalization(
            keras.ops.cast(inputs, compute_dtype), keras.ops.cast(self.gamma, compute_dtype),
            keras.ops.cast(self.beta, compute_dtype), self.epsilon)
        return keras.ops.cast(outputs, self.compute_dtype)

    def closed_form_applies(self, inputs) -> bool:
        """Whether this normalization is over the last axis with a scale and an offset."""
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        rank = len(inputs.shape)
        return (not self.rms_scaling and self.center and self.scale
                and [axis % rank for axis in axes] == [rank - 1])


def normalize_with_statistics(x, gamma, beta, epsilon):
    """Keras's forward pass (`keras.ops.layer_normalization`), in its order: (outputs, mean,
    reciprocal standard deviation), the statistics over the last axis, kept."""
    mean = tf.reduce_mean(x, -1, keepdims=True)
    variance = tf.reduce_mean(tf.math.squared_difference(x, mean), -1, keepdims=True)
    reciprocal_std = tf.math.rsqrt(variance + epsilon)
    scale = reciprocal_std * gamma
    return x * scale + (beta - mean * scale), mean, reciprocal_std


# Inference layer norms of at least this many rows run as `onednn_layer_normalization`
# where oneDNN runs: an export's, per request, and `predict`'s, in a function of their own
# (`normalize_for_inference` says why).
ONEDNN_LAYER_NORM_MIN_ROWS = 384


def normalize_for_inference(x, gamma, beta, epsilon):
    """The same normalization as `normalize_with_statistics` (to float32 rounding), for
    graphs that take no gradients: `normalize_centered`; in an export's graph
    (`inference.onednn_at_run_time`), per request, `onednn_layer_normalization` for
    sequences of at least ONEDNN_LAYER_NORM_MIN_ROWS rows where oneDNN multiplies; within
    `inference.onednn_layer_norms()` (`predict`'s function for such batches where oneDNN
    is on), `onednn_layer_normalization` where the rows are unknown when tracing.

    Why per request and by the runtime: 25 normalizations chained, each with a residual,
    as a TF1 session runs them (ms, `normalize_centered` against oneDNN's kernel; 2-core
    Sapphire Rapids): 256 rows 2.0 against 3.9, 320 rows 4.3 against 4.3, 384 rows 5.9
    against 4.4, 512 rows 10.0 against 5.2, 4,096 rows 47.3 against 17.6. oneDNN's kernel
    costs ~0.15 ms a call; TensorFlow's separate passes slow down past 256 rows, once they
    use both cores. Where oneDNN is off, the same graph runs Eigen's batch norm with NCHW
    transposes, 2-5x slower than `normalize_centered`."""
    shape = sequence_shape()
    if (shape is None or x.shape.rank != 3 or x.shape[-1] is None
            or x.dtype != tf.float32 or not isinstance(epsilon, float)):
        return normalize_centered(x, gamma, beta, epsilon)
    if onednn_layer_norms_wanted() and x.shape[:2].num_elements() is None:
        return onednn_layer_normalization(x, gamma, beta, epsilon)
    onednn = onednn_at_run_time()
    if onednn is None:
        return normalize_centered(x, gamma, beta, epsilon)
    return tf.cond(tf.logical_and(onednn, shape[0] * shape[1] >= ONEDNN_LAYER_NORM_MIN_ROWS),
                   lambda: onednn_layer_normalization(x, gamma, beta, epsilon),
                   lambda: normalize_centered(x, gamma, beta, epsilon))


def normalize_centered(x, gamma, beta, epsilon):
    """The same normalization as `normalize_with_statistics` (to float32 rounding) in the
    order `beta + (x - mean) * (rsqrt(variance + epsilon) * gamma)`, for graphs that take
    no gradients. TensorFlow runs each op as its own pass over the activations, with
    oneDNN or without; in this order ELECTRA-Small's 25 normalizations took 3.3 instead of
    5.4 ms at 1 x 128 tokens and 59 instead of 89 ms at 32 x 128 (2-core Sapphire Rapids;
    with oneDNN off, TensorFlow's own kernels: 2.6 / 55 against 5.2 / 83)."""
    mean = tf.reduce_mean(x, -1, keepdims=True)
    centered = x - mean
    variance = tf.reduce_mean(tf.square(centered), -1, keepdims=True)
    return beta + centered * (tf.math.rsqrt(variance + epsilon) * gamma)


def onednn_layer_normalization(x, gamma, beta, epsilon: float):
    """The same normalization as `normalize_with_statistics` (to float32 rounding) as the
    graph of Keras 2's fused layer norm, which TensorFlow's graph optimiser runs as one
    oneDNN kernel (`_MklLayerNorm`) where oneDNN is on: a batch norm in training mode over
    the rows of `x` as the channels of a [1, rows, features, 1] NCHW tensor, with ones and
    zeros as its scale and offset, then the scale and shift. The optimiser matches it only
    where the rows are unknown when it runs (else constant folding takes the `Fill`s), and
    only where each `Fill` has one consumer: hence the rows from `tf.size`, not from the
    reshaped tensor's shape. Elsewhere it runs as Eigen's batch norm, several times slower
    (`normalize_for_inference`)."""
    features = x.shape[-1]
    rows = tf.size(x) // features
    channels = tf.reshape(x, tf.stack([1, rows, features, 1]))
    empty = tf.constant([], tf.float32)
    normalized = tf.raw_ops.FusedBatchNormV3(
        x=channels, scale=tf.fill(tf.reshape(rows, [1]), 1.0),
        offset=tf.fill(tf.reshape(rows, [1]), 0.0), mean=empty, variance=empty,
        epsilon=epsilon, data_format="NCHW", is_training=True)[0]
    return tf.reshape(normalized, tf.shape(x)) * gamma + beta


def normalization_gradients(x, gamma, mean, reciprocal_std, upstream):
    """The textbook layer-norm backward: (the input's gradient, upstream x normalized, whose
    sum over the leading axes is the scale's gradient)."""
    normalized = (x - mean) * reciprocal_std
    scaled = upstream * gamma
    inputs_gradient = reciprocal_std * (
        scaled - tf.reduce_mean(scaled, -1, keepdims=True)
        - normalized * tf.reduce_mean(scaled * normalized, -1, keepdims=True))
    return inputs_gradient, upstream * normalized


def layer_normalization(x, gamma, beta, epsilon, forward=normalize_with_statistics,
                        backward=normalization_gradients, inference=normalize_for_inference):
    """Normalizes `x` over its last axis, then scales by `gamma` and shifts by `beta`, with
    `forward` and `backward` computing what `normalize_with_statistics` and
    `normalization_gradients` do (`fused_layer_normalization` passes XLA kernels); the
    scale's and shift's gradients are summed in `gamma`'s dtype. Where no gradients are
    wanted (`inference_only`), `inference` computes the outputs alone."""
    if not gradients_wanted():
        return inference(x, gamma, beta, epsilon)

    @tf.custom_gradient
    def normalize(x, gamma, beta):
        outputs, mean, reciprocal_std = forward(x, gamma, beta, epsilon)

        def gradient(upstream):
            inputs_gradient, scaled_normalized = backward(x, gamma, mean, reciprocal_std,
                                                          upstream)
            leading_axes = list(range(len(x.shape) - 1))
            return (inputs_gradient, tf.reduce_sum(scaled_normalized, leading_axes),
                    tf.reduce_sum(tf.cast(upstream, gamma.dtype), leading_axes))

        return outputs, gradient

    return normalize(x, gamma, beta)


def use_closed_form_layer_norms(transformer_layer) -> None:
    """Makes a built keras-hub `TransformerEncoder`'s two layer normalizations
    `ClosedFormLayerNormalization`: the same objects (weights, names, checkpoints), another
    `call`. keras-hub creates them as Keras's `LayerNormalization` with no way to choose
    the class."""
    for norm in layer_norms(transformer_layer):
        norm.__class__ = ClosedFormLayerNormalization


def layer_norms(transformer_layer) -> tuple:
    """A built keras-hub `TransformerEncoder`'s attention and feed-forward layer norms
    (private attributes of keras-hub's: this is their one home here)."""
    return (transformer_layer._self_attention_layer_norm,
            transformer_layer._feedforward_layer_norm)
