"""`fused_gelu`: the exact (erf) GELU with its forward and backward each one fused kernel.

Written by hand because neither Keras nor keras-hub provides it: TensorFlow runs
`keras.activations.gelu` on CPU as separate Eigen passes over the [batch, seq,
intermediate] tensor (erfc, neg, mul, mul forward; more for the gradient), and the
profile of an ELECTRA-Small step on 2 CPU cores put those passes at about a fifth of the
step's op time. XLA compiles each direction into one elementwise loop; only these two
small functions are compiled, so the rest of the step keeps TensorFlow's oneDNN kernels
(compiling the whole step with XLA is far slower on CPUs, see `--jit_compile`).

Exported SavedModels use the plain `"gelu"` (serving binaries need not have XLA); both
compute the same function, to float32 rounding.
"""

import math

import keras
import tensorflow as tf

_SQRT_HALF = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)


@tf.function(jit_compile=True)
def _gelu(x):
    return 0.5 * x * tf.math.erfc(-x * _SQRT_HALF)


@tf.function(jit_compile=True)
def _gelu_backward(x, upstream):
    # d/dx [x * Phi(x)] = Phi(x) + x * phi(x)
    cdf = 0.5 * tf.math.erfc(-x * _SQRT_HALF)
    pdf = tf.exp(-0.5 * x * x) * _INV_SQRT_2PI
    return upstream * (cdf + x * pdf)


@keras.saving.register_keras_serializable(package="electra_tf")
@tf.custom_gradient
def fused_gelu(x):
    """Exact GELU, `x * Phi(x)`, of a float tensor of any shape; same shape and dtype."""
    return _gelu(x), lambda upstream: _gelu_backward(x, upstream)
