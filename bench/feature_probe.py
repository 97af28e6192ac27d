r"""Frozen-feature probe: do a pretrained encoder's features beat a random encoder's?

  python bench/feature_probe.py --init_checkpoint runs/x \
      --train_file data/demo/sentiment/train.jsonl --eval_file data/demo/sentiment/dev.jsonl

Encodes the texts with the pretrained discriminator and with a randomly initialised one of
the same shape (no dropout, no fine-tuning), then fits a logistic regression on the
standardised `[CLS]` vector and on each layer's mean-pooled output, and prints dev
accuracy for both encoders. A few minutes on 2 cores for the 4-layer runs in the README.
Cheaper than fine-tuning over seeds, and it separates "the features are poor" from "the
fine-tuning recipe is wrong".
"""

import json

import electra_tf  # noqa: F401  (its CPU memory settings)
import keras  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf import run_dir  # noqa: E402
from electra_tf.finetuning import readers, tasks  # noqa: E402
from electra_tf.finetuning.features import Encoder  # noqa: E402
from electra_tf.text.tokenizer import ElectraTokenizer  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("init_checkpoint", None, "Pretraining run directory (or checkpoint).")
flags.DEFINE_string("train_file", None, "Labelled text (JSONL/CSV/TSV, as finetune.py).")
flags.DEFINE_string("eval_file", None, "Labelled text to score on.")
flags.DEFINE_integer("max_seq_length", 64, "Tokens per example.")
flags.DEFINE_integer("epochs", 60, "Full passes of the logistic regression.")
flags.DEFINE_integer("seed", 0, "Seed of the random encoder and the probe.")


def pooled_features(encoder, inputs) -> dict:
    """{"cls": [n, hidden], "mean_layer_i": [n, hidden] for each layer}."""
    features = {"cls": [], **{f"mean_layer_{i}": [] for i in range(encoder.num_layers)}}
    for start in range(0, len(inputs["input_word_ids"]), 256):
        batch = {k: v[start:start + 256] for k, v in inputs.items()}
        outputs = encoder(batch, training=False)
        mask = batch["input_mask"][..., None].astype(np.float32)
        features["cls"].append(outputs["pooled_output"].numpy())
        for i, layer in enumerate(outputs["encoder_outputs"]):
            features[f"mean_layer_{i}"].append((layer.numpy() * mask).sum(1) / mask.sum(1))
    return {k: np.concatenate(v) for k, v in features.items()}


def probe_accuracy(train_x, train_y, eval_x, eval_y, num_labels, epochs, seed) -> float:
    mean, std = train_x.mean(0), train_x.std(0) + 1e-6
    keras.utils.set_random_seed(seed)
    probe = keras.Sequential([keras.layers.Dense(num_labels)])
    probe.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    probe.fit((train_x - mean) / std, train_y, epochs=epochs, batch_size=256, verbose=0)
    return float(probe.evaluate((eval_x - mean) / std, eval_y, verbose=0)[1])


def main(argv):
    del argv
    task = tasks.get_task("text_classification")
    read = lambda path: readers.read_sequence_examples(task, path)  # noqa: E731
    train, evaluation = read(FLAGS.train_file), read(FLAGS.eval_file)
    labels = task.kind.labels(task, train)
    task.kind.check_labels(evaluation, labels)
    index = {label: i for i, label in enumerate(labels)}
    pretrained = run_dir.open_pretrained(FLAGS.init_checkpoint)
    config = pretrained.config
    packer = Encoder(ElectraTokenizer.of_model(pretrained),
                     pretrained.special_ids, FLAGS.max_seq_length)
    encode = lambda examples: packer.encode_pairs(  # noqa: E731
        [e.text for e in examples], [e.text_pair for e in examples])
    train_y = np.array([index[e.label] for e in train])
    eval_y = np.array([index[e.label] for e in evaluation])

    results = {}
    for name, source in (("pretrained", pretrained), ("random", None)):
        keras.utils.set_random_seed(FLAGS.seed)
        encoder = run_dir.load_encoder(source, config, dropout=0.0)
        train_features = pooled_features(encoder, encode(train))
        eval_features = pooled_features(encoder, encode(evaluation))
        results[name] = {
            key: round(probe_accuracy(train_features[key], train_y, eval_features[key],
                                      eval_y, len(labels), FLAGS.epochs, FLAGS.seed), 4)
            for key in train_features}
    print(json.dumps({"checkpoint": pretrained.checkpoint, **results}, indent=2))


if __name__ == "__main__":
    flags.mark_flags_as_required(["init_checkpoint", "train_file", "eval_file"])
    app.run(main)
