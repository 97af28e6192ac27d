"""`FlatDense`: Keras's `Dense` over [batch, seq, features] as one 2-D `MatMul` + `BiasAdd`.

Written by hand because Keras's TensorFlow backend multiplies a 3-D input by a 2-D kernel
with `tf.tensordot`, which, with the batch and sequence lengths unknown (as under `fit`),
builds about twenty shape-computing graph ops around each matmul (and more for its
gradient), and adds the bias as a separate broadcasting `AddV2`. Flattening the input to
[batch x seq, features] takes a few reshapes, and a 2-D `MatMul` followed by `BiasAdd` is
what TensorFlow's graph optimiser fuses into one oneDNN `_FusedMatMul`. Same weights, names
and values (to float32 rounding).
"""

import math

import keras
import tensorflow as tf

from electra_tf.layers.activations import fused_gelu, fused_gelu_of_sum
from electra_tf.layers.inference import form_by_size, onednn_at_run_time, sequence_shape
from electra_tf.layers.integer_transpose import transpose_as_integers
from electra_tf.tf_runtime import (
    bfloat16_products_accumulate_in_float32, one_thread_product_bytes, onednn_one_thread_bytes,
    products_run_on_eigen, products_run_on_onednn)


@keras.saving.register_keras_serializable(package="electra_tf")
class FlatDense(keras.layers.Dense):
    """A `Dense` whose inputs of rank 3 or more are flattened to one 2-D matmul; 2-D
    inputs, LoRA and quantized kernels go through `Dense.call` unchanged."""

    def call(self, inputs, training=None):
        if len(inputs.shape) <= 2 or not self.multiplies_flat():
            return super().call(inputs, training=training)
        return flat_matmul(inputs, self.kernel, self.bias, contracted_axes=1,
                           activation=self.activation, training=training)

    def multiplies_flat(self) -> bool:
        """Whether `call` multiplies inputs of rank 3 or more by `flat_matmul`: not a LoRA
        or quantized kernel, which `Dense.call` multiplies."""
        return not self.lora_enabled and self.quantization_mode is None


# Inference products of at most SPLIT_MAX_ROWS rows with a kernel of at least
# SPLIT_MIN_KERNEL_SIZE values run as two half-products (`split_matmul` says why), or
# more (`split_max_rows`); those with an activation on their 2-D output, at most
# SPLIT_MAX_ROWS_ACTIVATED rows.
SPLIT_MAX_ROWS = 256
SPLIT_MAX_ROWS_ACTIVATED = 32
SPLIT_MIN_KERNEL_SIZE = 256 * 256


