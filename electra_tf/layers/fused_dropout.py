"""`FusedDropout`: Keras's `Dropout` whose training-time forward and backward are each one
small XLA kernel, its random bits drawn by XLA's ThreeFry generator.

Written by hand because neither Keras nor keras-hub provides it. Keras's TensorFlow backend
drops with `tf.nn.experimental.stateless_dropout`: TensorFlow's CPU kernel draws a float
per element with Philox (not vectorised), then compares, scales and multiplies in separate
passes. ELECTRA-Small's pretraining step drops about 60 M values (the attention
probabilities are most of them): in a bfloat16 step on a 2-core AVX-512 EPYC those draws
were 12% of the op time, the largest cost after the matmuls. XLA's ThreeFry is vectorised,
and one kernel draws, compares and scales: [32, 4, 128, 128] values took 7.3 ms as Keras's
dropout and 2.1 ms fused. XLA's Philox and `auto_select` were slower than Keras's.

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

# The drop threshold's scale: the generator's raw bits are uniform over [0, 2^32).
_BITS = 2 ** 32


@traced.function(jit_compile=True)
def _dropout_forward(x, seed, threshold, scale):
    bits = tf.random.stateless_uniform(tf.shape(x), seed, minval=None, maxval=None,
                                       dtype=tf.uint32, alg="threefry")
    keep = bits >= threshold
    return tf.where(keep, tf.cast(tf.cast(x, tf.float32) * scale, x.dtype),
                    tf.zeros([], x.dtype)), keep


@traced.function(jit_compile=True)
def _dropout_backward(upstream, keep, scale):
    return tf.where(keep, tf.cast(tf.cast(upstream, tf.float32) * scale, upstream.dtype),
                    tf.zeros([], upstream.dtype))


def fused_dropout(x, rate: float, seed):
    """`x` with each value zeroed with probability `rate` and the others scaled by
    1 / (1 - rate); `seed`: int32 [2]."""
    threshold = tf.constant(round(rate * _BITS), tf.uint32)
    scale = tf.constant(1.0 / (1.0 - rate), tf.float32)

    @tf.custom_gradient
    def dropout(x):
        outputs, keep = _dropout_forward(x, seed, threshold, scale)
        return outputs, lambda upstream: _dropout_backward(upstream, keep, scale)

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


def use_fused_dropout(model) -> None:
    """Makes every Keras `Dropout` of a built `model` a `FusedDropout`: the same objects
    (rate, seed state), another training-time call. keras-hub and Keras create them inside
    their layers' `build` with no way to choose the class."""
    for layer in model._flatten_layers(include_self=False):
        if type(layer) is keras.layers.Dropout:
            layer.__class__ = FusedDropout
