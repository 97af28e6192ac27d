r"""Step time of `model.fit` on one CPU: under `OneDeviceStrategy("/cpu:0")` against
TensorFlow's default strategy (what `--strategy cpu`, and `auto` without a GPU, create),
same run.

  python bench/fit_strategy.py --shapes 16x16,32x128 --repeats 2 \
      --init_checkpoint ../shared/models/electra-small-ref/discriminator

Each measurement is a fresh process (tracing caches and thread pools are per process)
training ELECTRA-Small-shaped towers (`runs.pretrain.build_model`) through `model.fit` on
one repeated random batch; processes alternate between the strategies so that a drift in
the machine's speed hits both. Reported per shape and strategy: the first step (tracing
included), the median of the steady steps and the minor page faults per steady step
(memory the step's ops touch for the first time), each the median over `--repeats`
processes, and the default strategy's steady speed as a multiple of OneDevice's. With
`--init_checkpoint` (as `electra-finetune` takes it), also a whole `runs.finetune.finetune`
run under each strategy: 16 steps of 16 x 16 tokens on the bundled sentiment data, then 64
rows predicted (seconds in all, and its accuracy: the strategies should not change the
result).

Why: on AMD EPYC (AVX2) machines, fit under OneDeviceStrategy ran ELECTRA-Small steps
1.5-1.8x slower than under the default strategy, with 7-24x the page faults; on an
AVX-512 EPYC it did not. Single-CPU runs now use the default strategy; this bench shows
what they gained on the machine at hand. Run it with `TF_ENABLE_ONEDNN_OPTS=0` or `1`
for either of TensorFlow's kernels (Eigen is its choice on AVX2-only CPUs), and
`MALLOC_ARENA_MAX=1` to see the page faults go (docs/distributed.md).
"""

import itertools
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags
import electra_tf  # noqa: F401  (its CPU memory settings)

FLAGS = flags.FLAGS
flags.DEFINE_list("shapes", ["16x16", "32x128"], "BATCHxSEQ_LENGTH shapes, one run each.")
flags.DEFINE_integer("repeats", 2, "Processes per shape and strategy.")
flags.DEFINE_integer("steps", 13, "Steps per process: the first, 2 untimed, the rest timed.")
flags.DEFINE_string("init_checkpoint", None, "Optional: the pretrained model to time whole "
                    "fine-tuning runs from (as electra-finetune's --init_checkpoint).")
flags.DEFINE_enum("measure", None, ["one_device", "default"], "Internal: one measurement "
                  "in this process; prints 'first_seconds steady_seconds faults' (with "
                  "--shape) or 'seconds accuracy' (with --init_checkpoint).")
flags.DEFINE_string("shape", None, "Internal: the shape of --measure.")

STRATEGIES = ("one_device", "default")
SENTIMENT = pathlib.Path(__file__).resolve().parent.parent / "data" / "demo" / "sentiment"


def strategy_named(strategy_name):
    import tensorflow as tf

    from electra_tf.training.runtime import create_strategy
    from electra_tf.training.runtime_options import RuntimeOptions

    if strategy_name == "one_device":
        return tf.distribute.OneDeviceStrategy("/cpu:0")
    return create_strategy(RuntimeOptions(strategy="cpu"))


def measure(strategy_name, batch_size, seq_length, steps):
    """(first step and median steady step in seconds, median minor page faults per steady
    step), through `model.fit`."""
    import resource

    import keras
    import tensorflow as tf

    from electra_tf.runs.pretrain import build_model
    from synthetic import preset_config, random_batch

    config = preset_config("small", 30522, seq_length, batch_size)
    strategy = strategy_named(strategy_name)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model, _ = build_model(config)
    batch = random_batch(config, batch_size, seq_length)
    durations, faults = [], []

    class StepTimes(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            durations.append(time.perf_counter() - self.started)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - self.faults)

    model.fit(tf.data.Dataset.from_tensors(batch).repeat(), steps_per_epoch=steps, epochs=1,
              verbose=0, callbacks=[StepTimes()])
    return durations[0], statistics.median(durations[3:]), statistics.median(faults[3:])


def finetune_run(strategy_name, init_checkpoint):
    """(seconds, accuracy) of a whole fine-tuning run, from the model's files to results."""
    from electra_tf.finetuning.config import FinetuneConfig
    from electra_tf.runs.finetune import finetune

    strategy = strategy_named(strategy_name)
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for name, rows in (("train", 256), ("dev", 64)):
            with open(SENTIMENT / f"{name}.jsonl", encoding="utf-8") as f:
                files[name] = os.path.join(tmp, f"{name}.jsonl")
                with open(files[name], "w", encoding="utf-8") as out:
                    out.writelines(itertools.islice(f, rows))
        config = FinetuneConfig(task="text_classification", max_seq_length=16, batch_size=16,
                                epochs=1, warmup_proportion=0.5)
        started = time.perf_counter()
        results = finetune(config, init_checkpoint, files["train"], files["dev"],
                           os.path.join(tmp, "run"), strategy=strategy)
        return time.perf_counter() - started, results["summary"]["accuracy"]["median"]


def in_processes(arguments):
    """{strategy: [the numbers each of --repeats fresh processes printed]}, alternating."""
    results = {name: [] for name in STRATEGIES}
    for _ in range(FLAGS.repeats):
        for name in STRATEGIES:
            out = subprocess.run([sys.executable, __file__, f"--measure={name}", *arguments],
                                 capture_output=True, text=True, check=True)
            results[name].append([float(x) for x in out.stdout.splitlines()[-1].split()])
    return results


def main(argv):
    del argv
    if FLAGS.measure and FLAGS.shape:
        batch_size, seq_length = map(int, FLAGS.shape.split("x"))
        print(*measure(FLAGS.measure, batch_size, seq_length, FLAGS.steps))
        return
    if FLAGS.measure:
        print(*finetune_run(FLAGS.measure, FLAGS.init_checkpoint))
        return
    for shape in FLAGS.shapes:
        results = in_processes([f"--shape={shape}", f"--steps={FLAGS.steps}"])
        print(f"\nELECTRA-Small pretraining step, {shape} tokens, {FLAGS.repeats} processes "
              "each")
        steady = {}
        for name in STRATEGIES:
            first = statistics.median(r[0] for r in results[name])
            steady[name] = statistics.median(r[1] for r in results[name])
            faults = statistics.median(r[2] for r in results[name])
            print(f"{name:>11}: first step {first:6.1f} s, steady {steady[name] * 1000:7.0f} "
                  f"ms/step, {faults:8,.0f} page faults/step")
        print(f"default strategy's steady speed: "
              f"{steady['one_device'] / steady['default']:.2f}x OneDeviceStrategy's")
    if FLAGS.init_checkpoint:
        from electra_tf.convert.resolve import resolve

        # Converted here, once (a Hugging Face directory or a model name, as the CLI takes).
        results = in_processes([f"--init_checkpoint={resolve(FLAGS.init_checkpoint)}"])
        print(f"\nfine-tuning run from {FLAGS.init_checkpoint} (16 steps of 16x16, 64 rows "
              f"predicted), {FLAGS.repeats} processes each")
        for name in STRATEGIES:
            seconds = statistics.median(r[0] for r in results[name])
            accuracies = sorted({r[1] for r in results[name]})
            print(f"{name:>11}: {seconds:6.1f} s, accuracy {accuracies}")


if __name__ == "__main__":
    app.run(main)
