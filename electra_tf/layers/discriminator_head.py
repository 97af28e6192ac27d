"""The replaced-token-detection head."""

import keras

from electra_tf.layers.activations import gelu
from electra_tf.layers.flat_dense import FlatDense
from electra_tf.layers.initializers import weight_initializer


@keras.saving.register_keras_serializable(package="electra_tf")
class DiscriminatorHead(keras.layers.Layer):
    """dense(hidden, GELU) -> dense(1): one "was this token replaced?" logit per position.

    Call arguments:
        sequence_output: float [batch, seq, hidden].
    Returns: float logits [batch, seq].
    """

    def __init__(self, hidden_size, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        initializer = weight_initializer(initializer_range)
        self.dense = FlatDense(
            hidden_size, activation=gelu,
            kernel_initializer=initializer, dtype=self.dtype_policy, name="dense")
        self.dense_prediction = FlatDense(
            1, kernel_initializer=initializer, dtype=self.dtype_policy,
            name="dense_prediction")

    def build(self, input_shape):
        self.dense.build(input_shape)
        self.dense_prediction.build(tuple(input_shape[:-1]) + (self.hidden_size,))
        self.built = True

    def call(self, sequence_output):
        return keras.ops.squeeze(self.dense_prediction(self.dense(sequence_output)), -1)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update({"hidden_size": self.hidden_size,
                       "initializer_range": self.initializer_range})
        return config
