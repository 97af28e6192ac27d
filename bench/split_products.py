r"""Where splitting an export's products stops paying, and what the forms for products
TensorFlow computes on one thread gain: ELECTRA-Small's encoder, traced as exports trace
it, timed with every large product split and with none, and as shipped with and without
those forms, at growing numbers of rows (batch x tokens).

  python bench/split_products.py --rows 20,64,128,256,384,512,640

Exports run each large product of at most `flat_dense.SPLIT_MAX_ROWS` rows as two
half-products side by side (`flat_dense.split_matmul` says why; it was measured on oneDNN
kernels of a 2-core AVX-512 CPU). Whether that pays depends on the CPU and on the kernels
TensorFlow runs (oneDNN or Eigen: `TF_ENABLE_ONEDNN_OPTS`), so the limit is set from this
bench's numbers on every machine class, with both kernel libraries. Where TensorFlow
computes a product on one thread (`tf_runtime.one_thread_product_bytes`), exports split
those with no activation beyond that limit up to those rows (`flat_dense.split_max_rows`),
and run feed-forward layers of more than 32 rows as two chains of half products
(`flat_dense.feedforward_in_halves`, up to `feedforward_halves_max_rows`): the `shipped`
side, against `no one-thread forms`, says what those gain on this CPU (the two are alike
where TensorFlow computes no such product on one thread).

Every side is one `tf.function` of the encoder (random weights; the work does not depend
on them) traced under `export_tracing()` and `inference_only()` with one signature for any
shape, as a served version is. The split sides keep each product's `tf.cond`, its limit
set to split every product in one and none in the other, and no one-thread forms. Per
number of rows, the sides run in turn, `--rounds` times `--repeats` calls each; printed:
each side's median over the rounds (best in brackets), split / unsplit and shipped / no
one-thread forms.
"""

import contextlib
import statistics

import numpy as np
from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_list("rows", ["20", "64", "128", "256", "384", "512", "640"],
                  "Rows per call: one sequence up to 128 tokens, then 128-token sequences.")
flags.DEFINE_integer("rounds", 5, "Blocks of calls per side and number of rows.")
flags.DEFINE_integer("repeats", 10, "Calls per block (their median is the block's time).")
SEQUENCE_LENGTH = 128


@contextlib.contextmanager
def forms(split_rows=None, one_thread_forms=True):
    """Within, products of at most `split_rows` rows trace split (None: as shipped), and
    the products TensorFlow computes on one thread take their forms where this CPU does,
    or never."""
    from electra_tf.layers import flat_dense

    shipped = flat_dense.SPLIT_MAX_ROWS, flat_dense.one_thread_product_bytes
    if split_rows is not None:
        flat_dense.SPLIT_MAX_ROWS = split_rows
    if not one_thread_forms:
        flat_dense.one_thread_product_bytes = lambda: 0
    try:
        yield
    finally:
        flat_dense.SPLIT_MAX_ROWS, flat_dense.one_thread_product_bytes = shipped


def traced_encoder(encoder, **form):
    """The encoder's sequence output as exports trace it, in the `forms(**form)`."""
    import tensorflow as tf
    from electra_tf.layers.encoder import input_specs
    from electra_tf.layers.export_tracing import export_tracing
    from electra_tf.layers.inference import inference_only

    function = tf.function(lambda inputs: encoder(inputs, training=False)["sequence_output"],
                           input_signature=[input_specs()])
    with forms(**form), export_tracing(), inference_only():
        return function.get_concrete_function()


def inputs_of(rows):
    """[batch, length] inputs of `rows` tokens: one sequence, or 128-token sequences."""
    length = min(rows, SEQUENCE_LENGTH)
    if rows % length:
        raise app.UsageError(f"--rows {rows}: above {SEQUENCE_LENGTH}, give a multiple of "
                             f"{SEQUENCE_LENGTH}.")
    shape = (rows // length, length)
    ids = np.random.default_rng(0).integers(1000, 30000, shape, dtype=np.int32)
    return {"input_word_ids": ids, "input_mask": np.ones(shape, np.int32),
            "input_type_ids": np.zeros(shape, np.int32)}


def main(argv):
    del argv
    import tensorflow as tf
    from serving_sides import median_seconds, tensorflow_kernels

    from electra_tf.config import ElectraConfig
    from electra_tf.layers.encoder import ElectraEncoder

    print(tensorflow_kernels())
    encoder = ElectraEncoder.from_electra_config(ElectraConfig.preset("small"))
    encoder.build()
    sides = {"split": traced_encoder(encoder, split_rows=1 << 30, one_thread_forms=False),
             "unsplit": traced_encoder(encoder, split_rows=0, one_thread_forms=False),
             "shipped": traced_encoder(encoder),
             "no one-thread forms": traced_encoder(encoder, one_thread_forms=False)}
    for rows in (int(r) for r in FLAGS.rows):
        inputs = {name: tf.constant(value) for name, value in inputs_of(rows).items()}
        expected = sides["unsplit"](inputs)
        for side in ("split", "shipped", "no one-thread forms"):  # also the first (untimed) calls
            np.testing.assert_allclose(sides[side](inputs), expected, atol=1e-4)
        times = {side: [] for side in sides}
        for _ in range(FLAGS.rounds):
            for side, function in sides.items():
                times[side].append(median_seconds(lambda: function(inputs).numpy(),
                                                  FLAGS.repeats))
        medians = {side: statistics.median(t) for side, t in times.items()}
        print(f"{rows:4d} rows: " + "  ".join(
            f"{side} {1000 * medians[side]:7.2f} ms ({1000 * min(times[side]):.2f})"
            for side in sides) + f"  split / unsplit {medians['split'] / medians['unsplit']:.3f}"
            f"  shipped / no one-thread forms "
            f"{medians['shipped'] / medians['no one-thread forms']:.3f}", flush=True)


if __name__ == "__main__":
    app.run(main)
