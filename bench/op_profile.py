r"""Where a pretraining step's time goes: TensorFlow's profiler over steady `fit` steps of
ELECTRA-Small, summed by op type.

  python bench/op_profile.py --batch_size 32 --seq_length 128 --steps 3

Builds the model as `electra-pretrain` does (`runs.pretrain.build_model`, the default
strategy), runs `--warmup` steps untraced, then traces `--steps` steps with
`tf.profiler.experimental` and reads the trace (the `.xplane.pb` TensorBoard's profile
plugin reads) directly, so no plugin is needed. Printed: each op type's time per step
(summed over the threads that ran it, so the total can exceed the step's wall time on
several cores), its share, and its count per step; then the step's wall time and the
runtime's own events (executor bookkeeping, XLA launches) that belong to no op; then, with
`--nodes`, the costliest ops by node, the numbers in their names written N (one row for,
say, every layer's feed-forward kernel gradient). A type's total can hide one
node's anomaly: the generator's vocabulary products, float32 in a bfloat16 step, showed
there (docs/results.md, forty-third pass).

Why: the issue's "profile before changing anything" — the time outside matmuls (softmax,
LayerNorm, dropout masks, gathers, the optimizer's update) is where the gap to the
machine's matmul peak is. `--logdir` keeps the trace for TensorBoard.
"""

import collections
import glob
import os
import re
import sys
import tempfile
import time

from absl import app, flags
import electra_tf  # noqa: F401  (its CPU memory settings)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # synthetic

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_string("preset", "small", "ELECTRA preset.")
flags.DEFINE_integer("warmup", 3, "Untraced steps first (tracing, graph optimisation).")
flags.DEFINE_integer("steps", 3, "Traced steps.")
flags.DEFINE_integer("top", 25, "Op types to print.")
flags.DEFINE_integer("nodes", 0, "Also print this many of the costliest ops by node.")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16", "fp16"], "As electra-pretrain's.")
flags.DEFINE_string("logdir", None, "Keep the trace here (default: a temporary directory).")

# A traced op's event is named "node_name:OpType"; the runtime's own events ("ExecutorState::
# Process", "ThreadpoolListener::Record", XLA's fusions and launches) are not.
OP_EVENT = re.compile(r"^([^:]+):([A-Za-z0-9_]+)$")
# The numbers Keras and TensorFlow append to repeated names (layers, their calls, gradients).
NAME_NUMBER = re.compile(r"_\d+")


def op_times(logdir):
    """({op type: total picoseconds}, {op type: count}, {runtime event: picoseconds},
    {(op type, node name, its numbers written N): picoseconds}, the same's counts)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    path = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    host = next(plane for plane in space.planes if plane.name == "/host:CPU")
    nodes, node_counts, runtime = (collections.Counter() for _ in range(3))
    for line in host.lines:
        if not line.name.startswith("tf_Compute"):  # the executor's threads run the ops
            continue
        for event in line.events:
            name = host.event_metadata[event.metadata_id].name
            match = OP_EVENT.match(name)
            if match:
                node = (match.group(2), NAME_NUMBER.sub("_N", match.group(1)))
                nodes[node] += event.duration_ps
                node_counts[node] += 1
            elif not name.startswith(("ExecutorState::Process", "ThreadpoolListener")):
                runtime[name.split("::")[-1]] += event.duration_ps
    times, counts = collections.Counter(), collections.Counter()  # per type: its nodes' sums
    for (kind, node), picoseconds in nodes.items():
        times[kind] += picoseconds
        counts[kind] += node_counts[kind, node]
    return times, counts, runtime, nodes, node_counts


def main(argv):
    del argv
    if FLAGS.logdir:
        profile(FLAGS.logdir)
        print(f"trace: {FLAGS.logdir}")
    else:
        with tempfile.TemporaryDirectory(prefix="op_profile_") as logdir:
            profile(logdir)


def profile(logdir):
    """Traces the steps into `logdir` and prints the op types' times."""
    import keras
    import tensorflow as tf

    from electra_tf.runs.pretrain import build_model
    from electra_tf.training.runtime_options import RuntimeOptions
    from synthetic import preset_config, random_batch

    config = preset_config(FLAGS.preset, 30522, FLAGS.seq_length, FLAGS.batch_size)
    keras.utils.set_random_seed(0)
    model, _ = build_model(config, RuntimeOptions(mixed_precision=FLAGS.mixed_precision))
    first, last = FLAGS.warmup, FLAGS.warmup + FLAGS.steps - 1
    wall = []

    class Trace(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == first:
                tf.profiler.experimental.start(logdir)
                self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            if batch == last:
                wall.append(time.perf_counter() - self.started)
                tf.profiler.experimental.stop()

    batch = random_batch(config, FLAGS.batch_size, FLAGS.seq_length)
    model.fit(tf.data.Dataset.from_tensors(batch).repeat(), steps_per_epoch=last + 1,
              epochs=1, verbose=0, callbacks=[Trace()])
    times, counts, runtime, nodes, node_counts = op_times(logdir)
    steps, total = FLAGS.steps, sum(times.values())
    print(f"\n{FLAGS.preset}, {FLAGS.batch_size} x {FLAGS.seq_length}, "
          f"{FLAGS.mixed_precision}: {wall[0] / steps * 1000:,.0f} ms per step (wall, "
          f"traced); ops {total / 1e9 / steps:,.0f} ms per step summed over threads")
    print(f"{'op type':<36}{'ms/step':>10}{'share':>8}{'count/step':>12}")
    for kind, picoseconds in times.most_common(FLAGS.top):
        print(f"{kind:<36}{picoseconds / 1e9 / steps:10.1f}{100 * picoseconds / total:7.1f}%"
              f"{counts[kind] / steps:12.0f}")
    rest = sum(v for _, v in times.most_common()[FLAGS.top:])
    print(f"{'(other op types)':<36}{rest / 1e9 / steps:10.1f}{100 * rest / total:7.1f}%")
    print("runtime events, ms/step: " + ", ".join(
        f"{name} {ps / 1e9 / steps:.1f}" for name, ps in runtime.most_common(6)))
    if FLAGS.nodes:
        print(f"\n{'ms/step':>8}{'count/step':>12}  op type, node")
        for (kind, node), picoseconds in nodes.most_common(FLAGS.nodes):
            print(f"{picoseconds / 1e9 / steps:8.1f}{node_counts[kind, node] / steps:12.0f}  "
                  f"{kind}, {node}")


if __name__ == "__main__":
    app.run(main)
