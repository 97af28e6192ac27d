"""`batch_matmul`: the attention's batch products in training, on oneDNN's kernel where
TensorFlow would run them on Eigen's.

Written by hand because TensorFlow turns oneDNN on or off for the whole process
(`TF_ENABLE_ONEDNN_OPTS`; off by default on CPUs without AVX512_VNNI, AVX512_BF16,
AVX_VNNI or AMX, such as AVX2-only AMD EPYCs), and has no switch per op. There oneDNN's
dense products are no faster than Eigen's (640 and 4,096 rows of ELECTRA-Small's shapes:
level forward, 0.6-0.9x for the weights' gradients), but its batch products are twice
as fast: a layer's six in training took 10.7 ms against 21.1 at [32, 4, 128, 64], 0.87
against 1.72 at fine-tuning's [16, 4, 40, 64] (2-core AMD EPYC Zen 3, AVX2; torch's MKL
12.0 and 0.63); ELECTRA-Small's pretraining step took 2,319 ms against 2,489. Turning
oneDNN on for the process instead gave the same step (2,494 ms), its batch products'
gain spent elsewhere. Inference keeps Eigen's: oneDNN's set-up per call made a `predict`
of one text slower (13.8-14.3 ms against 12.5-13.0), of 64 texts faster (0.27 against
0.30 s), and a `predict` traced for any shape cannot pick per call cheaply.

TensorFlow's own oneDNN pass rewrites `BatchMatMulV2` into `_MklBatchMatMulV2` and picks
its kernel by the label `MklNameChangeOp`; here the op is put into the graph with that
label directly. Private to TensorFlow (pinned in our requirements): used only where its
float32 kernel is registered and nothing else could go wrong with it: traced on a CPU-only
machine, outside XLA (no XLA kernel), with oneDNN off (where it is on, TensorFlow's pass
gives every batch product this kernel already), and never in an export, whose serving
binaries need not have the op.
"""

import functools

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.framework import kernels
from tensorflow.python.ops import control_flow_util

from electra_tf.layers.export_tracing import tracing_an_export
from electra_tf.tf_runtime import products_run_on_eigen

_OP = "_MklBatchMatMulV2"
_LABEL = "MklNameChangeOp"


def batch_matmul(x, y, adjoint_a=False, adjoint_b=False):
    """`tf.matmul(x, y, adjoint_a=..., adjoint_b=...)` for tensors of the same batch
    shape (no broadcasting: the gradient assumes it), on oneDNN's batch kernel where
    `_onednn_kernel_wanted` says so."""
    if not (_onednn_kernel_wanted(x.dtype) and x.shape.rank == y.shape.rank
            and x.shape[:-2].is_compatible_with(y.shape[:-2])):
        return tf.matmul(x, y, adjoint_a=adjoint_a, adjoint_b=adjoint_b)
    return _onednn_batch_matmul(x, y, adjoint_a, adjoint_b)


def _onednn_kernel_wanted(dtype) -> bool:
    """Whether a batch product of `dtype` traced here runs on oneDNN's kernel through this
    module (float32 only: the type measured, and the one AVX2-only CPUs compute in)."""
    return (dtype == tf.float32 and not tf.executing_eagerly() and _kernel_usable_here()
            and not control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
            and not tracing_an_export())


@functools.cache
def _kernel_usable_here() -> bool:
    """Products on Eigen's kernels here (`products_run_on_eigen`), and `_OP`'s float32
    kernel registered."""
    return products_run_on_eigen() and any(
        kernel.device_type == "CPU" and kernel.label == _LABEL
        and any(tf.float32.as_datatype_enum in constraint.allowed_values.list.type
                for constraint in kernel.constraint)
        for kernel in kernels.get_registered_kernels_for_op(_OP).kernel)


def _onednn_batch_matmul(x, y, adjoint_a, adjoint_b):
    attributes = {"T": attr_value_pb2.AttrValue(type=x.dtype.as_datatype_enum),
                  "adj_x": attr_value_pb2.AttrValue(b=adjoint_a),
                  "adj_y": attr_value_pb2.AttrValue(b=adjoint_b),
                  "_kernel": attr_value_pb2.AttrValue(s=_LABEL.encode())}

    @tf.custom_gradient
    def product(x, y):
        graph = tf.compat.v1.get_default_graph()
        result = graph._create_op_internal(_OP, [x, y], [x.dtype], attrs=attributes,
                                           name="onednn_batch_matmul").outputs[0]
        return result, gradient

    def gradient(upstream):
        # As TensorFlow's own gradient of BatchMatMulV2, for each pair of adjoints.
        if not adjoint_a and not adjoint_b:
            return batch_matmul(upstream, y, adjoint_b=True), batch_matmul(x, upstream, True)
        if not adjoint_a:
            return batch_matmul(upstream, y), batch_matmul(upstream, x, adjoint_a=True)
        if not adjoint_b:
            return batch_matmul(y, upstream, adjoint_b=True), batch_matmul(x, upstream)
        return batch_matmul(y, upstream, True, True), batch_matmul(upstream, x, True, True)

    return product(x, y)
