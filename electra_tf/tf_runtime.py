"""TensorFlow's runtime in this process: whether it sees an accelerator, and how it runs the
ops executed eagerly (outside a `tf.function`), such as the ones creating variables.

TensorFlow 2.21 runs each eager op as a function of one op, which it instantiates the
first time it meets the op with new attributes: graph passes (XLA's clustering among
them), partitioning and an executor, ~0.85 ms of CPU for a variable's handle, against
0.08 ms for its kernel alone (2-core AVX2 EPYC). A variable's handle carries its shape and
name, so building a model meets new attributes at nearly every variable: building
ELECTRA-Small's pretrainer and its optimizer (1,299 variables) took 6.8-7.7 s, 4.0-4.6 s
with the ops run by their kernels; a `tiny` one 1.3-1.5 s, 1.1 s. Running the kernels is
TensorFlow's earlier way, kept behind a switch of its eager context: the same kernels
compute, only the wrapping goes. Written by hand because TensorFlow's Python API has no
switch for it (its context turns it on when it starts). Only on a CPU: that is where it was
measured.
"""

import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context


def accelerator_visible() -> bool:
    """Whether TensorFlow sees a GPU or a TPU (else everything runs on the CPU)."""
    return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def run_eager_ops_by_their_kernels() -> None:
    """From now on in this process, eager ops run by their kernels when no accelerator is
    visible. It starts TensorFlow's runtime (call it where ops run next anyway: it fixes
    the devices)."""
    if not accelerator_visible():  # starts the runtime
        pywrap_tfe.TFE_ContextSetRunEagerOpAsFunction(context.context()._handle, False)
