"""`apply_layer_stack`: identical Keras layers applied in turn, a traced function (a
training step, `predict`, `evaluate`) tracing the first one only.

Written by hand because neither Keras nor TensorFlow shares a trace between layers: inside
a `tf.function`, each of ELECTRA-Small's 12 transformer layers is traced anew, forward and
gradient, graph op by graph op in Python (268 ops per layer forward). Tracing was most of
the time before the first fine-tuning step, and of the first `predict`. Here the first
layer's call is traced once as a function of its weights (Keras's `stateless_call`) and
every layer calls that function with its own; TensorFlow derives the function's gradient
once as well, and inlines the calls before optimising the graph, so the function runs the
same kernels on the same values (the same losses to the last bit) with a twelfth of the
tracing.
"""

import contextvars

import tensorflow as tf
# Keras's own way to read a variable uncast (as `Layer.__call__` does for layers that do
# not autocast); private, no public equivalent.
from keras.src.backend import AutocastScope

from electra_tf import traced


_inference_through_one_trace = contextvars.ContextVar("inference_through_one_trace",
                                                      default=True)


def inference_layer_by_layer():
    """Within, functions traced for inference call each layer on its own, one flat graph.
    For exports: the runtimes that serve them (TF Serving, TF Hub users' graphs) run
    that graph as measured, and an export is traced once, not at every start."""
    return traced.switched(_inference_through_one_trace, False)


def apply_layer_stack(layers, x, training=None, **kwargs) -> list:
    """Each layer's output, `x` passed through `layers` in order as
    `layer(x, training=training, **kwargs)`; `kwargs` are tensors (e.g. masks)."""
    if (tf.inside_function() and (training is True or _inference_through_one_trace.get())
            and _all_alike(layers)):
        return _apply_through_one_trace(layers, x, training, kwargs)
    outputs = []
    for layer in layers:
        x = layer(x, training=training, **kwargs)
        outputs.append(x)
    return outputs


def _apply_through_one_trace(layers, x, training, kwargs) -> list:
    template = layers[0]

    # A new function per outer trace: nothing holds on to the layers once it is done.
    @traced.function
    def call_template(trainable, non_trainable, x, kwargs):
        outputs, updated = template.stateless_call(trainable, non_trainable, x,
                                                   training=training, **kwargs)
        if training is True:
            return outputs, updated
        if any(new is not old for new, old in zip(updated, non_trainable)):
            raise NotImplementedError(
                f"{type(template).__name__} changes its state in inference; "
                "apply_layer_stack would drop the change.")
        return outputs, []  # inference: the dropout seeds stay as they are

    outputs = []
    for layer in layers:
        # The weights' values, read here (the tape sees the reads): passed as variables,
        # a MirroredStrategy's replicas computed with other values (a classifier's logits
        # 0.38 off in a training step, 0.25 in `predict`; read, 1e-7 from the eager call).
        with AutocastScope(None):  # the call casts, as the layer itself would
            trainable = [tf.convert_to_tensor(v.value) for v in layer.trainable_variables]
            non_trainable = [tf.convert_to_tensor(v.value)
                             for v in layer.non_trainable_variables]
        x, updated = call_template(trainable, non_trainable, x, kwargs)
        for variable, value in zip(layer.non_trainable_variables, updated):
            variable.assign(value)  # dropout seeds
        outputs.append(x)
    return outputs


def _all_alike(layers) -> bool:
    """Whether every layer could stand in for the first: same class, configuration and
    variable shapes (trainable and not)."""
    def signature(layer):
        return (type(layer), repr(dict(layer.get_config(), name=None)),
                tuple(tuple(v.shape) for v in layer.trainable_variables),
                tuple(tuple(v.shape) for v in layer.non_trainable_variables))

    return len(layers) > 1 and all(layer.built for layer in layers) and len(
        {signature(layer) for layer in layers}) == 1
