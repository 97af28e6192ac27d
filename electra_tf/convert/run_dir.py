"""Converted weights <-> our run directory (config.json, vocab.txt, checkpoints/).

A conversion with the generator and the discriminator head writes the same checkpoint as
pretraining (minus optimizer state), so `pretrain.py --model_dir` continues pretraining
from it; a discriminator-only conversion writes the `discriminator` (and, when the source
has it, `discriminator_predictions`) objects alone. `finetune.py` and `export/` read both.
"""

import os

import tensorflow as tf

from electra_tf import files
from electra_tf.errors import ConfigError
from electra_tf.convert import official, official_names
from electra_tf.pretraining import objectives
from electra_tf.pretraining import run as pretraining_run
from electra_tf.training.checkpointing import make_checkpoint, saved_objects

REPORT_FILE = "conversion.json"
DISCRIMINATOR_HEAD_KEY = "discriminator_predictions"


def build_pretrainer(config):
    from electra_tf.pretraining.pretrainer import ElectraPretrainer

    model = ElectraPretrainer(config)
    model.build_all()
    return model


def _official_layout(config) -> bool:
    """Whether the official/HF formats describe this run's generator and heads: an RTD
    objective with a learned generator sharing all embeddings or none."""
    return (objectives.get(config.objective).official_layout and config.generator == "transformer"
            and config.tie_embeddings in ("all", "none"))


def _checkpoint(model, with_generator: bool, with_head: bool) -> tf.train.Checkpoint:
    """The pretraining checkpoint layout when the model is whole, else only the parts held."""
    if with_generator:
        return make_checkpoint(model)
    objects = {"discriminator": model.discriminator}
    if with_head:
        objects[DISCRIMINATOR_HEAD_KEY] = model.discriminator_head
    return tf.train.Checkpoint(**objects)


def write_run(config, tokens: list, weights: dict, output: str, source: str,
              with_generator: bool, ignored=()) -> dict:
    """Builds our model from {official name: array} and writes a run directory.

    Every model weight must come from `weights` and every entry of `weights` must be used
    (except the names in `ignored`), or ConfigError lists the offenders.
    """
    with_head = official.has_discriminator_head(weights)
    if with_generator and not with_head:
        raise ConfigError(f"{source} has a generator but no discriminator head, so it cannot "
                          "continue pretraining; convert with --discriminator_only.")
    model = build_pretrainer(config)
    mapped = official_names.pretrainer_weights(model, with_generator, with_head)
    unknown = sorted(set(weights) - set(mapped) - set(ignored))
    if unknown:
        raise ConfigError(f"{source}: {len(unknown)} variable(s) have no place in the model: "
                          + ", ".join(unknown[:20]) + (" ..." if len(unknown) > 20 else ""))
    official_names.assign(mapped, weights, source)

    os.makedirs(output, exist_ok=True)
    config_path = os.path.join(output, pretraining_run.CONFIG_FILE)
    if os.path.exists(config_path):
        raise ConfigError(f"--output {output!r} already holds a run; choose a new directory.")
    manager = tf.train.CheckpointManager(
        _checkpoint(model, with_generator, with_head), os.path.join(output, pretraining_run.CHECKPOINT_DIR), max_to_keep=1)
    path = manager.save(checkpoint_number=0)
    files.write_text(os.path.join(output, pretraining_run.VOCAB_FILE),
                     "\n".join(tokens) + "\n")
    config.save(config_path)
    report = {"source": source, "checkpoint": path, "mapped_variables": len(mapped),
              "generator": with_generator, "discriminator_head": with_head,
              "ignored": sorted(ignored)}
    files.write_json(os.path.join(output, REPORT_FILE), report)
    return report


def load_run(path: str):
    """(ElectraPretrainer, Pretrained, parts) of a run directory or checkpoint.

    `parts` is {"generator": bool, "discriminator_head": bool}: which weights the checkpoint
    really holds (the others keep their random initial values and must not be used).
    """
    from electra_tf.finetuning.run import locate_pretrained

    pretrained = locate_pretrained(path)
    model = build_pretrainer(pretrained.config)
    saved = saved_objects(pretrained.checkpoint)
    with_generator = "generator" in saved.get("model", ())
    parts = {"generator": with_generator,
             "discriminator_head": with_generator or DISCRIMINATOR_HEAD_KEY in saved}
    if not _official_layout(pretrained.config):
        # The other formats cannot hold this run's generator or heads: the encoder alone.
        parts = {"generator": False, "discriminator_head": False}
    status = _checkpoint(model, with_generator, parts["discriminator_head"]).restore(
        pretrained.checkpoint)
    status.assert_existing_objects_matched().expect_partial()
    return model, pretrained, parts


def read_run(path: str):
    """(config, vocab path, {official name: array}) of a run directory or checkpoint."""
    model, pretrained, parts = load_run(path)
    weights = official_names.read(official_names.pretrainer_weights(
        model, parts["generator"], parts["discriminator_head"]))
    return pretrained.config, pretrained.vocab_path, weights
