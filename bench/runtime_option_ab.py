r"""One training-kernel option on and off, in one process: ELECTRA-Small pretraining steps of
the two models alternating.

  python bench/runtime_option_ab.py --option fused_layer_norm --mixed_precision bf16

Builds the pretrainer twice as `electra-pretrain` does (`runs.pretrain.build_model`), once
with the `RuntimeOptions` field `--option` off and once on, then times `--pairs` pairs of
steps on the same random batch, the two in turn (the order flips every pair). Printed: each
side's median step and the median of the pairwise ratios on / off.

Why: the machines this runs on change speed for minutes at a time, by more than most
single changes are worth (5-10% against 1-4%), so separate processes, or one side after
the other, measure the machine as much as the change. Steps that alternate share its
spells.
"""

import dataclasses
import os
import statistics
import sys
import time

from absl import app, flags
import electra_tf  # noqa: F401  (its CPU memory settings)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # synthetic

FLAGS = flags.FLAGS
flags.DEFINE_enum("option", "fused_layer_norm",
                  ["fused_layer_norm", "fused_dropout", "fused_gelu", "sixteen_bit_dropout"],
                  "The `RuntimeOptions` switch compared (off against on).")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16"], "As electra-pretrain's.")
flags.DEFINE_string("preset", "small", "ELECTRA preset.")
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("warmup", 3, "Untimed steps of each model first.")
flags.DEFINE_integer("pairs", 30, "Timed pairs of steps.")


def main(argv):
    del argv
    import keras

    from electra_tf.training.runtime_options import RuntimeOptions
    from synthetic import preset_config, pretraining_step, random_batch

    config = preset_config(FLAGS.preset, 30522, FLAGS.seq_length, FLAGS.batch_size)
    batch = random_batch(config, FLAGS.batch_size, FLAGS.seq_length)
    steps = {}
    for on in (False, True):
        keras.utils.set_random_seed(0)
        options = dataclasses.replace(RuntimeOptions(mixed_precision=FLAGS.mixed_precision),
                                      **{FLAGS.option: on})
        steps[on] = pretraining_step(config, options)
        for _ in range(FLAGS.warmup):
            steps[on](batch)
    durations = {False: [], True: []}
    for pair in range(FLAGS.pairs):
        for on in ((False, True) if pair % 2 == 0 else (True, False)):
            start = time.perf_counter()
            steps[on](batch)
            durations[on].append(time.perf_counter() - start)
    ratios = [on / off for on, off in zip(durations[True], durations[False])]
    print(f"\n{FLAGS.preset} {FLAGS.batch_size} x {FLAGS.seq_length}, {FLAGS.mixed_precision}, "
          f"--{FLAGS.option}: off {statistics.median(durations[False]) * 1000:,.0f} ms/step, "
          f"on {statistics.median(durations[True]) * 1000:,.0f} ms/step, "
          f"on / off {statistics.median(ratios):.3f} (median of {FLAGS.pairs} pairs)")


if __name__ == "__main__":
    app.run(main)
