"""`FlatDense`: Keras's `Dense` over [batch, seq, features] as one 2-D `MatMul` + `BiasAdd`.

Written by hand because Keras's TensorFlow backend multiplies a 3-D input by a 2-D kernel
with `tf.tensordot`, which, with the batch and sequence lengths unknown (as under `fit`),
builds about twenty shape-computing graph ops around each matmul (and more for its
gradient), and adds the bias as a separate broadcasting `AddV2`. Flattening the input to
[batch x seq, features] takes a few reshapes, and a 2-D `MatMul` followed by `BiasAdd` is
what TensorFlow's graph optimiser fuses into one oneDNN `_FusedMatMul`. Same weights, names
and values (to float32 rounding).
"""

import math

import keras
import tensorflow as tf

from electra_tf.layers.integer_transpose import transpose_as_integers


@keras.saving.register_keras_serializable(package="electra_tf")
class FlatDense(keras.layers.Dense):
    """A `Dense` whose inputs of rank 3 or more are flattened to one 2-D matmul; 2-D
    inputs, LoRA and quantized kernels go through `Dense.call` unchanged."""

    def call(self, inputs, training=None):
        if len(inputs.shape) <= 2 or self.lora_enabled or self.quantization_mode is not None:
            return super().call(inputs, training=training)
        return flat_matmul(inputs, self.kernel, self.bias, contracted_axes=1,
                           activation=self.activation)


def flat_matmul(inputs, kernel, bias, contracted_axes, activation=None):
    """`activation(tensordot(inputs, kernel, contracted_axes) + bias)` as a 2-D `MatMul`
    and `BiasAdd` between reshapes; `bias` (or None) has the shape of the kernel's
    uncontracted axes. TensorFlow's own ops, not `keras.ops`: tracing them is cheaper, and
    this runs 148 times in ELECTRA-Small's pretraining step.

    With one output axis the activation runs on the 2-D product, before the reshape:
    Grappler fuses a `MatMul`, `BiasAdd` and GELU into one oneDNN kernel only when nothing
    stands between them (the feed-forward layers of an exported classifier)."""
    contracted = math.prod(kernel.shape[:contracted_axes])
    produced = tuple(kernel.shape[contracted_axes:])
    kernel = tf.convert_to_tensor(kernel)
    if kernel.shape.rank != 2:
        kernel = tf.reshape(kernel, (contracted, math.prod(produced)))
    x = matmul(tf.reshape(inputs, (-1, contracted)), kernel)
    if bias is not None:
        bias = tf.convert_to_tensor(bias)
        x = tf.nn.bias_add(x, bias if bias.shape.rank == 1 else tf.reshape(bias, (-1,)))
    output_shape = tf.concat([tf.shape(inputs)[:-contracted_axes], produced], 0)
    if activation is None:
        return tf.reshape(x, output_shape)
    if len(produced) == 1:  # the 2-D product's last axis is the output's
        return tf.reshape(activation(x), output_shape)
    return activation(tf.reshape(x, output_shape))


def matmul(x, kernel):
    """`tf.matmul(x, kernel)` of 2-D tensors; when the kernel is float32 and at least as
    wide as it is tall, its input gradient multiplies by a transposed copy of the kernel.

    Why: TensorFlow's gradient multiplies by the kernel read transposed (`transpose_b`),
    and oneDNN's float32 matmul runs that form slowly for such kernels: ELECTRA-Small's
    feed-forward input gradient, [4096, 1024] x [256, 1024]^T, took 14.4 ms against 11.5
    with the kernel transposed first, its attention projections' 3.3-3.8 against 3.0-3.3
    (2-core AVX-512 EPYC); narrower kernels and bfloat16 ones ran as fast or faster as
    they are. The copy is transposed as integers, which Grappler does not fold back into
    the matmul. A float32 pretraining step of ELECTRA-Small: 2.7-3.5% shorter.
    """
    if kernel.dtype != tf.float32 or kernel.shape[1] < kernel.shape[0]:
        return tf.matmul(x, kernel)
    return _matmul_with_transposed_kernel_gradient(x, kernel)


@tf.custom_gradient
def _matmul_with_transposed_kernel_gradient(x, kernel):
    def gradient(upstream):
        return (tf.matmul(upstream, transpose_as_integers(kernel, [1, 0])),
                tf.matmul(x, upstream, transpose_a=True))

    return tf.matmul(x, kernel), gradient
