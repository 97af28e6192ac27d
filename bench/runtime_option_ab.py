r"""One training-kernel option on and off, in one process: ELECTRA-Small pretraining steps,
or fine-tuning steps, of the two models alternating.

  python bench/runtime_option_ab.py --option fused_layer_norm --mixed_precision bf16
  python bench/runtime_option_ab.py --task classify --option sixteen_bit_dropout

Pretraining (`--task pretrain`): builds the pretrainer twice as `electra-pretrain` does
(`runs.pretrain.build_model`), once with the `RuntimeOptions` field `--option` off and once
on, then times `--pairs` pairs of steps on the same random batch, the two in turn (the
order flips every pair). Fine-tuning (`--task classify`, `tag` or `qa`, the fine-tuning
bench's examples and task models on `--model`): the two models' `training_kernels` differ
in `--option`; each of `--pairs` rounds fits both, in turn, on the same 6 new batches
(the order flips every round) and times every step but the first of each `fit` (its
iterator's set-up). Printed: each side's median step and, for pretraining, the median of
the pairwise ratios on / off; for fine-tuning, the ratios of the medians and of the steps'
sums.

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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # synthetic, demo_data

import demo_data  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_enum("task", "pretrain", ["pretrain", *demo_data.FINETUNING_TASKS],
                  "Pretraining steps, or fine-tuning steps of this task.")
flags.DEFINE_string("model", demo_data.REFERENCE_DISCRIMINATOR,
                    "Fine-tuning: " + demo_data.MODEL_HELP)
flags.DEFINE_enum("option", "fused_layer_norm",
                  ["fused_layer_norm", "fused_dropout", "fused_gelu", "sixteen_bit_dropout"],
                  "The `RuntimeOptions` switch compared (off against on).")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16"], "As electra-pretrain's.")
flags.DEFINE_string("preset", "small", "ELECTRA preset.")
flags.DEFINE_integer("batch_size", None, "Sequences per step (default: 32 in pretraining, 16 "
                     "in fine-tuning).")
flags.DEFINE_integer("seq_length", 128, "Pretraining: tokens per sequence.")
flags.DEFINE_integer("warmup", 3, "Untimed steps of each model first.")
flags.DEFINE_integer("pairs", 30, "Timed pairs of steps (fine-tuning: of rounds).")


def main(argv):
    del argv
    if FLAGS.task == "pretrain":
        pretraining(FLAGS.batch_size or 32)
    else:
        finetuning(FLAGS.batch_size or 16)


def pretraining(batch_size):
    import keras

    from electra_tf.training.runtime_options import RuntimeOptions
    from synthetic import preset_config, pretraining_step, random_batch

    config = preset_config(FLAGS.preset, 30522, FLAGS.seq_length, batch_size)
    batch = random_batch(config, batch_size, FLAGS.seq_length)
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
    print(f"\n{FLAGS.preset} {batch_size} x {FLAGS.seq_length}, {FLAGS.mixed_precision}, "
          f"--{FLAGS.option}: off {statistics.median(durations[False]) * 1000:,.0f} ms/step, "
          f"on {statistics.median(durations[True]) * 1000:,.0f} ms/step, "
          f"on / off {statistics.median(ratios):.3f} (median of {FLAGS.pairs} pairs)")


def finetuning(batch_size):
    import keras

    from electra_tf.training.runtime import precision
    from electra_tf.training.runtime_options import RuntimeOptions

    per_round = 6 * batch_size
    inputs, targets = demo_data.finetuning_examples(FLAGS.task,
                                                    per_round * (FLAGS.pairs + 1))

    models = {}
    for on in (False, True):
        keras.utils.set_random_seed(0)
        with precision(FLAGS.mixed_precision):
            models[on] = demo_data.task_model(FLAGS.task, FLAGS.model)
        models[on].training_kernels = RuntimeOptions(**{FLAGS.option: on})

    def steps(model, part):
        ends = []
        model.fit(demo_data.rows(inputs, part), targets[part], batch_size=batch_size,
                  epochs=1, shuffle=False, verbose=0, callbacks=[keras.callbacks.LambdaCallback(
                      on_train_batch_end=lambda *_, **__: ends.append(time.perf_counter()))])
        return [b - a for a, b in zip(ends, ends[1:])]  # the first step's set-up left out

    for model in models.values():
        steps(model, slice(0, per_round))
    durations = {False: [], True: []}
    for pair in range(FLAGS.pairs):
        part = slice(per_round * (pair + 1), per_round * (pair + 2))
        for on in ((False, True) if pair % 2 == 0 else (True, False)):
            durations[on] += steps(models[on], part)
    off, on = (statistics.median(durations[side]) for side in (False, True))
    print(f"\n{FLAGS.task}, batches of {batch_size}, {FLAGS.mixed_precision}, "
          f"--{FLAGS.option}: off {off * 1000:,.1f} ms/step, on {on * 1000:,.1f} ms/step, "
          f"on / off {on / off:.3f} (medians of {len(durations[True])} steps a side), "
          f"{sum(durations[True]) / sum(durations[False]):.3f} (their sums)")


if __name__ == "__main__":
    app.run(main)
