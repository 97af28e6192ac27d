r"""Fine-tunes a pretrained ELECTRA discriminator on a task and evaluates it.

Examples:
  electra-finetune --init_checkpoint electra-small --task sst2 --tfds_name glue/sst2 \
      --model_dir runs/sst2
  electra-finetune --init_checkpoint runs/x --task text_classification \
      --train_file train.jsonl --eval_file dev.jsonl --model_dir runs/x-sent
  electra-finetune --init_checkpoint runs/x --task sst2 \
      --train_file glue/SST-2/train.tsv --eval_file glue/SST-2/dev.tsv --model_dir runs/x-sst2
  electra-finetune --init_checkpoint runs/x --task tagging --train_file train.conll \
      --eval_file dev.conll --model_dir runs/x-ner
(`python finetune.py ...` from a checkout is the same command.) Defaults follow the
official recipe (AdamW, lr 3e-4 Small / 1e-4 Base / 5e-5 Large, layer-wise decay 0.8 / 0.9
for 24 layers, 10% warmup, batch 32, 3 epochs / 10 for RTE and STS-B / 2 for QA, length 128;
the model after the last epoch is reported). README: "ours vs official".
"""

from electra_tf_cli import common

common.quiet_tensorflow()

import sys  # noqa: E402

from absl import flags  # noqa: E402

from electra_tf.convert.resolve import resolve  # noqa: E402
from electra_tf.finetuning import tasks  # noqa: E402
from electra_tf.finetuning.config import FinetuneConfig  # noqa: E402
from electra_tf.runs.finetune import finetune  # noqa: E402

FLAGS = flags.FLAGS
REQUIRED = ["init_checkpoint", "model_dir"]
_HELP = {
    "task": f"One of: {', '.join(tasks.TASKS)}.",
    "epochs": "Training epochs (task default: 3, 10 for RTE/STS-B).",
    "learning_rate": "Peak learning rate (default by the model's size: 3e-4 Small, 1e-4 "
                     "Base, 5e-5 Large).",
    "layerwise_decay": "Layer-wise learning-rate decay (default 0.8, 0.9 for 24 layers).",
    "official_layerwise_decay_bug": "Reproduce the official code's top-layer lr x decay^2.",
    "num_trials": "Independent runs with seeds seed, seed+1, ...; median and spread reported.",
    "tag_column": "CoNLL column holding the tag (default: the last).",
    "tfds_name": "A prepared TFDS dataset, e.g. glue/sst2 (read from --data_dir, never "
                 "downloaded); replaces --train_file/--eval_file.",
    "data_dir": "TFDS data directory holding the prepared --tfds_name.",
}


def define_flags():
    flags.DEFINE_string("init_checkpoint", None, "The model whose discriminator is fine-tuned: "
                        "a pretraining run directory (or a checkpoint in one), a released "
                        "model's name (electra-presets lists them), hf:ORG/REPO, an https:// "
                        "archive, or a Hugging Face / TF1 / keras-hub model directory.")
    flags.DEFINE_string("train_file", None, "Training data (.jsonl, .csv, .tsv, GLUE .tsv, "
                        "CoNLL for tagging, SQuAD .json for QA).")
    flags.DEFINE_string("eval_file", None, "Evaluation data, same format, scored with the "
                        "task's official metrics; without it the model is trained and kept, "
                        "nothing scored.")
    flags.DEFINE_string("model_dir", None, "Output directory.")
    flags.DEFINE_bool("random_init", False, "Keep the architecture and vocab but start from "
                      "random weights (the no-pretraining baseline).")
    common.define_dataclass_flags(FinetuneConfig, _HELP, lambda f: f"Default: {f.default!r}.")
    common.define_runtime_flags()


def run(argv):
    del argv
    cfg = FinetuneConfig(**common.dataclass_overrides(FinetuneConfig))
    results = finetune(cfg, resolve(FLAGS.init_checkpoint), FLAGS.train_file, FLAGS.eval_file,
                       FLAGS.model_dir, FLAGS.random_init, common.runtime_options())
    print(f"\n{results['task']}: " + ", ".join(
        f"{k} {v['median']:.4f} (median of {len(results['trials'])}, spread "
        f"{v['min']:.4f}-{v['max']:.4f})" for k, v in results["summary"].items()))
    print(f"Results: {FLAGS.model_dir}/eval_results.json, predictions: "
          f"{FLAGS.model_dir}/predictions.jsonl")


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
