"""`export_tracing()`: how the layers trace for an export (TF Serving versions, the TF
Hub-style encoder), one scope for every export and the tests that run one."""

import contextlib

from electra_tf.layers import flat_dense, layer_stack


@contextlib.contextmanager
def export_tracing():
    """Within, functions traced pick each large inference product's form per call
    (`flat_dense.split_per_call`: exports answer single short requests) and call each
    transformer layer on its own (`layer_stack.inference_layer_by_layer`: the runtimes
    that serve an export run its flat graph as measured, and it is traced once)."""
    with flat_dense.split_per_call(), layer_stack.inference_layer_by_layer():
        yield