def flat_matmul(inputs, kernel, bias, contracted_axes, activation=None, training=None):
    """`activation(tensordot(inputs, kernel, contracted_axes) + bias)` as a 2-D `MatMul`
    and `BiasAdd` between reshapes; `bias` (or None) has the shape of the kernel's
    uncontracted axes. TensorFlow's own ops, not `keras.ops`: tracing them is cheaper, and
    this runs 148 times in ELECTRA-Small's pretraining step.

    With one output axis the activation runs on the 2-D product, before the reshape:
    Grappler fuses a `MatMul`, `BiasAdd` and GELU into one oneDNN kernel only when nothing
    stands between them (the feed-forward layers of an exported classifier).

    Outside training, a product of few rows with a large kernel runs as `split_matmul`;
    with the rows unknown until run time, only under `forms_per_call` (exports) and
    `small_forms` (`predict`'s function for single short texts)."""
    contracted = math.prod(kernel.shape[:contracted_axes])
    produced = tuple(kernel.shape[contracted_axes:])
    kernel = tf.convert_to_tensor(kernel)
    if kernel.shape.rank != 2:
        kernel = tf.reshape(kernel, (contracted, math.prod(produced)))
    splittable = (not training and contracted % 2 == 0
                  and kernel.shape.num_elements() >= SPLIT_MIN_KERNEL_SIZE)
    if bias is not None:
        bias = tf.convert_to_tensor(bias)
        bias = bias if bias.shape.rank == 1 else tf.reshape(bias, (-1,))
    x = inputs if inputs.shape.rank == 2 else tf.reshape(inputs, (-1, contracted))
    # With one output axis, the 2-D product's last axis is the output's.
    flat_activation = activation if len(produced) == 1 else None

    def product(split):
        if split:
            y = split_matmul(x, kernel)
        elif training:
            y = matmul(x, kernel)
        else:
            # Not `matmul`: its gradient serves training, and its custom-gradient identities
            # would keep Grappler from fusing the product with its bias and activation in a
            # `tf.cond`'s branch (measured: 60 of an export's 74 products unfused).
            y = tf.matmul(x, kernel)
        if bias is not None and training and flat_activation is fused_gelu:
            return bias_add_and_fused_gelu(y, bias)
        if bias is not None:
            y = bias_add(y, bias) if training else tf.nn.bias_add(y, bias)
        return y if flat_activation is None else flat_activation(y)

    def rows():
        return run_time_rows(x, len(inputs.shape) - contracted_axes)

    if splittable:
        # Unsplit, Grappler fuses the activation into oneDNN's product; split, it runs as
        # separate passes over the output (the GELU's five): 24 feed-forward GELU products
        # chained took 0.72-0.87x the split form's time unsplit at 48-256 rows, 1.07-1.23x
        # at 16-32 (2-core AVX-512 EPYC Zen 5; the other products stayed faster split up
        # to 128 rows); an exported classifier's single long text (128 rows) 0.91-0.95x,
        # eight short ones (160 rows) 0.88-0.92x.
        activated = flat_activation not in (None, keras.activations.linear)
        limit = (SPLIT_MAX_ROWS_ACTIVATED if activated
                 else split_max_rows(kernel, onednn_at_run_time()))
        y = form_by_size(x.shape[0], rows, limit,
                         lambda: product(split=True), lambda: product(split=False))
    else:
        y = product(split=False)
    if inputs.shape.rank == 2 and len(produced) == 1:
        return y  # already the output's shape
    y = tf.reshape(y, tf.concat([leading_shape(inputs, contracted_axes), produced], 0))
    if activation is not None and flat_activation is None:
        y = activation(y)
    return y


def leading_shape(inputs, contracted_axes):
    """The shape of `inputs`' axes before its `contracted_axes` last ones: where unknown
    when tracing, the encoder's batch's where `inputs` holds its sequences
    (`inference.sequence_batch` says why), else read off `inputs`."""
    leading = inputs.shape[:-contracted_axes]
    shape = None
    if not leading.is_fully_defined() and len(leading) == 2:
        shape = sequence_shape()
    return tf.shape(inputs)[:-contracted_axes] if shape is None else shape


def run_time_rows(x, leading_axes: int):
    """The rows of `x`, an input of `leading_axes` leading axes flattened to 2-D, as a
    scalar tensor: of the encoder's batch's shape where the input holds its sequences,
    else read off `x`."""
    shape = sequence_shape() if leading_axes == 2 else None
    return tf.shape(x)[0] if shape is None else shape[0] * shape[1]


def one_thread_rows(contracted: int, produced: int, product_bytes=None) -> int:
    """The most rows of a float32 [rows, contracted] x [contracted, produced] product that
    TensorFlow computes on one thread in this process (`tf_runtime.one_thread_product_bytes`)
    or below `product_bytes`; 0 where it computes none so."""
    if product_bytes is None:
        product_bytes = one_thread_product_bytes()
    budget = product_bytes / 4 - contracted * produced
    return max(0, math.ceil(budget / (contracted + produced)) - 1)


def split_max_rows(kernel, onednn=None):
    """The most rows an inference product by a 2-D `kernel` with no activation runs split
    (`split_matmul`): `SPLIT_MAX_ROWS`, or for a float32 kernel the rows TensorFlow
    computes its product on one thread (`one_thread_rows`) where more. Given `onednn`
    (a scalar bool tensor: `inference.onednn_at_run_time`), the limit where the graph runs,
    a scalar tensor: the rows oneDNN computes on one thread on this CPU where it multiplies
    there, else `SPLIT_MAX_ROWS`.

    Why beyond `SPLIT_MAX_ROWS` there: the split's halves run side by side, where the
    whole product leaves a core idle. On a 2-core Sapphire Rapids (2 MiB L2)
    ELECTRA-Small's attention projections take one thread up to 906 rows; its exported
    classifier with them split up to there, against up to 256 rows, in alternating
    requests of one process (four or five runs): 32 short texts (640 rows) 0.93-0.99x the
    time, 16 (320) 0.97-0.99x, four long texts (512) 0.90-0.97x, seven (896) 0.89-0.95x
    (sixty-third pass of issue 32). Served with oneDNN off (TensorFlow's own kernels, as on
    AVX2-only CPUs), the same export took 1.06-1.08x the time at 512-896 rows: exports pick
    the limit by the server's runtime. They keep the L2 cache of the CPU that traced them."""
    if kernel.dtype != tf.float32:
        return SPLIT_MAX_ROWS
    if onednn is None:
        return max(SPLIT_MAX_ROWS, one_thread_rows(*kernel.shape))
    where_onednn = one_thread_rows(*kernel.shape, onednn_one_thread_bytes())
    if where_onednn <= SPLIT_MAX_ROWS:
        return SPLIT_MAX_ROWS
    return tf.where(onednn, where_onednn, SPLIT_MAX_ROWS)


