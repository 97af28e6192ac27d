r"""Latency and throughput of an exported classifier, through TF Serving's loading path.

  python bench/serving_latency.py --export exports/serving/sentiment/1 \
      --checkpoint runs/x-sent --pretrained runs/x

Loads the version with the TF1 session loader (what tensorflow_model_server's C++ loader
mirrors), replays its warm-up requests, then times `serving_default` on raw strings:
single requests (batch 1) and batches of `--batch_size`, median over `--repeats` runs.
Also prints the SavedModel's size beside the fine-tuning and pretraining checkpoints'.
"""

import json
import os
import pathlib
import statistics
import time

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (the tokenizer's ops)
from absl import app, flags  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("export", None, "An exported version directory (<base>/<N>).")
flags.DEFINE_string("checkpoint", None, "Optional: the fine-tuning run, for its size.")
flags.DEFINE_string("pretrained", None, "Optional: the pretraining run, for its size.")
flags.DEFINE_integer("batch_size", 32, "Batch size of the throughput measurement.")
flags.DEFINE_integer("repeats", 30, "Timed runs per measurement (the median is reported).")

SENTENCE = "The battery lasts all day and the screen is bright, but the speaker is weak."


def size_mb(path, pattern="**/*"):
    return sum(p.stat().st_size for p in pathlib.Path(path).glob(pattern) if p.is_file()) / 2**20


def checkpoint_mb(directory):
    """Size of the latest checkpoint in `directory` (its index and data files)."""
    prefix = pathlib.Path(tf.train.latest_checkpoint(directory))
    return round(size_mb(prefix.parent, prefix.name + ".*"), 1)


def median_seconds(run, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv):
    del argv
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], FLAGS.export)
        signature = meta.signature_def["serving_default"]
        fetches = [signature.outputs[name].name for name in sorted(signature.outputs)]

        def request(batch_size):
            feeds = {info.name: [SENTENCE] * batch_size for info in signature.inputs.values()}
            return lambda: session.run(fetches, feeds)

        for warmup in (request(1), request(FLAGS.batch_size)):
            warmup()
        single = median_seconds(request(1), FLAGS.repeats)
        batch = median_seconds(request(FLAGS.batch_size), FLAGS.repeats)
    results = {
        "export_mb": round(size_mb(FLAGS.export), 1),
        "single_request_ms": round(1000 * single, 1),
        f"batch_{FLAGS.batch_size}_ms": round(1000 * batch, 1),
        f"batch_{FLAGS.batch_size}_examples_per_second": round(FLAGS.batch_size / batch, 1),
    }
    if FLAGS.checkpoint:
        with open(os.path.join(FLAGS.checkpoint, "eval_results.json")) as f:
            best = os.path.join(FLAGS.checkpoint, f"trial_{json.load(f)['best_trial']}", "best")
        results["finetuned_checkpoint_mb"] = checkpoint_mb(best)
    if FLAGS.pretrained:
        results["pretraining_checkpoint_mb"] = checkpoint_mb(
            os.path.join(FLAGS.pretrained, "checkpoints"))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    flags.mark_flags_as_required(["export"])
    app.run(main)
