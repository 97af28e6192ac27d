"""`transpose_as_integers`: `tf.transpose` of a float tensor run on its bits.

Written by hand because TensorFlow's oneDNN build runs every float `Transpose` as
`_MklTranspose`, which sets up a oneDNN reorder at each call: about 25 us for a short
request's [1, 20, 4, 64] against 2 us for TensorFlow's own (Eigen) kernel, which it keeps
for integer tensors. Transposing the floats' bits as integers of the same width (`Bitcast`
reinterprets the buffer without copying) runs Eigen's, with the same values. Grappler also
cannot fold such a transpose into the matmul that reads it, as it folds a float one.
"""

import tensorflow as tf

# Unsigned: TensorFlow treats int32 as its host-side shape type (several GPU kernels keep
# int32 in host memory); uint32 and uint16 have plain transpose kernels on CPUs and GPUs.
_SAME_WIDTH_INTEGERS = {"float32": tf.uint32, "bfloat16": tf.uint16, "float16": tf.uint16}


def transpose_as_integers(x, perm):
    """`tf.transpose(x, perm)`, through an unsigned integer of the same width when `x` is
    a float type that has one (no gradient: `Bitcast` has none)."""
    integers = _SAME_WIDTH_INTEGERS.get(x.dtype.name)
    if integers is None:
        return tf.transpose(x, perm)
    return tf.bitcast(tf.transpose(tf.bitcast(x, integers), perm), x.dtype)
