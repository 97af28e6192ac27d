"""`weight_initializer`: the truncated normal every ELECTRA weight matrix starts from (as
in BERT and the official code), and `restoring()`: within, those matrices start at zero
instead, for models whose every weight a checkpoint is about to overwrite.

Written by hand because Keras builds a layer's weights with their initializers and has
no switch to skip them for a model about to be restored (Hugging Face's `from_pretrained`
skips them the same way). Drawing ELECTRA-Small's truncated normals took about half a
second of the 1.0-1.4 s its encoder took to build (2-core AVX2 EPYC), at every load of a
pretrained or fine-tuned model. Zeros cost next to nothing, and a weight the checkpoint
misses does not go unseen: every caller asserts that the restore matched every weight.
"""

import contextvars

import keras

from electra_tf import traced

_restoring = contextvars.ContextVar("restoring", default=False)


def restoring():
    """Within, weights built from `weight_initializer` start at zero: for models whose
    every weight a checkpoint restore (asserted complete) overwrites next."""
    return traced.switched(_restoring, True)


@keras.saving.register_keras_serializable(package="electra_tf")
class TruncatedNormal(keras.initializers.TruncatedNormal):
    """Keras's `TruncatedNormal`, zeros within `restoring()`."""

    def __call__(self, shape, dtype=None):
        if _restoring.get():
            return keras.ops.zeros(shape, dtype=dtype)
        return super().__call__(shape, dtype=dtype)


def weight_initializer(stddev: float) -> TruncatedNormal:
    """The initializer of ELECTRA's weight matrices and embeddings: a normal of `stddev`
    (the config's `initializer_range`) truncated at two standard deviations."""
    return TruncatedNormal(stddev=stddev)
