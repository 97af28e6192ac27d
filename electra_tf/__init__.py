"""electra_tf: ELECTRA pretraining, fine-tuning and export for TensorFlow 2 / Keras 3.

The names below load on first use, so light modules (the model catalog, `electra-presets`)
do not import TensorFlow.
"""

import importlib

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
