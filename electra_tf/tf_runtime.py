"""TensorFlow's runtime in this process: whether it sees an accelerator, whether oneDNN
runs its float ops (`onednn_enabled`) or Eigen multiplies them (`products_run_on_eigen`),
which products oneDNN computes on one thread (`one_thread_product_bytes`), whether a
bfloat16 product accumulates in float32 (`bfloat16_products_accumulate_in_float32`), how
it runs the ops executed eagerly (outside a `tf.function`), such as the ones creating
variables, and the `tf.data` pipelines that every input pipeline of ours, and every
dataset our models' `fit`, `evaluate` and `predict` are given, run without autotuning
(`without_autotuning`).

TensorFlow 2.21 runs each eager op as a function of one op, which it instantiates the
first time it meets the op with new attributes: graph passes (XLA's clustering among
them), partitioning and an executor, ~0.85 ms of CPU for a variable's handle, against
0.08 ms for its kernel alone (2-core AVX2 EPYC). A variable's handle carries its shape and
name, so building a model meets new attributes at nearly every variable: building
ELECTRA-Small's pretrainer and its optimizer (1,299 variables) took 6.8-7.7 s, 4.0-4.6 s
with the ops run by their kernels; a `tiny` one 1.3-1.5 s, 1.1 s. Running the kernels is
TensorFlow's earlier way, kept behind a switch of its eager context: the same kernels
compute, only the wrapping goes. Written by hand because TensorFlow's Python API has no
switch for it (its context turns it on when it starts). Only on a CPU: that is where it was
measured.
"""

import functools
import os

import tensorflow as tf
from tensorflow.python import pywrap_tfe
from tensorflow.python.eager import context
from tensorflow.python.util import _pywrap_util_port


def accelerator_visible() -> bool:
    """Whether TensorFlow sees a GPU or a TPU (else everything runs on the CPU)."""
    return bool(tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("TPU"))


def onednn_enabled() -> bool:
    """Whether TensorFlow's oneDNN pass runs this process's float ops on oneDNN's kernels
    (`TF_ENABLE_ONEDNN_OPTS`; by default on CPUs with AVX512_VNNI, AVX512_BF16, AVX_VNNI or
    AMX), else on Eigen's (AVX2-only CPUs such as older AMD EPYCs)."""
    return _pywrap_util_port.IsMklEnabled()


@functools.cache
def products_run_on_eigen() -> bool:
    """Whether TensorFlow multiplies float tensors traced here on Eigen's CPU kernels: no
    accelerator and oneDNN off. The forms measured faster on those kernels take this."""
    return not (onednn_enabled() or accelerator_visible())


@functools.cache
def products_run_on_onednn() -> bool:
    """Whether TensorFlow multiplies float tensors traced here on oneDNN's CPU kernels:
    oneDNN on and no accelerator."""
    return onednn_enabled() and not accelerator_visible()


@functools.cache
def one_thread_product_bytes() -> int:
    """The size in bytes below which TensorFlow runs a float32 product on one thread in this
    process: where oneDNN multiplies (`products_run_on_onednn`),
    `onednn_one_thread_bytes`; 0 elsewhere (Eigen always uses every thread)."""
    return onednn_one_thread_bytes() if products_run_on_onednn() else 0


@functools.cache
def onednn_one_thread_bytes() -> int:
    """The size in bytes below which TensorFlow runs a float32 product on one thread on this
    CPU where oneDNN multiplies: a product whose operands and result together take fewer
    bytes than a core's L2 cache times 1.01 (`ExecuteSingleThreadedGemm` in its oneDNN
    kernels, with Eigen's cache sizes; measured on a 2-core Sapphire Rapids, 2 MiB L2:
    [906, 256] x [256, 256] on one thread, 907 rows on two, [208, 256] x [256, 1024] on
    one, 209 rows on two); 0 where the L2 cache's size is unknown (read from Linux's
    sysfs)."""
    caches = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(caches)):
            with open(os.path.join(caches, index, "level")) as level:
                if level.read().strip() != "2":
                    continue
            with open(os.path.join(caches, index, "size")) as size:
                text = size.read().strip()
            return int(int(text[:-1]) * {"K": 1 << 10, "M": 1 << 20}[text[-1]] * 1.01)
    except (OSError, ValueError, KeyError, IndexError):
        pass
    return 0