def feedforward_halves_max_rows(hidden: int, intermediate: int) -> int:
    """The most rows a float32 feed-forward layer of these sizes runs in halves
    (`feedforward_in_halves`) on this CPU: where TensorFlow computes its products on one
    thread (`tf_runtime.one_thread_product_bytes`) for more than `SPLIT_MAX_ROWS_ACTIVATED`
    rows, up to those rows or `SPLIT_MAX_ROWS`, whichever is more; else the rows it
    computes on one thread (the halves then never run: up to `SPLIT_MAX_ROWS_ACTIVATED`
    rows `split_matmul`'s forms are faster).

    Why beyond the rows on one thread: on a 2-core Sapphire Rapids, ELECTRA-Small's layers
    in halves were still faster up to 320 rows, whose products oneDNN ran on both threads
    (the chain of `feedforward_in_halves` below: 21.3-21.5 against 23.9-24.7 ms at 256
    rows, 26.0-27.3 against 29.7-30.0 at 320, level from 384). Two long texts (256 rows)
    through an exported classifier took 0.95x their time before this form in halves,
    1.03x with the halves' choice but not the halves.

    An export keeps the limit of the machine that traced it, whatever CPU serves it. One
    traced on Sapphire Rapids and served there with oneDNN off (TensorFlow's own kernels)
    still ran 0.93-0.96x the time at 128-256 rows; on a 2-core AVX2 EPYC the same halves,
    chained, took 1.16x the time at 128 rows and 0.95x at 216 (fifty-seventh pass of
    issue 32)."""
    one_thread = one_thread_rows(hidden, intermediate)
    if one_thread <= SPLIT_MAX_ROWS_ACTIVATED:
        return one_thread
    return max(one_thread, SPLIT_MAX_ROWS)


def feedforward_in_halves(x, intermediate, output):
    """`output(intermediate(x))` of two built float32 `FlatDense` layers on 2-D `x`,
    outside training: the intermediate layer's units in two halves, each half through its
    product, bias and activation and then through its half of the output layer's kernel,
    the two chains summed at the end. TensorFlow runs the chains side by side, one on each
    thread.

    Why: TensorFlow runs a oneDNN product whose operands and result fit in a core's L2
    cache on one thread (`tf_runtime.one_thread_product_bytes`). On a 2-core Sapphire
    Rapids (2 MiB L2) that is ELECTRA-Small's feed-forward products up to 208 rows, which
    then leave one core idle: the 72 products of its 12 layers, chained as an export
    runs them, took 8.7-9.3 ms at 64 rows, 14.3-16.0 at 128 and 23.3-25.6 at 256, and with
    the feed-forward layers in halves 6.8-7.2, 11.9-12.9 and 19.2-20.6 (torch's MKL:
    11.3-14.0 at 128). Up to 32 rows `split_matmul`'s halves were faster (3.3-3.5 against
    3.5-3.8 ms at 20 rows). The halves of the output layer's kernel are views (rows of a
    row-major tensor); those of the intermediate one's are copies, made every call."""
    kernels = tf.split(tf.convert_to_tensor(intermediate.kernel), 2, axis=1)
    biases = tf.split(tf.convert_to_tensor(intermediate.bias), 2)
    output_kernels = tf.split(tf.convert_to_tensor(output.kernel), 2, axis=0)
    # Nothing between each product, its bias and its activation: Grappler fuses them into
    # one oneDNN kernel.
    halves = [tf.matmul(intermediate.activation(tf.nn.bias_add(tf.matmul(x, kernel), bias)),
                        output_kernel)
              for kernel, bias, output_kernel in zip(kernels, biases, output_kernels)]
    return tf.nn.bias_add(halves[0] + halves[1], tf.convert_to_tensor(output.bias))


