"""`electra_tf.traced`: `tf.function` without autograph, called through its concrete
functions."""

import numpy as np
import tensorflow as tf

from electra_tf import traced


def test_concrete_calls_look_up_each_kind_of_arguments_once(monkeypatch):
    """Calls of other sizes reuse the trace for open sizes; defaults count as given; the
    `tf.function`'s own dispatch runs only for values that are not tensors or arrays."""
    graph = traced.function(lambda x, scale=2: {"y": x * scale}, reduce_retracing=True)
    lookups, dispatches = [], []
    get_concrete = graph.get_concrete_function
    monkeypatch.setattr(graph, "get_concrete_function",
                        lambda *a, **k: lookups.append(a) or get_concrete(*a, **k))
    monkeypatch.setattr(type(graph), "__call__",
                        lambda self, *a, **k: dispatches.append(a) or "dispatched")
    call = traced.concrete_calls(
        graph, lambda t: tf.TensorSpec([None], t.dtype) if hasattr(t, "dtype") else t)

    for size in 1, 3, 5:
        np.testing.assert_array_equal(call(tf.ones([size]))["y"], [2.0] * size)
    np.testing.assert_array_equal(call(np.ones(2, np.float32), scale=2)["y"], [2.0, 2.0])
    np.testing.assert_array_equal(call(tf.ones([4]), 3)["y"], [3.0] * 4)
    np.testing.assert_array_equal(call(tf.ones([2], tf.int32))["y"], [2, 2])
    assert len(lookups) == 3 and not dispatches  # float32 x 2 scales, int32
    assert graph.experimental_get_tracing_count() == 3

    assert call("not a tensor") == "dispatched" and len(dispatches) == 1
