"""Conversions as functions: into a run directory (`from_*`) and out of one (`to_*`).

`electra-convert` is a thin flag layer over these.
"""

import glob
import json
import os
from typing import Optional

import tensorflow as tf

from electra_tf import files, run_dir
from electra_tf.errors import ConfigError
from electra_tf.convert import huggingface, keras_hub_backbone, official, official_names
from electra_tf.convert import weights as run_weights
from electra_tf.text import vocab as vocab_lib


def _vocab_tokens(vocab: Optional[str], default_dir: str) -> list:
    path = vocab or os.path.join(default_dir, "vocab.txt")
    if not os.path.isfile(path):
        raise ConfigError(f"No vocab at {path!r}; pass the model's vocab with --vocab.")
    return vocab_lib.load_vocab(path)


def detect_format(path: str) -> Optional[str]:
    """The layout of a local model: "run" (ours: a run directory or a checkpoint inside
    one), "huggingface", "keras_hub" (a preset directory or `.keras` file), "official" (a
    TF1 checkpoint prefix, or a directory holding one), or None."""
    if os.path.isfile(path + ".index"):
        parent = os.path.dirname(os.path.dirname(os.path.abspath(path)))
        return "run" if detect_format(parent) == "run" else "official"
    if path.endswith(".keras") and os.path.isfile(path):
        return "keras_hub"
    if not os.path.isdir(path):
        return None
    config_path = os.path.join(path, "config.json")
    if os.path.isfile(config_path):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        if "model_type" in config:
            return "huggingface"
        if os.path.isfile(os.path.join(path, "metadata.json")) and "class_name" in config:
            return "keras_hub"
        return "run"
    return "official" if official_checkpoint(path) else None


def official_checkpoint(directory: str) -> Optional[str]:
    """The TF1 checkpoint prefix in `directory` (its `checkpoint` file's, else the only
    one), or None."""
    prefix = tf.train.latest_checkpoint(directory)
    if prefix:
        return prefix
    indexes = glob.glob(os.path.join(glob.escape(directory), "*.index"))
    return indexes[0][:-len(".index")] if len(indexes) == 1 else None


def from_official(checkpoint: str, output: str, vocab: Optional[str] = None,
                  lower_case: Optional[bool] = None, num_heads: Optional[int] = None,
                  discriminator_only: bool = False) -> dict:
    """An official TF1 checkpoint (prefix) -> run directory; returns the conversion report."""
    weights = official.read_checkpoint(checkpoint)
    tokens = _vocab_tokens(vocab, os.path.dirname(checkpoint))
    config = official.infer_config(weights, tokens, checkpoint, lower_case, num_heads,
                                   discriminator_only)
    generator_names = [name for name in weights if official_names.is_generator_name(name)]
    with_generator = bool(generator_names) and not discriminator_only
    ignored = [] if with_generator else generator_names
    return run_weights.write_run(config, tokens, weights, output, checkpoint,
                                 with_generator, ignored)


def from_huggingface(checkpoint: str, output: str, generator: Optional[str] = None,
                     vocab: Optional[str] = None, lower_case: Optional[bool] = None,
                     discriminator_only: bool = False) -> dict:
    """HF ElectraForPreTraining/ElectraModel (+ ElectraForMaskedLM) dirs -> run directory."""
    generator = None if discriminator_only else generator
    config, state, tokens = huggingface.read_model(checkpoint, generator, lower_case, vocab)
    # The model a source with a head (ElectraForPreTraining) needs: reused to write it.
    parts = run_weights.build_parts(config, generator is not None, with_head=True)
    weights = huggingface.to_official(state, parts.weights(), checkpoint)
    return run_weights.write_run(config, tokens, weights, output, checkpoint,
                                 generator is not None, parts=parts)


def from_keras_hub(checkpoint: str, output: str, vocab: Optional[str] = None,
                   lower_case: Optional[bool] = None) -> dict:
    """A keras-hub ElectraBackbone (preset dir or .keras) -> run directory (no pooler)."""
    backbone = keras_hub_backbone.load_backbone(checkpoint)
    vocab = vocab or keras_hub_backbone.preset_vocab(checkpoint)
    if not vocab:
        raise ConfigError(f"{checkpoint} has no saved tokenizer; pass --vocab.")
    tokens = vocab_lib.load_vocab(vocab)
    config = keras_hub_backbone.backbone_config(backbone, tokens, lower_case, checkpoint)
    weights = official_names.read(keras_hub_backbone.backbone_weights(backbone))
    return run_weights.write_run(config, tokens, weights, output, checkpoint, False)


def to_huggingface(run: str, output: str) -> list:
    """Run directory -> HF directories (`output/`, and `output/generator/`); returns them."""
    files.check_new_directory(output)  # before the model is loaded
    config, vocab_path, weights = run_weights.read_run(run)
    return huggingface.write_model(weights, config, vocab_path, output)


def to_keras_hub(run: str, output: str) -> str:
    """Run directory -> keras-hub preset directory (`ElectraBackbone` + `ElectraTokenizer`,
    what `from_preset` loads): the discriminator encoder. keras-hub's backbone has a pooler
    ELECTRA lacks (`pooled_dense`: its `pooled_output` is not our [CLS] vector; it keeps its
    fresh initialisation) and uses the tanh GELU, so its `sequence_output` matches ours to
    about 1e-3."""
    import keras_hub

    config, vocab_path, weights = run_weights.read_run(run)
    backbone = keras_hub_backbone.new_backbone(config)
    official_names.assign(keras_hub_backbone.backbone_weights(backbone), weights, run)
    tokenizer = keras_hub.models.ElectraTokenizer(
        vocabulary=vocab_lib.load_vocab(vocab_path), lowercase=config.lower_case)
    with files.atomic_directory(output) as partial:
        backbone.save_to_preset(partial)
        tokenizer.save_to_preset(partial)
    return output


def to_official(run: str, output: str) -> str:
    """Run directory -> TF1 name-based checkpoint at prefix `output` (+ vocab.txt beside)."""
    if run_dir.open_pretrained(run).config.tie_embeddings == "gdes":  # before loading it
        raise ConfigError(f"{run} was pretrained with --tie_embeddings gdes: the official "
                          "TF1 layout cannot hold its generator's own embeddings (official "
                          "untied embeddings are as wide as the generator's layers). "
                          "Convert --to huggingface (both towers) or --to keras_hub.")
    _, vocab_path, weights = run_weights.read_run(run)
    written = official.write_checkpoint(weights, output)
    with open(vocab_path, encoding="utf-8") as f:
        files.write_text(os.path.join(os.path.dirname(os.path.abspath(output)), "vocab.txt"),
                         f.read())
    return written
