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

import sys

from absl import flags

from electra_tf.finetuning.config import FinetuneConfig
from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["init_checkpoint", "model_dir"]
_HELP = {
    # The names written out (the tasks load TensorFlow); a test checks them against
    # `finetuning.tasks.TASKS`.
    "task": "One of: text_classification, text_regression, tagging, pos_tagging, squad, "
            "squad_v2, cola, sst2, mrpc, qqp, stsb, mnli, qnli, rte, wnli.",
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
    "max_seq_length": "Word pieces per input, [CLS]/[SEP] included (default 128; 512 for "
                      "SQuAD, 256 for tagging, as the official code). Longer inputs are cut.",
    "batch_size": "Examples per optimizer step, over all replicas (official: 32). Lower it "
                  "when memory runs out.",
    "warmup_proportion": "Fraction of the steps the learning rate warms up over (official "
                         "0.1), then it decays linearly to 0.",
    "weight_decay": "Decoupled AdamW weight decay (official 0.01; LayerNorm and biases "
                    "are never decayed).",
    "dropout": "Dropout inside the encoder (official 0.1).",
    "head_dropout": "Dropout before the task head (default: the official choice, the "
                    "encoder's dropout for classification/regression, none for tagging/QA).",
    "adam_bias_correction": "Use Adam's bias correction (the official recipe has none; "
                            "turn on to compare with standard AdamW).",
    "batch_loss": "sum: the loss summed over the batch, clipped at global norm 1.0 "
                  "(official); mean: averaged over the batch (our earlier variant).",
    "double_unordered": "MRPC and STS-B also train on every pair in swapped order "
                        "(official); --nodouble_unordered trains on the file's order only.",
    "tag_encoding": "bioes: span tags (IOB1/IOB2 in the files) train as BIOES and come back "
                    "as IOB2 (official); as_given: train on the file's tags as they are.",
    "select_best_epoch": "Report and keep the epoch with the best main metric on the eval "
                         "file (scores every epoch) instead of the last one (official).",
    "seed": "Random seed of the first trial (trial k uses seed + k).",
    "text_field": "CSV/TSV/JSONL column or key holding the text.",
    "pair_field": "Column or key holding the second text of a pair (absent: single texts).",
    "label_field": "Column or key holding the label.",
    "train_split": "--tfds_name split to train on.",
    "eval_split": "--tfds_name split to evaluate on (MNLI: validation_matched or "
                  "validation_mismatched).",
    "doc_stride": "QA: word pieces between the starts of a long context's windows.",
    "max_query_length": "QA: word pieces of the question kept (the rest is cut).",
    "max_answer_length": "QA: the longest answer span decoded, in word pieces.",
    "qa_joint_prediction": "QA: predict the end given the start with a beam (official); "
                           "--noqa_joint_prediction predicts both independently.",
    "qa_beam_size": "QA: starts (and ends per start) kept while decoding.",
    "qa_answerable_weight": "SQuAD 2.0: weight of the answerability classifier's loss.",
    "qa_na_threshold": "SQuAD 2.0: predict no answer when the no-answer logit exceeds this "
                       "(official -2.75; results also report the best threshold).",
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
    flags.DEFINE_string("model_dir", None, "Output directory: the kept model of each trial, "
                        "eval_results.json, predictions.jsonl, logs.")
    flags.DEFINE_bool("random_init", False, "Keep the architecture and vocab but start from "
                      "random weights (the no-pretraining baseline).")
    common.define_dataclass_flags(FinetuneConfig, _HELP, common.undocumented)
    common.define_runtime_flags()


def run(argv):
    del argv
    # TensorFlow's side, imported once the flags are parsed (`common.start`).
    from electra_tf.convert.resolve import resolve
    from electra_tf.runs.finetune import finetune

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
