r"""Converts ELECTRA weights between official TF1 checkpoints, Hugging Face, keras-hub and us.

Into a run directory that finetune.py, export/ and pretrain.py (to continue) accept:
  electra-convert --from official \
      --checkpoint electra_small/model.ckpt-1000000 --vocab electra_small/vocab.txt \
      --output runs/electra_small
  electra-convert --from huggingface --checkpoint electra-small-discriminator \
      --generator electra-small-generator --output runs/electra_small
  electra-convert --from keras_hub --checkpoint my_preset_dir --output runs/kh
Out of a run directory:
  electra-convert --to huggingface --checkpoint runs/x --output hf_out
  electra-convert --to official --checkpoint runs/x --output tf1/model.ckpt
  electra-convert --to keras_hub --checkpoint runs/x --output keras_hub_preset
  electra-convert --to huggingface --checkpoint koelectra-small-v3 --output hf_ko
A fine-tuned run (electra-finetune --model_dir) as Hugging Face's task model, with its labels:
  electra-convert --to huggingface --checkpoint runs/sentiment --output hf_sentiment

Every model weight must come from the source and every source weight must find a place
(optimizer slots and global_step aside); otherwise the offenders are listed by name.
"""

import sys

from absl import flags

from electra_tf.errors import ConfigError
from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["checkpoint", "output"]


def define_flags():
    flags.DEFINE_enum("from", None, ["official", "huggingface", "keras_hub"],
                      "Source format, converted into a run directory at --output.")
    flags.DEFINE_enum("to", None, ["huggingface", "official", "keras_hub"],
                      "Target format, converted from the run directory --checkpoint.")
    flags.DEFINE_string("checkpoint", None, "Source: a TF1 checkpoint prefix, an HF model "
                        "directory, a keras-hub preset directory or .keras file; with --to, "
                        "our run directory, a released model's name (electra-presets), "
                        "hf:ORG/REPO or an https:// archive; with --to huggingface, also a "
                        "fine-tuning run (electra-finetune --model_dir).")
    flags.DEFINE_string("generator", None, "--from huggingface: the ElectraForMaskedLM "
                        "generator's directory.")
    flags.DEFINE_string("vocab", None, "Vocab file (default: the one beside the checkpoint).")
    flags.DEFINE_string("output", None, "Where to write (a new directory; a prefix for "
                        "--to official).")
    flags.DEFINE_bool("lower_case", None, "Tokenizer casing (default: from the tokenizer "
                      "config, else guessed from the vocab).")
    flags.DEFINE_integer("num_heads", None, "--from official: the discriminator's attention "
                         "heads (default: hidden size / 64, the official rule).")
    flags.DEFINE_integer("trial", None, "--to huggingface of a fine-tuning run: the trial "
                         "whose model to convert (default: the best one's).")
    flags.DEFINE_bool("discriminator_only", False, "Convert the discriminator alone, ignoring "
                      "any generator weights in the source.")


def run(argv):
    del argv
    # TensorFlow's side, imported once the flags are parsed (`common.start`).
    from electra_tf import run_dir
    from electra_tf.convert import api
    from electra_tf.convert.resolve import resolve
    from electra_tf.export.huggingface import export_huggingface

    source, target = getattr(FLAGS, "from"), FLAGS.to
    if (source is None) == (target is None):
        raise ConfigError("Give exactly one of --from (into a run directory) or --to (out "
                          "of one).")
    if source == "official":
        report = api.from_official(FLAGS.checkpoint, FLAGS.output, FLAGS.vocab,
                                   FLAGS.lower_case, FLAGS.num_heads, FLAGS.discriminator_only)
    elif source == "huggingface":
        report = api.from_huggingface(FLAGS.checkpoint, FLAGS.output, FLAGS.generator,
                                      FLAGS.vocab, FLAGS.lower_case, FLAGS.discriminator_only)
    elif source == "keras_hub":
        report = api.from_keras_hub(FLAGS.checkpoint, FLAGS.output, FLAGS.vocab,
                                    FLAGS.lower_case)
    elif target == "huggingface" and run_dir.is_finetuned(FLAGS.checkpoint):
        report = export_huggingface(FLAGS.checkpoint, FLAGS.output, FLAGS.trial)
        print(f"Wrote Hugging Face's {report['architecture']}: {report['path']} "
              f"(transformers.pipeline(\"{report['pipeline_task']}\", model=...)).")
        for note in report["notes"]:
            print(f"note: {note}")
        return
    elif run_dir.is_finetuned(FLAGS.checkpoint):
        raise ConfigError(f"{FLAGS.checkpoint} is a fine-tuning run: it converts --to "
                          "huggingface (the official and keras-hub formats hold no task "
                          "heads).")
    elif target == "huggingface":
        written = api.to_huggingface(resolve(FLAGS.checkpoint), FLAGS.output)
        print(f"Wrote Hugging Face model directories: {', '.join(written)}")
        return
    elif target == "keras_hub":
        written = api.to_keras_hub(resolve(FLAGS.checkpoint), FLAGS.output)
        print(f"Wrote a keras-hub preset (ElectraBackbone + ElectraTokenizer): {written}")
        return
    else:
        written = api.to_official(resolve(FLAGS.checkpoint), FLAGS.output)
        print(f"Wrote a TF1 checkpoint: {written}")
        return
    parts = "discriminator" + (" + head" if report["discriminator_head"] else "") + (
        " + generator" if report["generator"] else "")
    ignored = report["ignored"]
    print(f"Mapped {report['mapped_variables']} variables ({parts}) into {FLAGS.output}"
          + (f"; ignored {len(ignored)} generator variables" if ignored else "") + ".")



def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
