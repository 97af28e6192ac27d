r"""Latency and throughput of an exported classifier, through TF Serving's loading path,
against the same weights in Hugging Face torch and ONNX Runtime.

  python bench/serving_latency.py --export exports/serving/sentiment/1 \
      --checkpoint runs/x-sent --pretrained runs/x \
      --huggingface hf_sentiment   # electra-convert --to huggingface --checkpoint runs/x-sent

Loads the version with the TF1 session loader (what tensorflow_model_server's C++ loader
mirrors), then times `serving_default` on raw strings (after one untimed request of
each shape): single requests (batch 1) and batches of `--batch_size`, of a short text (~20
tokens) and a long one (cut at 128 tokens), median over `--repeats` runs, in `--rounds`
rounds that time every side in turn (the median of the rounds is reported). With
`--huggingface`, the same requests (text in, probabilities out, the tokenizer included)
through `ElectraForSequenceClassification` in torch (inference mode, padding to the
batch's longest) and through ONNX Runtime on that model exported by `torch.onnx` (once,
into a temporary directory). Also prints the SavedModel's size beside the fine-tuning and
pretraining checkpoints'.

TensorFlow runs with its pooling CPU allocator, as the README tells TF Serving operators to
start the server (`TF_CPU_ALLOCATOR_USE_BFC=true`); set the variable to false to time malloc.
A server may run the export with oneDNN's kernels or without them, on TensorFlow's own
(Eigen), depending on its build and CPU (TensorFlow turns oneDNN on by itself on CPUs with
AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX): set `TF_ENABLE_ONEDNN_OPTS=0` or `1` to time
either.
The first line printed says which ran.
"""

import json
import os
import pathlib
import statistics

os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")

import tensorflow as tf  # noqa: E402
import tensorflow_text  # noqa: E402,F401  (the tokenizer's ops)
from absl import app, flags  # noqa: E402

from serving_sides import (TEXTS, median_seconds, tensorflow_kernels,  # noqa: E402
                           tf_serving_requests, torch_requests)

FLAGS = flags.FLAGS
flags.DEFINE_string("export", None, "An exported version directory (<base>/<N>).")
flags.DEFINE_string("checkpoint", None, "Optional: the fine-tuning run, for its size.")
flags.DEFINE_string("pretrained", None, "Optional: the pretraining run, for its size.")
flags.DEFINE_integer("batch_size", 32, "Batch size of the throughput measurement.")
flags.DEFINE_integer("repeats", 30, "Timed runs per measurement and round.")
flags.DEFINE_integer("rounds", 3, "Rounds over all sides in turn; the median of the rounds' "
                     "medians is reported.")
flags.DEFINE_string("huggingface", None, "Optional: the same model converted to Hugging "
                    "Face (`electra-convert --to huggingface`), to time torch and ONNX "
                    "Runtime beside it.")


def size_mb(path, pattern="**/*"):
    return sum(p.stat().st_size for p in pathlib.Path(path).glob(pattern) if p.is_file()) / 2**20


def checkpoint_mb(prefix):
    """Size of the checkpoint at `prefix` (its index and data files)."""
    prefix = pathlib.Path(prefix)
    return round(size_mb(prefix.parent, prefix.name + ".*"), 1)


def time_requests(request):
    """{"short batch 1 ms": ..., ...}: the median of each request shape, after one
    untimed call."""
    times = {}
    for length, text in TEXTS.items():
        for batch_size in (1, FLAGS.batch_size):
            texts = [text] * batch_size
            request(texts)
            times[f"{length} batch {batch_size} ms"] = round(
                1000 * median_seconds(lambda: request(texts), FLAGS.repeats), 1)
    return times


def main(argv):
    del argv
    print(tensorflow_kernels())
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], FLAGS.export)
        sides = {"electra_tf (TF1 session, SavedModel)": tf_serving_requests(
            session, meta.signature_def["serving_default"])}
        if FLAGS.huggingface:
            sides.update(torch_requests(FLAGS.huggingface))
        # Rounds over all sides in turn, so that a machine slowing down for a while (as
        # shared ones do) slows every side alike instead of whichever ran then.
        rounds = [{name: time_requests(request) for name, request in sides.items()}
                  for _ in range(FLAGS.rounds)]
    timings = {name: {column: statistics.median(r[name][column] for r in rounds)
                      for column in rounds[0][name]} for name in sides}
    columns = list(next(iter(timings.values())))
    print(f"{'':<40}" + "".join(f"{c:>22}" for c in columns))
    for name, row in timings.items():
        print(f"{name:<40}" + "".join(f"{row[c]:>22.1f}" for c in columns))
    results = {"export_mb": round(size_mb(FLAGS.export), 1), "milliseconds": timings,
               "milliseconds_per_round": rounds}
    if FLAGS.checkpoint:
        with open(os.path.join(FLAGS.checkpoint, "eval_results.json")) as f:
            kept = json.load(f)
        results["finetuned_checkpoint_mb"] = checkpoint_mb(
            kept["trials"][kept["best_trial"]]["checkpoint"])
    if FLAGS.pretrained:
        results["pretraining_checkpoint_mb"] = checkpoint_mb(
            tf.train.latest_checkpoint(os.path.join(FLAGS.pretrained, "checkpoints")))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    flags.mark_flags_as_required(["export"])
    app.run(main)
