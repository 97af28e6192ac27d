r"""`predict` from Python on raw texts: seconds per call of our `ElectraTextClassifier`
against keras-hub's `BertTextClassifier` and Hugging Face's text-classification pipeline.

  python bench/predict_latency.py --model ../shared/models/electra-small-ref/discriminator

Every side answers class probabilities for a list of texts (the demo sentiment set's dev
texts, packed to 128 tokens at most, batches of 32): ours on the list (packed eagerly,
`PackedBatches`, shortest first) and on a `tf.data` dataset of it (its batches packed
eagerly in their order, `ElectraTask._packed_elements`); keras-hub's `BertTextClassifier`
of ELECTRA-Small's discriminator shapes on the same vocabulary (keras-hub has no ELECTRA
task model; random weights, the same work);
Hugging Face's `pipeline("text-classification")` on the model in torch. Each side runs in
fresh processes (`--rounds` each, the sides in turn), which call it on each of `--sizes`
texts in turn: the first call of each size (the first one traces the model; a later size
may trace again) and the median of `--repeats` calls after it; the medians over the
processes are printed. Then ours and torch's pipeline answer `--stream` dev texts one
call each, in a row (a service answering single requests), and their total seconds are
printed: ours runs such texts through a second predict function once 100 of them have
run (`ElectraTask._predict_function_for`), which a few calls per size never reach.
"""

import json
import os
import statistics
import subprocess
import sys
import time

from absl import app, flags
import electra_tf  # noqa: F401  (its CPU memory settings)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # demo_data

import demo_data  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model", demo_data.REFERENCE_DISCRIMINATOR, demo_data.MODEL_HELP)
flags.DEFINE_list("sizes", ["1", "8", "64"], "Texts per call.")
flags.DEFINE_integer("repeats", 5, "Timed calls per size, side and round.")
flags.DEFINE_integer("rounds", 3, "Processes per side (the sides in turn).")
flags.DEFINE_integer("stream", 400, "Single texts answered one call each, in a row, after "
                     "the sizes (0: none).")
SEQUENCE_LENGTH = 128
BATCH_SIZE = 32


def ours(model_dir):
    import electra_tf

    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        model_dir, num_classes=2, sequence_length=SEQUENCE_LENGTH)
    return lambda texts: clf.predict(texts, batch_size=BATCH_SIZE, verbose=0)


def ours_through_tf_data(model_dir):
    import electra_tf
    import tensorflow as tf

    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        model_dir, num_classes=2, sequence_length=SEQUENCE_LENGTH)
    return lambda texts: clf.predict(
        tf.data.Dataset.from_tensor_slices(texts).batch(BATCH_SIZE), verbose=0)


def keras_hub_bert(model_dir):
    import keras_hub

    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocab_size"], num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"], hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"])
    tokenizer = keras_hub.models.BertTokenizer(
        vocabulary=os.path.join(model_dir, "vocab.txt"), lowercase=True)
    preprocessor = keras_hub.models.BertTextClassifierPreprocessor(
        tokenizer, sequence_length=SEQUENCE_LENGTH)
    clf = keras_hub.models.BertTextClassifier(backbone, num_classes=2,
                                              preprocessor=preprocessor)
    return lambda texts: clf.predict(texts, batch_size=BATCH_SIZE, verbose=0)


def torch_pipeline(model_dir):
    import transformers

    pipe = transformers.pipeline("text-classification", model=model_dir, device="cpu")
    return lambda texts: pipe(texts, batch_size=BATCH_SIZE, truncation=True,
                              max_length=SEQUENCE_LENGTH, top_k=None)


# Each side in its own process, so that each first call is a fresh process's.
SIDES = {"ours": ours, "ours_tf_data": ours_through_tf_data, "keras_hub": keras_hub_bert,
         "torch": torch_pipeline}
# The sides that answer the stream of single texts: keras-hub's takes ~0.9 s a call (it
# maps its preprocessing anew at every call), and a dataset per text is no one's service.
STREAMED = ("ours", "torch")
flags.DEFINE_enum("measure", None, list(SIDES),
                  "Internal: one side in this process; prints its times as JSON.")


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure_here(name, sizes):
    """Prints JSON: the first call's seconds and {size: median seconds per call}."""
    texts = [row["text"] for row in demo_data.sentiment("dev")]
    call = SIDES[name](FLAGS.model)
    first, medians = {}, {}
    for n in sizes:
        first[n] = seconds(lambda: call(texts[:n]))
        medians[n] = statistics.median(seconds(lambda: call(texts[:n]))
                                       for _ in range(FLAGS.repeats))
    stream = (seconds(lambda: [call([text]) for text in texts[:FLAGS.stream]])
              if name in STREAMED else None)
    print(json.dumps({"first": first, "medians": medians, "stream": stream}))


def main(argv):
    del argv
    sizes = [int(s) for s in FLAGS.sizes]
    if FLAGS.measure:
        measure_here(FLAGS.measure, sizes)
        return
    runs = {name: [] for name in SIDES}
    for _ in range(FLAGS.rounds):
        for name in SIDES:
            output = subprocess.run(
                [sys.executable, __file__, f"--measure={name}", f"--model={FLAGS.model}",
                 f"--sizes={','.join(FLAGS.sizes)}", f"--repeats={FLAGS.repeats}",
                 f"--stream={FLAGS.stream}"],
                capture_output=True, text=True, check=True).stdout
            runs[name].append(json.loads(output.splitlines()[-1]))
    print(f"seconds per predict call, median of {FLAGS.rounds} processes (each the median "
          f"of {FLAGS.repeats} calls); texts packed to {SEQUENCE_LENGTH} tokens at most")
    print(f"{'side':16}" + "".join(f"{f'{n} texts':>22}" for n in sizes))
    print(f"{'':16}" + f"{'first call / later':>22}" * len(sizes))
    for name, results in runs.items():
        cells = "".join(f"{median(results, 'first', n):13.3f} / {median(results, 'medians', n):.3f}"
                        for n in sizes)
        print(f"{name:16}{cells}")
    if FLAGS.stream:
        print(f"\n{FLAGS.stream} dev texts, one call each, in a row: total seconds, median "
              f"of {FLAGS.rounds} processes")
        for name in STREAMED:
            print(f"{name:16}{statistics.median(r['stream'] for r in runs[name]):13.2f}")


def median(results, key, size) -> float:
    return statistics.median(r[key][str(size)] for r in results)


if __name__ == "__main__":
    app.run(main)
