"""electra_tf: ELECTRA pretraining, fine-tuning and export for TensorFlow 2 / Keras 3.

The names below load on first use, so light modules (the model catalog, `electra-presets`)
do not import TensorFlow.
"""

import importlib
import os

# TensorFlow's CPU tensors then come from its pooling (BFC) allocator instead of malloc,
# which hands the large activations of every step back to the system and faults them in
# again, zero-filled: an ELECTRA-Small training step at 32 x 128 on a 2-core AVX2 EPYC went
# from 5.2 to 4.6 s (and from 0.16-0.37 M page faults to 36 k, and less peak memory), a
# served request of 32 long texts from 1.35 to 1.21 s (docs/results.md). It is read when
# TensorFlow creates its first CPU tensor, so importing TensorFlow first is fine; set it to
# "false" beforehand to keep malloc.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# TensorFlow's own choice of CPU kernels stands (oneDNN on CPUs with AVX512_VNNI,
# AVX512_BF16, AVX_VNNI or AMX, Eigen elsewhere): turned on for AVX2-only CPUs, oneDNN
# trained ELECTRA-Small within 4% of Eigen's speed there, and `predict` of 1-8 texts ran
# 1.3-1.8x slower, first steps 0.6-1.5 s later (2-core AMD EPYC; docs/results.md,
# twenty-fourth pass).

# XLA's compiled kernels kept on disk for later processes (`xla_cache`): set here, before
# TensorFlow reads its XLA flags (at its first computation), without loading TensorFlow.
from electra_tf import xla_cache  # noqa: E402

xla_cache.use_on_disk_cache()

_EXPORTS = {
    "ElectraConfig": "electra_tf.config",
    "ElectraEncoder": "electra_tf.layers.encoder",
    "ElectraPretrainer": "electra_tf.pretraining.pretrainer",
    "ElectraTokenizer": "electra_tf.text.tokenizer",
    "ElectraPreprocessor": "electra_tf.models.preprocessor",
    "ElectraTextClassifier": "electra_tf.models.text_classifier",
    "ElectraTokenClassifier": "electra_tf.models.token_classifier",
    "ElectraQuestionAnswerer": "electra_tf.models.question_answerer",
    "resolve": "electra_tf.convert.resolve",
}
__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'electra_tf' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