def split_matmul(x, kernel):
    """`tf.matmul(x, kernel)` as the sum of the products over the two halves of the contracted
    axis, which TensorFlow runs side by side.

    Why: TensorFlow runs a oneDNN product on one thread when its operands and result fit
    in a core's L2 cache (`ExecuteSingleThreadedGemm` in its kernels), as few rows do: on
    a 2-core Sapphire Rapids (2 MiB L2) [128-192, 256] x [256, 1024] ran at 157-169
    GFLOP/s with two threads as with one, [256, 256] x [256, 1024] at 251. The halves run
    on two threads. ELECTRA-Small's 72 encoder products of 20 rows (a short request) took
    6.8-7.9 ms one after another, 4.0-4.8 ms split (2-core AVX-512 EPYC); its exported
    classifier's short single request 10.9-11.8 -> 8.9-10.0 ms. Up to 384 rows oneDNN
    parallelises poorly and the split still gained (the 72 products of 256 rows: 37.6 ->
    33.1 ms; two long texts, 256 rows, through the classifier: 44.7 -> 41.7 ms); from 512
    rows oneDNN uses both cores well and the split was 15-20% slower. On a 2-core AVX2
    EPYC and a 2-core Sapphire Rapids the split pays only below about 64 rows, with oneDNN
    or Eigen (`bench/split_products.py`: the whole encoder at 20 rows 7-29% faster split,
    at 128 rows 11% faster to 5% slower, at 256 rows 2-10% slower). The limit stays the
    AVX-512 EPYC's: from 64 to 256 rows the classes disagree, most at 129-256 rows (two
    long texts), where one gains about as much as the others lose. The kernel's halves
    are views, not copies (rows of a row-major tensor)."""
    x_halves = tf.split(x, 2, axis=1)
    kernel_halves = tf.split(kernel, 2, axis=0)
    return tf.matmul(x_halves[0], kernel_halves[0]) + tf.matmul(x_halves[1], kernel_halves[1])


def matmul(x, kernel):
    """`tf.matmul(x, kernel)` of 2-D tensors, with a float32 kernel's gradients in the forms
    its kernels run fastest:
    - a kernel at least as wide as it is tall: the input gradient multiplies by a
      transposed copy of the kernel. TensorFlow's gradient multiplies by the kernel read
      transposed (`transpose_b`), and oneDNN's float32 matmul runs that form slowly for
      such kernels: ELECTRA-Small's feed-forward input gradient, [4096, 1024] x [256,
      1024]^T, took 14.4 ms against 11.5 with the kernel transposed first, its attention
      projections' 3.3-3.8 against 3.0-3.3 (2-core AVX-512 EPYC); narrower kernels and
      bfloat16 ones ran as fast or faster as they are. The copy is transposed as integers,
      which Grappler does not fold back into the matmul. A float32 pretraining step of
      ELECTRA-Small: 2.7-3.5% shorter.
    - a taller kernel, where TensorFlow runs Eigen's products (`products_run_on_eigen`):
      the kernel gradient is computed transposed, wide, and transposed back. Eigen multiplies
      `x^T upstream` at 110 GFLOP/s for the feed-forward output's [1024, 256] and at 146
      in the wide form (at 4,096 rows; 98 against 118 at 640), and the generator's [256,
      64] at 69 against 98 (2-core AMD EPYC Zen 3, AVX2): ELECTRA-Small's float32
      pretraining step 2.4-2.7% shorter in alternating steps (1.5% with oneDNN on there,
      unmeasured on the CPUs where TensorFlow turns it on itself).
    """
    if kernel.dtype != tf.float32:
        return tf.matmul(x, kernel)
    if kernel.shape[1] >= kernel.shape[0]:
        return _matmul_with_transposed_kernel_gradient(x, kernel)
    if products_run_on_eigen():
        return _matmul_with_wide_kernel_gradient(x, kernel)
    return tf.matmul(x, kernel)


