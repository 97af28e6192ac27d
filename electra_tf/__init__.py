"""electra_tf: ELECTRA pretraining, fine-tuning and export for TensorFlow 2 / Keras 3."""

from electra_tf.config import ElectraConfig
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.pretraining.pretrainer import ElectraPretrainer

__all__ = ["ElectraConfig", "ElectraEncoder", "ElectraPretrainer"]
__version__ = "0.1.0"
