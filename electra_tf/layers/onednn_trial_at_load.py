"""`OneDnnTrialAtLoad`: whether oneDNN multiplies in the process that loads a SavedModel,
tried once as it loads.

Written by hand because a TensorFlow graph cannot ask which kernels run it, and an
export's graph runs on whatever server loads it: with oneDNN (TensorFlow's default on CPUs
with AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX) or on Eigen's kernels (AVX2-only CPUs such
as older AMD EPYCs, or `TF_ENABLE_ONEDNN_OPTS=0`). Some inference forms are faster on one
and slower on the other: oneDNN's layer norm
(`closed_form_layer_normalization.normalize_for_inference`), products split up to the rows
oneDNN computes on one thread (`flat_dense.split_max_rows`).

TF Serving, the TF1 session loader and `tf.saved_model.load` initialize a SavedModel's
resources once, after restoring its variables (its `__saved_model_init_op`). This one runs
`tf_runtime.bfloat16_sums_trial` there and keeps the answer in a boolean resource variable
that the serving functions read (`onednn_multiplies`): one read a request, against the
1-4.5% that trial products in every request cost an export of ELECTRA-Small (2-core
Sapphire Rapids). The trial sees oneDNN where it multiplies bfloat16 (AVX512F or
AVX_NE_CONVERT); an AVX2-only CPU with oneDNN turned on reads as Eigen, and keeps the forms
that are never slower there.
"""

import tensorflow as tf
from tensorflow.python.ops import gen_resource_variable_ops

from electra_tf.tf_runtime import bfloat16_sums_trial

# Every export's answer in a process is the same, so they may share one variable.
_SHARED_NAME = "electra_tf_onednn_trial_at_load"


class OneDnnTrialAtLoad(tf.saved_model.experimental.TrackableResource):
    """A SavedModel resource: whether oneDNN multiplies where the SavedModel is loaded
    (`onednn_multiplies`), tried when it is (and when this object is created eagerly)."""

    def __init__(self):
        super().__init__()
        # Restored from the checkpoint before the trial runs: a value no graph optimiser
        # can fold into the trial ahead of time, on Eigen's kernels.
        self._one = tf.Variable(1.0, trainable=False, name="onednn_trial_one")
        self._track_trackable(self._one, "one")
        if tf.executing_eagerly():
            self._initialize()

    def _create_resource(self):
        return gen_resource_variable_ops.var_handle_op(dtype=tf.bool, shape=[],
                                                       shared_name=_SHARED_NAME)

    def _initialize(self):
        return gen_resource_variable_ops.assign_variable_op(
            self.resource_handle, bfloat16_sums_trial(self._one.read_value()))

    def onednn_multiplies(self):
        """A scalar bool tensor: the trial's answer where the graph runs."""
        return gen_resource_variable_ops.read_variable_op(self.resource_handle, tf.bool)