@functools.cache
def bfloat16_products_accumulate_in_float32() -> bool:
    """Whether this process's bfloat16 `MatMul` keeps its running sums in float32
    (`bfloat16_sums_trial`, run eagerly).

    Why a trial: TensorFlow hands bfloat16 products to oneDNN, which accumulates in float32,
    only on CPUs with AVX512F or AVX_NE_CONVERT and oneDNN on; elsewhere (AVX2-only CPUs
    such as older AMD EPYCs, or `TF_ENABLE_ONEDNN_OPTS=0`) Eigen multiplies them and rounds
    its partial sums to bfloat16 (16.875 for this sum of 16.996; the bias gradients of 4,096
    rows of unit normals off by up to 0.76%, AMD EPYC AVX2-only). TensorFlow tells Python
    whether oneDNN is on (`onednn_enabled`), but neither which library runs a bfloat16
    product nor the CPU's features."""
    with tf.init_scope():
        return bool(bfloat16_sums_trial())


def bfloat16_sums_trial(one=1.0):
    """A scalar bool tensor: whether a bfloat16 `MatMul` where it runs keeps its running
    sums in float32, tried on one product whose sum bfloat16 partial sums cannot reach
    (1 + 4,095 x 2^-8). `one` scales the product's column: 1, given as a tensor that
    TensorFlow cannot compute before the graph runs where the trial must run on the
    kernels a session picks (Grappler would fold a product of constants on Eigen's)."""
    column = tf.concat([[[1.0]], tf.fill([4095, 1], 2.0 ** -8)], axis=0) * one
    total = tf.matmul(tf.ones([1, 4096], tf.bfloat16), tf.cast(column, tf.bfloat16))
    return tf.equal(total[0, 0], tf.constant(17.0, tf.bfloat16))


def run_eager_ops_by_their_kernels() -> None:
    """From now on in this process, eager ops run by their kernels when no accelerator is
    visible. It starts TensorFlow's runtime (call it where ops run next anyway: it fixes
    the devices)."""
    if not accelerator_visible():  # starts the runtime
        pywrap_tfe.TFE_ContextSetRunEagerOpAsFunction(context.context()._handle, False)


def without_autotuning(data):
    """`data` with `tf.data`'s autotuning off if it is a dataset whose options leave
    autotuning unset (one that sets it, either way, is the user's choice, kept); anything
    else (arrays, lists, None) as it is. Its `AUTOTUNE` maps and interleaves still make
    calls side by side, as many as autotuning starts them with (the cores, at most 16, or
    `options.autotune.initial_parallelism`), never more (40 calls of 50 ms: 1.03 s on 2
    cores either way), and its prefetches still overlap producing with consuming.

    Why: with autotuning on (TensorFlow 2.21's default), a pass over a finite dataset often
    ends only when autotuning's optimisation thread next wakes, at 10 x (2^k - 1) ms from
    the iterator's start (0.63, 1.27, 2.55, 5.11 s, ...), idle until then: a Keras
    `fit` epoch of 1.6 s took 2.55 s in 2 to 4 epochs of 8, an `evaluate` of ELECTRA-Small
    2.55 s instead of 1.9-2.3 in 6 calls of 10, 40 sequential 50 ms map calls 2.55 s
    instead of 2.06 (2-core AMD EPYC, AVX2; none of it with autotuning off). Each `fit`
    epoch, `evaluate` and `predict` over a dataset is such a pass."""
    if not isinstance(data, tf.data.Dataset) or data.options().autotune.enabled is not None:
        return data
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.with_options(options)
