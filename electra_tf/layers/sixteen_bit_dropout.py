"""`SixteenBitDropout`: Keras's `Dropout` deciding by 16 random bits a value instead of a
float drawn from 32 (`RuntimeOptions.sixteen_bit_dropout`: on by default in bfloat16 on
CPUs).

Written by hand because neither Keras nor TensorFlow draws fewer bits for a dropout.
TensorFlow's Philox generator is most of a Keras dropout's cost on CPUs (314 of 387 us at
[16, 40, 256]; 2-core Sapphire Rapids), and dropout about a tenth of a fine-tuning step on
short inputs, where the XLA training kernels (`FusedDropout`) stay off. Each 64-bit draw
here decides four values (`fused_dropout.kept_values`), from the generator Keras draws
from (Philox on CPUs); the kept values are then scaled and the others zeroed as Keras's
dropout does it.

The price: a value is dropped with probability round(rate x 2^16) / 2^16 (0.1000061 for a
rate of 0.1) instead of rate to 2^-23 (Keras's float draws) or 2^-32 (`FusedDropout`); the
kept values are still scaled by 1 / (1 - rate). An approximation, so off by default in
float32; in bfloat16 Keras's own dropout is a coarser one (a bfloat16 uniform draw takes
128 values: it drops 13 / 128 = 0.1016 for 0.1), so there it is on. Only training runs
use it; exports never contain it, and at inference it is Keras's `Dropout`
(the identity).
"""

import keras
import tensorflow as tf

from electra_tf.layers.fused_dropout import kept_values, training_threshold


@keras.saving.register_keras_serializable(package="electra_tf")
class SixteenBitDropout(keras.layers.Dropout):
    """A `Dropout` whose training-time mask comes from 16 random bits a value (a rate
    below 2^-17 drops nothing); a `noise_shape`, or a rate of 0, or of 1 or within 2^-17
    of it, goes through `Dropout.call` unchanged."""

    def call(self, inputs, training=False):
        threshold = training_threshold(self, training, 16)
        if threshold is None:
            return super().call(inputs, training=training)
        keep = kept_values(tf.shape(inputs), self.seed_generator.next(), threshold,
                           alg="auto_select")
        # As `tf.nn.experimental.stateless_dropout` (Keras's), in the inputs' dtype.
        scaled = inputs * tf.cast(1.0 / (1.0 - self.rate), inputs.dtype)
        return tf.where(keep, scaled, tf.zeros([], inputs.dtype))
