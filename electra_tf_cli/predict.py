r"""Predicts with a fine-tuned model: raw inputs in, one JSON line per input out.

  electra-predict --checkpoint runs/sentiment --input reviews.jsonl --output predictions.jsonl
  electra-predict --checkpoint exports/serving/sentiment --input reviews.txt --output p.jsonl
  electra-predict --checkpoint runs/ner --input sentences.conll --output tags.jsonl
  electra-predict --checkpoint runs/squad --input dev-v2.0.json --output answers.jsonl

--checkpoint is a fine-tuning run (electra-finetune --model_dir: its best trial) or a
serving export (electra-export-classifier --output: a version, or the newest under a base
directory). Inputs: texts (JSONL `text`/`text_pair`, CSV/TSV columns, or one per line),
words for taggers (CoNLL, JSONL `words`, or one sentence per line), questions for QA (SQuAD
JSON, or JSONL `question`/`context`). Each output line holds the input and its
`prediction` (a label with `probabilities`, a score, tags in IOB2, or an answer).
"""

import sys

from absl import flags

from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["checkpoint", "input", "output"]


def define_flags():
    flags.DEFINE_string("checkpoint", None, "A fine-tuning run directory (electra-finetune "
                        "--model_dir) or a serving export (electra-export-classifier "
                        "--output).")
    flags.DEFINE_string("input", None, "The inputs: .jsonl, .csv/.tsv, .conll (taggers), "
                        "SQuAD .json (QA), or a text file with one input per line.")
    flags.DEFINE_string("output", None, "The predictions' JSONL file (a new file).")
    flags.DEFINE_integer("batch_size", 32, "Inputs per batch; larger batches are faster "
                         "per input and need more memory.")
    flags.DEFINE_integer("trial", None, "The trial of a fine-tuning run to predict with "
                         "(default: the best one).")


def run(argv):
    del argv
    # TensorFlow's side, imported once the flags are parsed (`common.start`).
    from electra_tf.runs.predict import predict_file

    result = predict_file(FLAGS.checkpoint, FLAGS.input, FLAGS.output, FLAGS.batch_size,
                          FLAGS.trial)
    rate = result["inputs"] / max(result["seconds"], 1e-9)
    print(f"Predicted {result['inputs']} inputs ({result['kind']}) in "
          f"{result['seconds']:.1f} s ({rate:.1f}/s): {FLAGS.output}")


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
