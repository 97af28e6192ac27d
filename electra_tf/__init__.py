"""electra_tf: ELECTRA pretraining, fine-tuning and export for TensorFlow 2 / Keras 3.

The names below load on first use, so light modules (the model catalog, `electra-presets`)
do not import TensorFlow.
"""

import importlib
import os
import platform

# TensorFlow's CPU tensors then come from its pooling (BFC) allocator instead of malloc,
# which hands the large activations of every step back to the system and faults them in
# again, zero-filled: an ELECTRA-Small training step at 32 x 128 on a 2-core AVX2 EPYC went
# from 5.2 to 4.6 s (and from 0.16-0.37 M page faults to 36 k, and less peak memory), a
# served request of 32 long texts from 1.35 to 1.21 s (docs/results.md). It is read when
# TensorFlow creates its first CPU tensor, so importing TensorFlow first is fine; set it to
# "false" beforehand to keep malloc.
os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

# TensorFlow's oneDNN kernels on every x86 CPU: TensorFlow turns them on by itself only on
# CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX, and elsewhere (AVX2-only CPUs such as
# older AMD EPYCs) runs its Eigen kernels, which its wheels compile without FMA. With
# oneDNN held to AVX2 (`ONEDNN_MAX_CPU_ISA=AVX2`, 2-core Sapphire Rapids), an ELECTRA-Small
# fp32 pretraining step ran 1.12-1.20x faster than on Eigen, `predict` of 64 texts 1.2x,
# the first pretraining step 1.1x sooner (docs/results.md, nineteenth pass). TensorFlow
# reads the variable when it is imported: import electra_tf first; set "0" to keep Eigen.
if platform.machine().lower() in ("x86_64", "amd64"):
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")

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
