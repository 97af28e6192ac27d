"""`FusedDropout`: Keras's `Dropout` whose training-time mask, forward and backward are small
XLA kernels, its random bits drawn by XLA's ThreeFry generator.

Written by hand because neither Keras nor keras-hub provides it. Keras's TensorFlow backend
drops with `tf.nn.experimental.stateless_dropout`: TensorFlow's CPU kernel draws a float
per element with Philox (not vectorised), then compares, scales and multiplies in separate
passes. ELECTRA-Small's pretraining step drops about 60 M values (the attention
probabilities are most of them): in a bfloat16 step on a 2-core AVX-512 EPYC those draws
were 12% of the op time, the largest cost after the matmuls. XLA's ThreeFry is vectorised:
one kernel draws and compares, another scales: [32, 4, 128, 128] values took 7.3 ms as
Keras's dropout and 2.1 ms in one fused kernel. XLA's Philox and `auto_select` were slower
than Keras's.

The draws are a kernel of their own, reading only the seed and, where it is static (as in
pretraining's fixed batches), the shape: TensorFlow can then draw a layer's mask before its
input exists. The forward passes run one op after another; the draws, most of the
dropout's time, now run at the step's start, off their path: ELECTRA-Small's pretraining
steps alternating with the one-kernel form, bf16 0.986x (100 pairs), fp32 0.976x (60),
the same masks (2-core AVX-512 EPYC). The masks (one byte a value: ~60 MB) are alive
from the step's start.

The same distribution: each value is kept with probability 1 - rate (exact to 2^-32: the
bits are compared with `rate x 2^32`, where TensorFlow's bfloat16 uniform draws have
1/128 steps) and scaled by 1 / (1 - rate), computed in float32 and rounded once. The masks
are other draws than Keras's for the same seed. Like `fused_gelu`, only training runs use
it (`RuntimeOptions.fused_dropout`); exports never contain it, and at inference it is
Keras's `Dropout` (the identity).
"""

import keras
import tensorflow as tf

from electra_tf import traced
from electra_tf.layers.bfloat16_rounding import narrow

# The drop threshold's scale: the generator's raw bits are uniform over [0, 2^32).
_BITS = 2 ** 32


# The bits are drawn as uint64 and read as their two 32-bit halves: the words a flat uint32
# draw gives, in its order, at about half the cost of XLA's uint32 draws, shaped or flat
# (alone, 2-core AMD EPYC Zen 5, ms, shaped / flat / halves: [32, 4, 128, 128] 1.64 / 1.88
# / 0.95, [32, 128, 1024] 2.88 / 3.41 / 1.52).
@traced.function(jit_compile=True)
def _dropout_mask(shape, seed, threshold):
    size = tf.reduce_prod(shape)
    pairs = tf.random.stateless_uniform(tf.reshape((size + 1) // 2, [1]), seed, minval=None,
                                        maxval=None, dtype=tf.uint64, alg="threefry")
    bits = tf.reshape(tf.bitcast(pairs, tf.uint32), [-1])[:size]
    return tf.reshape(bits >= threshold, shape)


# The forward pass and the gradient alike: the kept values scaled, the others zero.
@traced.function(jit_compile=True)
def _kept_and_scaled(x, keep, scale):
    return tf.where(keep, narrow(tf.cast(x, tf.float32) * scale, x.dtype),
                    tf.zeros([], x.dtype))


def fused_dropout(x, rate: float, seed):
    """`x` with each value zeroed with probability `rate` and the others scaled by
    1 / (1 - rate); `seed`: int32 [2]."""
    threshold = tf.constant(round(rate * _BITS), tf.uint32)
    scale = tf.constant(1.0 / (1.0 - rate), tf.float32)
    # A static shape as a constant: the mask then does not wait for `x`.
    shape = (tf.constant(x.shape.as_list(), tf.int32) if x.shape.is_fully_defined()
             else tf.shape(x))
    keep = _dropout_mask(shape, seed, threshold)

    @tf.custom_gradient
    def dropout(x):
        return (_kept_and_scaled(x, keep, scale),
                lambda upstream: _kept_and_scaled(upstream, keep, scale))

    return dropout(x)


@keras.saving.register_keras_serializable(package="electra_tf")
class FusedDropout(keras.layers.Dropout):
    """A `Dropout` whose training-time call is `fused_dropout`; a `noise_shape`, or a rate
    of 0 or 1, goes through `Dropout.call` unchanged."""

    def call(self, inputs, training=False):
        if not training or not 0 < self.rate < 1 or self.noise_shape is not None:
            return super().call(inputs, training=training)
        # Keras's seed state is int64; XLA's stateless generators take int32 seeds.
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), 2 ** 31 - 1), tf.int32)
        return fused_dropout(inputs, self.rate, seed)


def use_fused_dropout(model) -> list:
    """Makes every Keras `Dropout` of a built `model` a `FusedDropout`: the same objects
    (rate, seed state), another training-time call. keras-hub and Keras create them inside
    their layers' `build` with no way to choose the class. Returns the layers changed, each
    with its class before."""
    changed = []
    for layer in model._flatten_layers(include_self=False):
        if type(layer) is keras.layers.Dropout:
            changed.append((layer, type(layer)))
            layer.__class__ = FusedDropout
    return changed
