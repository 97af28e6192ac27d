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

import sys

from absl import flags

from electra_tf.config import PRESETS, ElectraConfig
from electra_tf.text.vocab import strips_accents
from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["model_dir"]
_DERIVED = {"pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id", "mask_token_id",
            "preset_name"}
_HELP = {
    "vocab_size": "Vocab size to learn from --corpus (a given --vocab sets its own size).",
    "generator_size": "Generator width as a fraction of the discriminator's.",
    "tie_embeddings": "all: generator and discriminator share the embedding block; token: "
                      "only the word embeddings; gdes: the word embeddings, "
                      "gradient-disentangled (DeBERTa-v3: the discriminator trains only a "
                      "delta added to the generator's matrix); none: the generator has its "
                      "own (official untied_generator_embeddings).",
    # Each objective's name written out (the objectives load TensorFlow); a test checks
    # that every one of `pretraining.objectives.OBJECTIVES` is here.
    "objective": "One of: electra (replaced token detection); mlm "
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
    "train_steps": "Optimizer steps of the run (may be raised on resume to train longer).",
    "warmup_steps": "Steps over which the learning rate ramps up from 0 (official 10,000); "
                    "keep it well below --train_steps.",
    "learning_rate": "Peak learning rate (official: 5e-4 Small, 2e-4 Base/Large); may be "
                     "lowered on resume, e.g. after a loss turned NaN.",
    "lr_decay_power": "Power of the decay to 0 after warmup (1: linear, official).",
    "weight_decay": "Decoupled AdamW weight decay (LayerNorm and biases excluded).",
    "clip_norm": "Clip the gradients summed over replicas at this global norm (0: none).",
    "mask_prob": "Fraction of tokens masked for the generator (official 0.15; the paper "
                 "found 0.25 better for Large).",
    "mlm_weight": "Weight of the generator's MLM loss (paper: 1).",
    "max_seq_length": "Tokens per pretraining example (official 128 Small, 512 Base/Large); "
                      "shards must be built with the same length.",
    "keep_checkpoints": "How many of the latest checkpoints to keep.",
    "seed": "Random seed of the initial weights, masking and data order.",
    "dropout": "Dropout inside both towers (official 0.1).",
    "initializer_range": "Std of the truncated-normal weight initialisation.",
    "layer_norm_epsilon": "LayerNorm epsilon (official 1e-12).",
    "embedding_size": "Width of the token embeddings (projected to --hidden_size when "
                      "different, as ELECTRA-Small).",
    "hidden_size": "Width of the discriminator's transformer layers.",
    "num_layers": "Transformer layers of each tower.",
    "num_heads": "Attention heads of the discriminator (the generator's scale with "
                 "--generator_size).",
    "intermediate_size": "Width of the discriminator's feed-forward layers.",
    "max_position_embeddings": "Positions the model can take (official 512); at least "
                               "--max_seq_length.",
    "type_vocab_size": "Segment ids (2: sentence A and B).",
    "lower_case": "Lower-case the text (uncased models); --nolower_case for cased ones "
                  "and for Korean.",
    "strip_accents": "Strip accents (default: follows --lower_case; keep it off for Korean, "
                     "whose syllables it decomposes).",
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
    flags.DEFINE_string("probe_task", None, "A small labelled task (JSONL: text, label, "
                        "optional text_pair) to probe the discriminator on while it trains: "
                        "a linear classifier on its frozen features, scored beside a random "
                        "encoder's. Shows whether pretraining is making it useful.")
    flags.DEFINE_string("probe_eval_file", None, "The probe's dev examples (same format; "
                        "default: a quarter of --probe_task held out).")
    flags.DEFINE_integer("probe_every", None, "Steps between probes (default: whole "
                         "checkpoint intervals costing about 4% of the training compute).")
    flags.DEFINE_integer("probe_examples", 256, "At most this many examples to fit the "
                         "probe on, and as many to score it on; more is steadier and slower.")
    flags.DEFINE_integer("probe_max_seq_length", 64, "Tokens per probe example (texts are "
                         "packed no longer than the longest needs).")
    common.define_dataclass_flags(ElectraConfig, _HELP,
                                  common.undocumented, skip=_DERIVED)
    common.define_runtime_flags()


def run(argv):
    del argv
    # TensorFlow's side, imported once the flags are parsed (`common.start`).
    from electra_tf.callbacks import ProbeOptions
    from electra_tf.runs import pretrain as pretraining
    from electra_tf.training import callbacks, runtime

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
    probe = FLAGS.probe_task and ProbeOptions(
        FLAGS.probe_task, FLAGS.probe_eval_file, FLAGS.probe_every, FLAGS.probe_examples,
        FLAGS.probe_max_seq_length)
    try:
        results = pretraining.train(config, FLAGS.model_dir, file_pattern, FLAGS.eval_batches,
                                    runtime=options, strategy=strategy, probe=probe)
    except callbacks.Preempted as e:
        print(e, file=sys.stderr)
        sys.exit(143)  # 128 + SIGTERM: schedulers see a terminated (restartable) job
    pretraining.print_summary(FLAGS.model_dir, results)


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
