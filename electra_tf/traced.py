"""`function`: `tf.function` for our graph code, traced as written, without autograph;
`concrete_calls`: a `tf.function` called eagerly through its concrete functions;
`switched`: a switch that our graph code reads while it traces, set within a block.

Our graph code, and the keras-hub code it calls, is straight-line Python (no Python loop
or branch on a tensor's value): autograph has nothing to rewrite in it, yet converting it
cost CPU at every start: 0.8 s before a `tiny` pretraining run's first step (its XLA
kernels and input maps), 0.25 s before a fine-tuning run's, 0.5 s in `electra-predict`
(2-core AVX2 EPYC). Functions that `tf.data` or keras-hub trace for us are marked
`tf.autograph.experimental.do_not_convert` for the same reason.
"""

import contextlib
import contextvars
import inspect

import keras
import tensorflow as tf


def function(python_function=None, **options):
    """`tf.function(python_function, **options)` with `autograph=False`; a decorator too,
    with or without options."""
    return tf.function(python_function, autograph=False, **options)


def concrete_calls(graph, spec_of):
    """`graph` (a `tf.function`) as a Python function that calls the concrete function of
    `graph` for `tf.nest.map_structure(spec_of, tensors)` and the same other arguments:
    traced for those specs (the sizes that vary left open) before its first call, so that
    later calls of other sizes reuse it.

    Why not call `graph`: its dispatch (signature binding, trace lookup) cost 0.9 ms of
    an ELECTRA-Small classifier's one-text `predict` and 0.85 ms of packing one text
    (against 0.4 ms for the packing's own work; 2-core AMD EPYC, AVX2). Here each kind of
    arguments finds its concrete function in a dict. Tensors given in other forms than
    tensors or arrays (a strategy's per-replica values) go through `graph`."""
    concretes = {}
    # A concrete function takes the arguments its trace was given, defaults included.
    signature = inspect.signature(graph.python_function)

    def call(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        tensors, *values = bound.args
        specs = tf.nest.map_structure(spec_of, tensors)
        named = tuple(keras.tree.flatten_with_path(specs))
        if not all(isinstance(spec, tf.TypeSpec) for _, spec in named):
            graph.get_concrete_function(specs, *values, **bound.kwargs)
            return graph(*bound.args, **bound.kwargs)
        key = (named, repr(values), repr(bound.kwargs))  # repr: Python values may be dicts
        concrete = concretes.get(key)
        if concrete is None:
            concrete = concretes[key] = graph.get_concrete_function(specs, *values,
                                                                    **bound.kwargs)
        return concrete(*bound.args, **bound.kwargs)

    return call


@contextlib.contextmanager
def switched(switch: contextvars.ContextVar, value):
    """Within, `switch` holds `value` (for this thread or task: what a trace started
    within reads); as it was after, also on an error."""
    token = switch.set(value)
    try:
        yield
    finally:
        switch.reset(token)
