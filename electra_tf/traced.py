"""`function`: `tf.function` for our graph code, traced as written, without autograph;
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

import tensorflow as tf


def function(python_function=None, **options):
    """`tf.function(python_function, **options)` with `autograph=False`; a decorator too,
    with or without options."""
    return tf.function(python_function, autograph=False, **options)


@contextlib.contextmanager
def switched(switch: contextvars.ContextVar, value):
    """Within, `switch` holds `value` (for this thread or task: what a trace started
    within reads); as it was after, also on an error."""
    token = switch.set(value)
    try:
        yield
    finally:
        switch.reset(token)
