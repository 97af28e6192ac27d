r"""Where splitting an export's products stops paying: ELECTRA-Small's encoder, traced as
exports trace it, timed with every large product split and with none, at growing numbers
of rows (batch x tokens).

  python bench/split_products.py --rows 20,64,128,256,384,512,640

Exports run each large product of at most `flat_dense.SPLIT_MAX_ROWS` rows as two
half-products side by side (`flat_dense.split_matmul` says why; it was measured on oneDNN
kernels of a 2-core AVX-512 CPU). Whether that pays depends on the CPU and on the kernels
TensorFlow runs (oneDNN or Eigen: `TF_ENABLE_ONEDNN_OPTS`), so the limit is set from this
bench's numbers on every machine class, with both kernel libraries.

Both sides are one `tf.function` of the encoder (random weights; the work does not depend
on them) traced under `export_tracing()` and `inference_only()` with one signature for any
shape, as a served version is: each product's `tf.cond` is in both graphs, its limit set
to split every product in one and none in the other. Per number of rows, the sides run in
turn, `--rounds` times `--repeats` calls each; printed: each side's median over the rounds
(best in brackets) and split / unsplit.
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
def split_limit(rows):
    """Within, products of at most `rows` rows trace split."""
    from electra_tf.layers import flat_dense

    shipped = flat_dense.SPLIT_MAX_ROWS
    flat_dense.SPLIT_MAX_ROWS = rows
    try:
        yield
    finally:
        flat_dense.SPLIT_MAX_ROWS = shipped


def traced_encoder(encoder, split: bool):
    """The encoder's sequence output as exports trace it, every large product split or
    none."""
    import tensorflow as tf
    from electra_tf.layers.encoder import input_specs
    from electra_tf.layers.export_tracing import export_tracing
    from electra_tf.layers.inference import inference_only

    function = tf.function(lambda inputs: encoder(inputs, training=False)["sequence_output"],
                           input_signature=[input_specs()])
    with split_limit(1 << 30 if split else 0), export_tracing(), inference_only():
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
    sides = {"split": traced_encoder(encoder, True), "unsplit": traced_encoder(encoder, False)}
    for rows in (int(r) for r in FLAGS.rows):
        inputs = {name: tf.constant(value) for name, value in inputs_of(rows).items()}
        np.testing.assert_allclose(sides["split"](inputs), sides["unsplit"](inputs),
                                   atol=1e-4)  # also the first (untimed) call of each
        times = {side: [] for side in sides}
        for _ in range(FLAGS.rounds):
            for side, function in sides.items():
                times[side].append(median_seconds(lambda: function(inputs).numpy(),
                                                  FLAGS.repeats))
        medians = {side: statistics.median(t) for side, t in times.items()}
        print(f"{rows:4d} rows: " + "  ".join(
            f"{side} {1000 * medians[side]:7.2f} ms ({1000 * min(times[side]):.2f})"
            for side in sides) + f"  split / unsplit {medians['split'] / medians['unsplit']:.3f}",
            flush=True)


if __name__ == "__main__":
    app.run(main)
