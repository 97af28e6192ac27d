"""`xla_kernel`: how the training step's small XLA kernels (GELU, dropout, layer norm, the
generator's cross-entropy) are compiled."""

import tensorflow as tf


def xla_kernel(function):
    """`function` compiled as one XLA kernel per input shape, traced as written: these
    kernels are straight-line code, and autograph's conversion of them (and of what they
    call) took 0.7 s of CPU at every run's start (a `tiny` pretraining run, 2-core AVX2
    EPYC)."""
    return tf.function(function, jit_compile=True, autograph=False)
