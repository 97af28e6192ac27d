r"""Where an exported classifier's request spends its time, per op type, beside Hugging
Face torch's on the same weights.

  python bench/serving_profile.py --export exports/serving/sentiment/1 \
      --huggingface hf_sentiment --text long --batch_size 1

Ours: the version loaded with the TF1 session loader (what TF Serving's C++ loader
mirrors), `--repeats` requests traced with `RunOptions.FULL_TRACE` and their step stats
summed by op type. Torch (with `--huggingface`, after ours, so that neither runtime's
threads disturb the other): `torch.profiler` over the same requests, by self CPU time.
Printed per side: its untraced median, then each op type's time per request (start to
end, summed over ops: ops running side by side on several cores each count, so the sum
can exceed the request's wall time), its share and its count per request.

Why: `serving_latency.py` says how far apart the sides are; this says where (the
products' kernels, or the passes between them), the issue's "profile before changing
anything" for serving.
"""

import collections
import os

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (the tokenizer's ops)
from absl import app, flags  # noqa: E402

from serving_sides import (TEXTS, median_seconds, tensorflow_kernels,  # noqa: E402
                           tf_serving_requests, torch_requests)

FLAGS = flags.FLAGS
flags.DEFINE_string("export", None, "An exported version directory (<base>/<N>).")
flags.DEFINE_string("huggingface", None, "Optional: the same model converted to Hugging "
                    "Face (`electra-convert --to huggingface`), to profile torch after ours.")
flags.DEFINE_enum("text", "long", list(TEXTS), "The request's texts: short (~20 tokens) or "
                  "long (cut at 128 tokens).")
flags.DEFINE_integer("batch_size", 1, "Texts per request.")
flags.DEFINE_integer("repeats", 10, "Requests profiled per side (after untraced ones).")
flags.DEFINE_integer("top", 20, "Op types printed per side.")


def median_ms(request, texts, repeats=20):
    """The median of `repeats` untraced requests, after 3 more."""
    for _ in range(3):
        request(texts)
    return 1000 * median_seconds(lambda: request(texts), repeats)


def op_type(node_stats) -> str:
    """A step-stats node's op type: its timeline label reads "name = Type(inputs)"."""
    label = node_stats.timeline_label
    return label.split(" = ", 1)[1].split("(", 1)[0] if " = " in label else node_stats.node_name


def profile_ours(request, texts):
    """({op type: (ms, count) per request}, nodes per request)."""
    totals = collections.defaultdict(lambda: [0, 0])
    options = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    for _ in range(FLAGS.repeats):
        metadata = tf.compat.v1.RunMetadata()
        request(texts, options=options, run_metadata=metadata)
        for device in metadata.step_stats.dev_stats:
            for node in device.node_stats:
                total = totals[op_type(node)]
                total[0] += node.all_end_rel_micros
                total[1] += 1
    per_request = {op: (micros / 1000 / FLAGS.repeats, count / FLAGS.repeats)
                   for op, (micros, count) in totals.items()}
    return per_request, sum(count for _, count in per_request.values())


def profile_torch(request, texts):
    """{op: (self CPU ms, count) per request}."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        for _ in range(FLAGS.repeats):
            request(texts)
    return {event.key: (event.self_cpu_time_total / 1000 / FLAGS.repeats,
                        event.count / FLAGS.repeats) for event in profiled.key_averages()}


def print_table(title, times):
    total = sum(ms for ms, _ in times.values())
    print(f"\n{title}: {total:.1f} ms of op time per request")
    for op, (ms, count) in sorted(times.items(), key=lambda item: -item[1][0])[:FLAGS.top]:
        print(f"  {op:<40}{ms:9.2f} ms {100 * ms / total:5.1f}% {count:8.1f} per request")


def main(argv):
    del argv
    print(tensorflow_kernels())
    texts = [TEXTS[FLAGS.text]] * FLAGS.batch_size
    print(f"{FLAGS.batch_size} {FLAGS.text} text(s) per request")
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], FLAGS.export)
        ours = tf_serving_requests(session, meta.signature_def["serving_default"])
        untraced = median_ms(ours, texts)
        times, nodes = profile_ours(ours, texts)
    print_table(f"ours: {untraced:.1f} ms per request untraced, {nodes:.0f} nodes", times)
    if FLAGS.huggingface:
        with_torch = torch_requests(FLAGS.huggingface, onnx=False)["torch"]
        untraced = median_ms(with_torch, texts)
        print_table(f"torch: {untraced:.1f} ms per request untraced",
                    profile_torch(with_torch, texts))


if __name__ == "__main__":
    flags.mark_flags_as_required(["export"])
    app.run(main)
