"""Converted weights <-> our run directory (`run_dir`'s layout).

A conversion with the generator and the discriminator head writes the same checkpoint as
pretraining (minus optimizer state), so `pretrain.py --model_dir` continues pretraining
from it; a discriminator-only conversion writes the `discriminator` (and, when the source
has it, `discriminator_predictions`) objects alone, built and restored without a
generator. `finetune.py` and `export/` read both.
"""

import os

import tensorflow as tf

from electra_tf import run_dir
from electra_tf.convert import official, official_names
from electra_tf.errors import ConfigError
from electra_tf.layers.discriminator_head import DiscriminatorHead
from electra_tf.layers.initializers import restoring
from electra_tf.pretraining import objectives
from electra_tf.pretraining.pretrainer import ElectraPretrainer


class _Encoder:
    """The discriminator encoder and, optionally, its replaced-token-detection head: the
    parts of a pretrainer a discriminator-only conversion holds."""

    generator = generator_head = None

    def __init__(self, config, with_head: bool):
        self.discriminator = run_dir.build_encoder(config, config.dropout)
        self.discriminator_head = None
        if with_head:
            self.discriminator_head = DiscriminatorHead(
                config.hidden_size, config.initializer_range,
                name="discriminator_predictions", dtype="float32")
            self.discriminator_head.build((None, None, config.hidden_size))

    def weights(self) -> dict:
        """{official name: variable}."""
        return official_names.discriminator_weights(self.discriminator,
                                                    self.discriminator_head)

    def checkpoint(self) -> tf.train.Checkpoint:
        return run_dir.encoder_checkpoint(self.discriminator, self.discriminator_head)


class _Pretrainer:
    """A whole `ElectraPretrainer`: generator and heads too."""

    def __init__(self, config):
        self.model = ElectraPretrainer(config)
        self.model.build_all()
        self.discriminator, self.generator = self.model.discriminator, self.model.generator
        self.discriminator_head = self.model.discriminator_head
        self.generator_head = self.model.generator_head

    def weights(self) -> dict:
        return official_names.pretrainer_weights(self.model)

    def checkpoint(self) -> tf.train.Checkpoint:
        return run_dir.pretraining_checkpoint(self.model)


def build_parts(config, with_generator: bool, with_head: bool):
    """The model parts a conversion holds: a whole pretrainer with the generator, else the
    encoder (and its head) alone. Either has `discriminator`, `discriminator_head`,
    `generator`, `generator_head` (None when absent), `weights()` and `checkpoint()`."""
    return _Pretrainer(config) if with_generator else _Encoder(config, with_head)


def write_run(config, tokens: list, weights: dict, output: str, source: str,
              with_generator: bool, ignored=(), parts=None) -> dict:
    """Builds our model from {official name: array} and writes a run directory.

    Every model weight must come from `weights` and every entry of `weights` must be used
    (except the names in `ignored`), or ConfigError lists the offenders. `parts` (from
    `build_parts`) is used when it holds what `weights` do, instead of building anew.
    """
    with_head = official.has_discriminator_head(weights)
    if with_generator and not with_head:
        raise ConfigError(f"{source} has a generator but no discriminator head, so it cannot "
                          "continue pretraining; convert with --discriminator_only.")
    if run_dir.read_config(output) is not None:
        raise ConfigError(f"--output {output!r} already holds a run; choose a new directory.")
    if parts is None or ((parts.generator is not None, parts.discriminator_head is not None)
                         != (with_generator, with_head)):
        parts = build_parts(config, with_generator, with_head)
    mapped = parts.weights()
    unknown = sorted(set(weights) - set(mapped) - set(ignored))
    if unknown:
        raise ConfigError(f"{source}: {len(unknown)} variable(s) have no place in the model: "
                          + ", ".join(unknown[:20]) + (" ..." if len(unknown) > 20 else ""))
    official_names.assign(mapped, weights, source)

    os.makedirs(output, exist_ok=True)
    manager = tf.train.CheckpointManager(parts.checkpoint(), run_dir.checkpoints_dir(output),
                                         max_to_keep=1)
    path = manager.save(checkpoint_number=0)
    run_dir.write_vocab(output, tokens)
    run_dir.write_config(output, config)
    report = {"source": source, "checkpoint": path, "mapped_variables": len(mapped),
              "generator": with_generator, "discriminator_head": with_head,
              "ignored": sorted(ignored)}
    run_dir.write_json(output, run_dir.CONVERSION_FILE, report)
    return report


def _official_layout(config) -> bool:
    """Whether the official/HF formats describe this run's generator and heads: its
    objective's layout, with a learned generator sharing all embeddings, none, or (as
    "gdes" towers are written: each with its own) disentangled ones."""
    return (objectives.get(config.objective).official_layout
            and config.generator == "transformer"
            and config.tie_embeddings in ("all", "none", "gdes"))


def load_run(path: str):
    """(parts, Pretrained) of a run directory or checkpoint: the model parts the other
    formats can hold (`build_parts`), restored; `parts` tells which via its attributes."""
    pretrained = run_dir.open_pretrained(path)
    saved = pretrained.parts()
    if not _official_layout(pretrained.config):
        # The other formats cannot hold this run's generator or heads: the encoder alone.
        saved = {"generator": False, "discriminator_head": False}
    with restoring():
        parts = build_parts(pretrained.config, saved["generator"], saved["discriminator_head"])
    restore_run(parts, pretrained)
    return parts, pretrained


def restore_run(parts, pretrained) -> None:
    """Restores `pretrained`'s checkpoint into `parts` (from `build_parts`); every weight
    of the parts must be found in it."""
    status = parts.checkpoint().restore(pretrained.checkpoint)
    status.assert_existing_objects_matched().expect_partial()


def read_run(path: str):
    """(config, vocab path, {official name: array}) of a run directory or checkpoint."""
    parts, pretrained = load_run(path)
    return pretrained.config, pretrained.vocab_path, official_names.read(parts.weights())