@tf.custom_gradient
def _matmul_with_transposed_kernel_gradient(x, kernel):
    def gradient(upstream):
        return (tf.matmul(upstream, transpose_as_integers(kernel, [1, 0])),
                tf.matmul(x, upstream, transpose_a=True))

    return tf.matmul(x, kernel), gradient


@tf.custom_gradient
def _matmul_with_wide_kernel_gradient(x, kernel):
    def gradient(upstream):
        return (tf.matmul(upstream, kernel, transpose_b=True),
                transpose_as_integers(tf.matmul(upstream, x, transpose_a=True), [1, 0]))

    return tf.matmul(x, kernel), gradient


@tf.custom_gradient
def bias_add(y, bias):
    """`tf.nn.bias_add(y, bias)` of a 2-D `y`, with `bias_gradient` as the bias's gradient.
    The forward `BiasAdd` is TensorFlow's, so Grappler still fuses it into its `MatMul`."""
    return tf.nn.bias_add(y, bias), lambda upstream: (upstream, bias_gradient(upstream))


@tf.custom_gradient
def bias_add_and_fused_gelu(y, bias):
    """`fused_gelu(tf.nn.bias_add(y, bias))` of a 2-D `y`: the bias is added inside the
    GELU's XLA kernels, and its gradient is `bias_gradient`'s.

    Why: with the bias its own op, Grappler fuses it into the `MatMul` before it, and
    oneDNN runs a bfloat16 product fused with a bias without AMX (`gemm:jit` instead of
    `brg_matmul:avx10_1_512_amx`): ELECTRA-Small's feed-forward product and GELU,
    [4096, 256] x [256, 1024], took 15.3 ms fused against 7.7 with the bias in the GELU
    (2-core Sapphire Rapids); in float32 17.1 against 15.6 (the GELU's pass reads the
    product either way; the bias no longer costs the product's epilogue)."""
    outputs, gelu_gradient = fused_gelu_of_sum(y, bias)

    def gradient(upstream):
        upstream = gelu_gradient(upstream)
        return upstream, bias_gradient(upstream)

    return outputs, gradient


def bias_gradient(upstream):
    """The gradient of a bias added to each row of a 2-D tensor, from the tensor's
    `upstream` gradient: its rows' sum, as `BiasAddGrad`, but as the product of a row of
    ones with `upstream` for bfloat16 rows where bfloat16 products accumulate in float32
    and for float32 ones where oneDNN multiplies (`products_run_on_onednn`); other
    bfloat16 rows as `BiasAddGrad` of a float32 copy, rounded once.

    Why not `BiasAddGrad` (TensorFlow's gradient): it sums bfloat16 rows in bfloat16.
    Summing 4,096 rows of unit normals, it missed the float64 sums (about 64 in size) by
    up to 21, the product by 0.47, the result's own rounding; the product also took 1.4 ms
    against 2.4 ([4096, 1024], 2-core Sapphire Rapids). In float32 it runs slower on two
    threads than on one (Eigen's column sums: [640, 1024] 107 against 55 us, [4096, 1024]
    591 against 325), where oneDNN's product took 77 and 408 us. Fine-tuning ELECTRA-Small
    on sentences (16 x ~40 positions; 60 steps a side, alternating in one process) took
    0.95x the time with the product, questions over passages and pretraining the same;
    with Eigen's products (oneDNN off, as on AVX2-only CPUs) 1.006-1.017x, so there
    float32 keeps `BiasAddGrad` (2-core Sapphire Rapids, sixty-eighth pass of issue 32).
    float32 sums stay within their rounding."""
    if upstream.dtype == tf.bfloat16:
        if bfloat16_products_accumulate_in_float32():
            return _rows_sum_by_product(upstream)
        as_float32 = tf.raw_ops.BiasAddGrad(out_backprop=tf.cast(upstream, tf.float32))
        return tf.cast(as_float32, tf.bfloat16)
    if upstream.dtype == tf.float32 and products_run_on_onednn():
        return _rows_sum_by_product(upstream)
    return tf.raw_ops.BiasAddGrad(out_backprop=upstream)


def _rows_sum_by_product(x):
    """The sum of a 2-D `x`'s rows, as the product of a row of ones with it."""
    ones = tf.ones([1, tf.shape(x)[0]], x.dtype)
    return tf.reshape(tf.matmul(ones, x), [-1])
