"""Shortest first: in-memory examples ordered by length for `predict`, so that each batch's
encoder reads up to its own longest example (the task models cut the padding tail per
batch)."""

import numpy as np
import tensorflow as tf


def shortest_first(inputs):
    """The examples' order by length (stable), or None when their length is unknown:
    real tokens of packed inputs (`input_mask`), else the characters of their texts or
    words (strings, ragged or not, in any tuple / dict)."""
    if isinstance(inputs, dict) and "input_mask" in inputs:
        lengths = np.sum(np.asarray(inputs["input_mask"]), axis=1)
    else:
        strings = [t for t in tf.nest.flatten(inputs) if t is not None and t.dtype == tf.string]
        if not strings:
            return None
        lengths = sum(_characters(t) for t in strings)
    return np.argsort(lengths, kind="stable")


def _characters(strings) -> np.ndarray:
    """Characters per row of a string tensor [batch, ...] (ragged too)."""
    lengths = tf.strings.length(strings, unit="UTF8_CHAR")
    while lengths.shape.rank > 1:
        lengths = tf.reduce_sum(lengths, axis=-1)
    return lengths.numpy()


def take(parts, order):
    """`parts` (tensors, ragged ones too, or tuples / dicts of them; None stays None)
    with their rows in `order`."""
    return tf.nest.map_structure(lambda t: None if t is None else tf.gather(t, order), parts)


def restore(outputs, order):
    """Outputs (arrays, or a structure of them) of examples taken in `order`, back in
    the examples' own order."""
    back = np.argsort(order)
    return tf.nest.map_structure(lambda a: a[back], outputs)
