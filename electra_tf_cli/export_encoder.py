r"""Exports a pretraining run's discriminator as TF Hub-style SavedModels.

  electra-export-encoder --checkpoint runs/x --output exports/electra_x
  electra-export-encoder --checkpoint koelectra-base-v3 --output exports/koelectra

writes exports/electra_x/encoder (the discriminator alone; TF Hub BERT-encoder I/O) and
exports/electra_x/preprocess (raw strings -> input_word_ids/input_mask/input_type_ids).
Load them with `import tensorflow_text` first (the tokenizer's ops live there).
"""

import sys

from absl import flags

from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["checkpoint", "output"]


def define_flags():
    flags.DEFINE_string("checkpoint", None, "A pretraining (or converted) run directory, a "
                        "checkpoint inside one, a released model's name (electra-presets), "
                        "hf:ORG/REPO, an https:// archive, or a Hugging Face / TF1 / "
                        "keras-hub model directory.")
    flags.DEFINE_string("output", None, "Directory to write encoder/ and preprocess/ into.")
    flags.DEFINE_integer("seq_length", 128, "Length the preprocessor's default signature pads "
                         "to (bert_pack_inputs takes any seq_length).")


def run(argv):
    del argv
    # TensorFlow's side, imported once the flags are parsed (`common.start`).
    from electra_tf.convert.resolve import resolve
    from electra_tf.export import encoder as export_lib

    paths = export_lib.export_encoder(resolve(FLAGS.checkpoint), FLAGS.output,
                                      FLAGS.seq_length)
    print(f"Encoder: {paths['encoder']}\nPreprocessor: {paths['preprocess']}")


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
