r"""Pretrains ELECTRA (replaced token detection) on raw text or prebuilt TFRecord shards.

Examples:
  electra-pretrain --corpus 'my/texts/*.txt' --model_dir runs/x --preset small
  electra-pretrain --data 'shards/*.tfrecord*' --vocab vocab.txt --model_dir runs/x
  electra-pretrain --data ... --objective mlm --train_flops 1e16 --model_dir runs/bert
  electra-pretrain --init_checkpoint electra-small --corpus 'my/domain/*.txt' \
      --model_dir runs/domain --train_steps 20000 --learning_rate 1e-4
(`python pretrain.py ...` from a checkout is the same command.) Re-running the same command
resumes from the last checkpoint. Every ElectraConfig field is a flag (defaults come from
--preset); see --helpfull. With --init_checkpoint (continued, domain-adaptive pretraining)
the model brings its architecture, vocab, casing and weights (both towers when it has a
generator); the recipe flags stay free and the optimizer starts fresh.
"""

from electra_tf_cli import common

common.quiet_tensorflow()

import sys  # noqa: E402

from absl import flags  # noqa: E402

from electra_tf.config import PRESETS, ElectraConfig  # noqa: E402
from electra_tf.pretraining.objectives import OBJECTIVES  # noqa: E402
from electra_tf.runs import pretrain as pretraining  # noqa: E402
from electra_tf.text.vocab import strips_accents  # noqa: E402
from electra_tf.training import callbacks, runtime  # noqa: E402

FLAGS = flags.FLAGS
REQUIRED = ["model_dir"]
_DERIVED = {"pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id", "mask_token_id",
            "preset_name"}
_HELP = {
    "vocab_size": "Vocab size to learn from --corpus (a given --vocab sets its own size).",
    "generator_size": "Generator width as a fraction of the discriminator's.",
    "tie_embeddings": "all: generator and discriminator share the embedding block; token: "
                      "only the word embeddings; none: the generator has its own (official "
                      "untied_generator_embeddings).",
    "objective": f"One of {', '.join(OBJECTIVES)}: electra (replaced token detection); mlm "
                 "(BERT, dynamic masking, no generator); electra_15 (discriminator loss on "
                 "masked positions only); replace_mlm (MLM on generator-replaced positions); "
                 "all_tokens_mlm (MLM on every token with a copy mechanism). Paper section "
                 "3.2 / Table 5.",
    "generator": "transformer (a small MLM trained jointly) or uniform (replacements drawn "
                 "uniformly from the vocab, nothing learned).",
    "disc_weight": "Weight of the discriminator loss (paper: 50).",
    "temperature": "Temperature of the generator's sampling.",
    "adam_bias_correction": "Use Adam bias correction (the official code has none).",
    "checkpoint_every": "Steps between checkpoints (also one progress-bar epoch).",
    "batch_size": "GLOBAL batch of one optimizer step, split over all replicas.",
    "grad_accum_steps": "Split each replica's share of the batch into this many "
                        "micro-batches and sum their gradients (for batches larger than "
                        "memory allows).",
}


def define_flags():
    flags.DEFINE_string("model_dir", None, "Run directory (config, vocab, checkpoints, "
                        "logs).")
    flags.DEFINE_string("corpus", None, "Raw text: comma-separated globs/files/dirs, one "
                        "sentence or line per line, blank line between documents.")
    flags.DEFINE_string("data", None, "Prebuilt TFRecord shards (glob) instead of --corpus.")
    flags.DEFINE_string("vocab", None, "Vocab file; learned from --corpus when not given.")
    flags.DEFINE_enum("preset", "small", list(PRESETS), "Model size and recipe (with "
                      "--init_checkpoint: the recipe, by default the one of the model's "
                      "size).")
    flags.DEFINE_string("init_checkpoint", None, "Start a new run from this model: a run "
                        "directory, a released model's name (electra-presets lists them), "
                        "hf:ORG/REPO, an https:// archive, or a Hugging Face / TF1 / "
                        "keras-hub model directory.")
    flags.DEFINE_integer("num_shards", 4, "Shards to build from --corpus.")
    flags.DEFINE_integer("num_processes", 1, "Processes building shards from --corpus.")
    flags.DEFINE_integer("eval_batches", 20, "Batches for the final evaluation (0: none).")
    flags.DEFINE_float("train_flops", None, "Training FLOPs budget (forward + backward, "
                       "counted like the official flops_computation.py): sets --train_steps "
                       "to the most steps that fit, so objectives and sizes compare at equal "
                       "compute.")
    common.define_dataclass_flags(ElectraConfig, _HELP,
                                  lambda f: f"Override the preset's {f.name}.", skip=_DERIVED)
    common.define_runtime_flags()


def run(argv):
    del argv
    options = common.runtime_options()
    strategy = runtime.create_strategy(options)  # before any other TensorFlow op
    overrides = common.dataclass_overrides(ElectraConfig, skip=_DERIVED)
    if "lower_case" in overrides:
        overrides["strip_accents"] = strips_accents(overrides["lower_case"],
                                                    overrides.get("strip_accents"))
    initial = None
    if FLAGS.init_checkpoint:
        initial = pretraining.open_initial(FLAGS.init_checkpoint)
        config = pretraining.initial_config(
            initial, overrides, FLAGS.preset if FLAGS["preset"].present else None,
            FLAGS.init_checkpoint)
    else:
        config = ElectraConfig.preset(FLAGS.preset, **overrides)
    inputs = pretraining.RunInputs(
        model_dir=FLAGS.model_dir, corpus=FLAGS.corpus, data=FLAGS.data, vocab=FLAGS.vocab,
        vocab_size=FLAGS.vocab_size or ElectraConfig.vocab_size, num_shards=FLAGS.num_shards,
        num_processes=FLAGS.num_processes, init_checkpoint=initial,
        init_name=FLAGS.init_checkpoint)
    config, file_pattern = pretraining.prepare_run(config, inputs, FLAGS.train_flops)
    try:
        results = pretraining.train(config, FLAGS.model_dir, file_pattern, FLAGS.eval_batches,
                            runtime=options, strategy=strategy)
    except callbacks.Preempted as e:
        print(e, file=sys.stderr)
        sys.exit(143)  # 128 + SIGTERM: schedulers see a terminated (restartable) job
    pretraining.print_summary(FLAGS.model_dir, results)


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
