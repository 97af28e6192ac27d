"""The exact (erf) GELU, two ways: `gelu`, the official code's form and every layer's default
(`GELU`), and `fused_gelu`, whose forward and backward are each one fused kernel (training).

`gelu` is written by hand because Keras's `gelu` computes the same function as
`0.5 * x * erfc(-x / sqrt(2))`, which TensorFlow runs on CPU with one more pass over the
tensor (a negation) and an `Erfc` kernel three times slower than `Erf`: over ELECTRA-Small's
feed-forward activations at 32 x 128 (4 M values, 12 per forward pass) Keras's took 12 ms and
the official form, `x * 0.5 * (1 + erf(x / sqrt(2)))`, 7 ms on a 2-core AVX2 EPYC.

`fused_gelu` is written by hand because neither Keras nor keras-hub provides it: TensorFlow
runs a GELU on CPU as separate Eigen passes over the [batch, seq, intermediate] tensor
(more for the gradient), and the profile of an ELECTRA-Small training step on 2 CPU cores
put those passes at about a fifth of the step's op time. XLA compiles each direction into
one elementwise loop; only these two small functions are compiled, so the rest of the step
keeps TensorFlow's oneDNN kernels (compiling the whole step with XLA is far slower on CPUs,
see `--jit_compile`). Exports use `gelu` (serving binaries need not have XLA). The dense
layers add their bias inside these kernels in training (`fused_gelu_of_sum`, used by
`flat_dense.bias_add_and_fused_gelu`, which says why).

All compute the same function as Keras's `gelu`, to float32 rounding.
"""

import math

import keras
import tensorflow as tf

from electra_tf import traced
from electra_tf.layers.bfloat16_rounding import narrow
from electra_tf.layers.row_buckets import as_rows, padded_rows, rows_known

_SQRT_HALF = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


# The kernels compute in float32 and round once at the end: left to itself, XLA's CPU
# backend evaluates a bfloat16 GELU partly in bfloat16 (outputs up to 0.016 off) and with
# slower conversions (4.0 against 1.9 ms forward over [32, 128, 1024] bfloat16 values on a
# 2-core AVX-512 EPYC). erf rather than erfc, as in `gelu`: cheaper in XLA too.
# `bias` is added to `x` first (in float32); `fused_gelu` adds a scalar 0.


@traced.function(jit_compile=True)
def _gelu(x, bias):
    wide = tf.cast(x, tf.float32) + tf.cast(bias, tf.float32)
    return narrow(wide * (0.5 + 0.5 * tf.math.erf(wide * _SQRT_HALF)), x.dtype)


@traced.function(jit_compile=True)
def _gelu_backward(x, bias, upstream):
    # d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
    wide = tf.cast(x, tf.float32) + tf.cast(bias, tf.float32)
    cdf = 0.5 + 0.5 * tf.math.erf(wide * _SQRT_HALF)
    pdf = tf.exp(-0.5 * wide * wide) * _INV_SQRT_2PI
    return narrow(tf.cast(upstream, tf.float32) * (cdf + wide * pdf), upstream.dtype)


@keras.saving.register_keras_serializable(package="electra_tf")
def gelu(x):
    """Exact GELU, `x * Phi(x)`, as `x * 0.5 * (1 + erf(x / sqrt(2)))`."""
    return x * (0.5 * (1.0 + tf.math.erf(x * _SQRT_HALF)))


GELU = "electra_tf>gelu"  # the activation of every dense layer the paper gives a GELU


@keras.saving.register_keras_serializable(package="electra_tf")
@tf.custom_gradient
def fused_gelu(x):
    """Exact GELU, `x * Phi(x)`, of a float tensor of any shape; same shape and dtype."""
    outputs, gradient = fused_gelu_of_sum(as_rows(x), tf.zeros([], x.dtype))
    return tf.reshape(outputs, tf.shape(x)), lambda upstream: tf.reshape(
        gradient(as_rows(upstream)), tf.shape(x))


def fused_gelu_of_sum(x, bias):
    """(`fused_gelu(x + bias)`, its gradient function: upstream -> the gradient of the sum)
    of a 2-D `x`, in one XLA kernel each way, with no pass of its own for the sum; `bias`
    broadcasts against `x`. For a caller that writes the bias's own gradient
    (`flat_dense`).

    Where `x`'s rows are unknown until run time (batches of sentences, each as long as its
    longest), the kernels run over them padded to a bucket (`row_buckets`), so that XLA
    compiles a few kernels, not one for every batch. The padding costs a copy each way."""
    if rows_known(x):
        return _gelu(x, bias), lambda upstream: _gelu_backward(x, bias, upstream)
    padded, rows = padded_rows(x)
    return _gelu(padded, bias)[:rows], lambda upstream: _gelu_backward(
        padded, bias, padded_rows(upstream)[0])[:rows]
