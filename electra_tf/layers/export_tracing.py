"""`export_tracing()`: how the layers trace for an export (TF Serving versions, the TF
Hub-style encoder and preprocessor), one scope for every export and the tests that run
one."""

import contextlib
import contextvars

import tensorflow as tf

from electra_tf import traced
from electra_tf.layers import layer_stack
from electra_tf.layers.inference import forms_per_call

_tracing_an_export = contextvars.ContextVar("tracing_an_export", default=False)


@contextlib.contextmanager
def export_tracing():
    """Within, functions traced pick some inference ops' form per call
    (`inference.forms_per_call`: exports answer single short requests), call each
    transformer layer on its own (`layer_stack.inference_layer_by_layer`: the runtimes
    that serve an export run its flat graph as measured, and it is traced once) and trace
    the tokenizer's ops into the export's own graph (`tracing_an_export`)."""
    with forms_per_call(), layer_stack.inference_layer_by_layer(), (
            traced.switched(_tracing_an_export, True)):
        yield


def tracing_an_export() -> bool:
    """True within `export_tracing()`."""
    return _tracing_an_export.get()


def tracing_an_exports_graph() -> bool:
    """True while a graph is traced within `export_tracing()` (not in its eager calls):
    there the text ops (the tokenizer's, the preprocessor's packing) are traced into the
    export's own graph; eagerly and in other traces they call graphs traced once
    (`ElectraTokenizer.tokenize` says why)."""
    return tracing_an_export() and not tf.executing_eagerly()
