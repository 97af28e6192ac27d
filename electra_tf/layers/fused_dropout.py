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

It decides by 32 bits a value even with `RuntimeOptions.sixteen_bit_dropout`, which
halves Keras's draws (`SixteenBitDropout`): 16 bits a value here left ELECTRA-Small's
steps level or longer, as the draws run off the step's path (pretraining fp32 1.007x, bf16
1.009x, 30 pairs each; question answering 1.012x, 24 steps; 2-core Sapphire Rapids).
"""

import keras
import tensorflow as tf

from electra_tf import traced
from electra_tf.layers.bfloat16_rounding import narrow

# The unsigned type of a drop decision's random bits, by their number: 32 here, 16 in
# `SixteenBitDropout`.
_BITS_TYPES = {32: tf.uint32, 16: tf.uint16}


def drop_threshold(rate: float, bits: int):
    """The `bits`-bit value below which random bits drop their value: round(rate x
    2^bits), each value then dropped with probability threshold / 2^bits; None where that
    rounds to 2^bits, which the type cannot hold."""
    threshold = round(rate * 2 ** bits)
    return None if threshold >= 2 ** bits else tf.constant(threshold, _BITS_TYPES[bits])


def training_threshold(layer: keras.layers.Dropout, training, bits: int):
    """The `drop_threshold` a Keras `Dropout` `layer` of ours drops by in this call, or None
    where the call is Keras's own: not training, a `noise_shape`, a rate of 0 or 1, or one
    whose threshold `bits` cannot hold."""
    if not training or not 0 < layer.rate < 1 or layer.noise_shape is not None:
        return None
    return drop_threshold(layer.rate, bits)


# The bits are drawn as uint64 and read as their 32- or 16-bit words in order. 32-bit
# words are those a flat uint32 draw gives, at about half the cost of XLA's uint32 draws,
# shaped or flat (alone, 2-core AMD EPYC Zen 5, ms, shaped / flat / halves: [32, 4, 128,
# 128] 1.64 / 1.88 / 0.95, [32, 128, 1024] 2.88 / 3.41 / 1.52).
def kept_values(shape, seed, threshold, alg: str):
    """Which values of `shape` a dropout keeps: its random bits (as many as `threshold`'s
    type has, from the stateless generator `alg`) at least `threshold`."""
    size = tf.reduce_prod(shape)
    words_a_draw = 8 // threshold.dtype.size
    draws = tf.random.stateless_uniform(
        tf.reshape((size + words_a_draw - 1) // words_a_draw, [1]), seed, minval=None,
        maxval=None, dtype=tf.uint64, alg=alg)
    bits = tf.reshape(tf.bitcast(draws, threshold.dtype), [-1])[:size]
    return tf.reshape(bits >= threshold, shape)


@traced.function(jit_compile=True)
def _dropout_mask(shape, seed, threshold):
    return kept_values(shape, seed, threshold, alg="threefry")


# The forward pass and the gradient alike: the kept values scaled, the others zero.
@traced.function(jit_compile=True)
def _kept_and_scaled(x, keep, scale):
    return tf.where(keep, narrow(tf.cast(x, tf.float32) * scale, x.dtype),
                    tf.zeros([], x.dtype))


def fused_dropout(x, rate: float, seed, threshold):
    """`x` with each value zeroed where its random bits are below `threshold`
    (`drop_threshold` of `rate`) and the others scaled by 1 / (1 - rate); `seed`: int32
    [2]."""
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
        threshold = training_threshold(self, training, 32)
        if threshold is None:
            return super().call(inputs, training=training)
        # Keras's seed state is int64; XLA's stateless generators take int32 seeds.
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), 2 ** 31 - 1), tf.int32)
        return fused_dropout(inputs, self.rate, seed, threshold)


def swap_dropouts(model, dropout_class) -> list:
    """Makes every Keras `Dropout` of a built `model` a `dropout_class`: the same objects
    (rate, seed state), another training-time call. keras-hub and Keras create them inside
    their layers' `build` with no way to choose the class. Returns the layers changed, each
    with its class before."""
    changed = []
    for layer in model._flatten_layers(include_self=False):
        if type(layer) is keras.layers.Dropout:
            changed.append((layer, type(layer)))
            layer.__class__ = dropout_class
    return changed
