"""The run directory: one layout for pretraining runs, converted models and fine-tuned models.

Every package reads and writes run directories through this module: the layout's names,
finding a run's latest checkpoint, restoring the encoder alone, a whole pretrainer or a
fine-tuned model, and writing files atomically (`files`).

A pretraining run (`pretrain.py --model_dir`; `convert --from` writes the same layout):
    config.json              the full `ElectraConfig` (architecture, recipe, vocab facts)
    vocab.txt                the WordPiece vocab
    pretrain_data/           shards built from --corpus (with their manifest.json)
    checkpoints/ckpt-<step>  `pretraining_checkpoint`: `discriminator` (restorable alone),
                             `model` (the whole `ElectraPretrainer`), `optimizer`; a
                             converted encoder holds `discriminator` (and, when converted,
                             its replaced-token-detection head `discriminator_predictions`)
    logs/                    TensorBoard
    pretrain_results.json    final metrics and training FLOPs
    conversion.json          for converted models: the source and what was mapped
    init_checkpoint.json     for a run started from a model (--init_checkpoint): which one
    probe.json               with --probe_task: the downstream probe's accuracy by step

A fine-tuning run (`finetune.py --model_dir`):
    finetune_config.json     the recipe and task (`FinetuneConfig`)
    encoder_config.json      the encoder's `ElectraConfig`; vocab.txt beside it
    labels.json              label names in id order
    task.json                task name, kind, text pairs, the task model's head, what
                             serving needs besides (e.g. a regression's label range)
    trial_<k>/model/         trial k's kept checkpoint (the last epoch's, or with
                             --select_best_epoch the best one's); trial_<k>/logs/ TensorBoard
    predictions.jsonl        eval predictions (QA adds predictions.json, null_odds.json)
    eval_results.json        each trial's metrics, with the median and spread
"""

import dataclasses
import json
import os
from typing import Optional

import keras
import tensorflow as tf

from electra_tf import files
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError, first_line
from electra_tf.layers.activations import GELU
from electra_tf.layers.embeddings import ElectraEmbeddings
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.layers.initializers import restoring
from electra_tf.text import vocab as vocab_lib

CONFIG_FILE = "config.json"
VOCAB_FILE = "vocab.txt"
DATA_DIR = "pretrain_data"
CHECKPOINT_DIR = "checkpoints"
LOGS_DIR = "logs"
RESULTS_FILE = "pretrain_results.json"
CONVERSION_FILE = "conversion.json"
INIT_FILE = "init_checkpoint.json"
PROBE_FILE = "probe.json"
# The converted replaced-token-detection head of an encoder-only checkpoint.
DISCRIMINATOR_HEAD_KEY = "discriminator_predictions"

FINETUNE_CONFIG_FILE = "finetune_config.json"
ENCODER_CONFIG_FILE = "encoder_config.json"
LABELS_FILE = "labels.json"
TASK_FILE = "task.json"
EVAL_RESULTS_FILE = "eval_results.json"
PREDICTIONS_FILE = "predictions.jsonl"
KEPT_MODEL_DIR = "model"  # inside trial_<k>/


# ----------------------------------------------------------------------------- files
def write_json(directory: str, name: str, value) -> str:
    """Writes `directory/name` atomically as indented JSON (non-ASCII kept); its path."""
    path = os.path.join(directory, name)
    files.write_json(path, value, ensure_ascii=False)
    return path


def read_json(directory: str, name: str):
    """`directory/name` as JSON, or None when there is no such file."""
    path = os.path.join(directory, name)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def read_config(directory: str) -> Optional[ElectraConfig]:
    """The run's saved config, or None for a directory without one."""
    path = os.path.join(directory, CONFIG_FILE)
    return ElectraConfig.load(path) if os.path.isfile(path) else None


def write_config(directory: str, config: ElectraConfig) -> None:
    config.save(os.path.join(directory, CONFIG_FILE))


def write_vocab(directory: str, tokens: list) -> str:
    path = os.path.join(directory, VOCAB_FILE)
    vocab_lib.write_vocab(tokens, path)
    return path


# ----------------------------------------------------------------------------- checkpoints
def checkpoints_dir(directory: str) -> str:
    return os.path.join(directory, CHECKPOINT_DIR)


def latest_checkpoint(directory: str) -> Optional[str]:
    """The newest checkpoint prefix of a pretraining run, or None."""
    return tf.train.latest_checkpoint(checkpoints_dir(directory))


def pretraining_checkpoint(model, optimizer=None) -> tf.train.Checkpoint:
    """A pretraining run's checkpoint: `discriminator` at the top level, so
    `tf.train.Checkpoint(discriminator=encoder).restore(path)` restores it alone."""
    objects = {"discriminator": model.discriminator, "model": model}
    if optimizer is not None:
        objects["optimizer"] = optimizer
    return tf.train.Checkpoint(**objects)


def encoder_checkpoint(encoder, head=None) -> tf.train.Checkpoint:
    """The checkpoint of a converted encoder (and its replaced-token-detection head)."""
    objects = {"discriminator": encoder}
    if head is not None:
        objects[DISCRIMINATOR_HEAD_KEY] = head
    return tf.train.Checkpoint(**objects)


def saved_objects(checkpoint_path: str) -> dict:
    """{top-level object name: names of its children} saved in an object-based checkpoint.

    Read from the checkpoint's object graph, not from variable names: a variable is saved
    under one path only (often the optimizer's), so names do not show which objects exist.
    """
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(tf.train.load_checkpoint(checkpoint_path).get_tensor(
        "_CHECKPOINTABLE_OBJECT_GRAPH"))
    return {child.local_name: {grandchild.local_name
                               for grandchild in graph.nodes[child.node_id].children}
            for child in graph.nodes[0].children}


def restore_discriminator(encoder, checkpoint_path: str,
                          config: Optional[ElectraConfig] = None) -> None:
    """Loads only the discriminator encoder's weights from a run's checkpoint.

    The encoder must be built; every one of its weights must be found in the checkpoint.
    A run pretrained with `tie_embeddings="gdes"` (its `config`) saved the word matrix in
    two parts; the encoder gets their sum, the matrix the discriminator used.
    """
    if config is None or config.tie_embeddings != "gdes":
        status = tf.train.Checkpoint(discriminator=encoder).restore(checkpoint_path)
        status.expect_partial().assert_existing_objects_matched()
        return
    saved = ElectraEncoder.from_electra_config(
        config, embeddings=ElectraEmbeddings.from_electra_config(config,
                                                                 gradient_disentangled=True))
    saved.build()
    restore_discriminator(saved, checkpoint_path)
    delta = saved.embeddings.token_delta
    encoder.set_weights([w.numpy() for w in saved.weights if w is not delta])
    encoder.embeddings.token_embedding.embeddings.assign(saved.embeddings.word_table())


# ----------------------------------------------------------------------------- pretrained
@dataclasses.dataclass
class Pretrained:
    """A pretraining run or converted model on disk: its config, vocab and checkpoint."""

    directory: str
    config: ElectraConfig
    vocab_path: str
    special_ids: dict  # {"cls_token_id": ..., ...} read from the vocab
    checkpoint: str

    def parts(self) -> dict:
        """Which weights the checkpoint holds besides the encoder: {"generator": bool
        (the whole pretrainer), "discriminator_head": bool, "optimizer": bool}."""
        saved = saved_objects(self.checkpoint)
        whole = "model" in saved
        return {"generator": whole and "generator" in saved["model"],
                "discriminator_head": DISCRIMINATOR_HEAD_KEY in saved or (
                    whole and "discriminator_head" in saved["model"]),
                "optimizer": "optimizer" in saved}


def open_pretrained(path: str) -> Pretrained:
    """A pretraining (or converted) run directory, or a checkpoint prefix inside one."""
    directory, checkpoint = path, None
    if not os.path.isdir(path):
        if not tf.io.gfile.exists(path + ".index"):
            raise ConfigError(f"{path!r} does not exist: pass a pretraining (or converted) "
                              "run directory, or a checkpoint prefix inside one.")
        checkpoint = path
        directory = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    config = read_config(directory)
    if config is None:
        raise ConfigError(f"{path!r}: no {CONFIG_FILE} in {directory}; pass a pretraining "
                          "run directory or a checkpoint inside one.")
    checkpoint = checkpoint or latest_checkpoint(directory)
    if not checkpoint or not tf.io.gfile.exists(checkpoint + ".index"):
        raise ConfigError(f"{path!r}: no checkpoint found in {directory}.")
    vocab_path = os.path.join(directory, VOCAB_FILE)
    return Pretrained(directory, config, vocab_path, special_ids(vocab_path, config),
                      checkpoint)


def special_ids(vocab_path: str, config: ElectraConfig) -> dict:
    """The vocab's special token ids, after checking it belongs to `config`'s encoder."""
    tokens = vocab_lib.load_vocab(vocab_path)
    if len(tokens) != config.vocab_size:
        raise ConfigError(f"{vocab_path} has {len(tokens)} tokens but the encoder config says "
                          f"vocab_size={config.vocab_size}: they belong to different runs.")
    return vocab_lib.special_token_ids(tokens)


def build_encoder(config: ElectraConfig, dropout: float, activation: str = GELU):
    """A built discriminator encoder of `config` with `dropout` (random weights);
    `activation` as in `ElectraEncoder`."""
    encoder = ElectraEncoder.from_electra_config(config.replace(dropout=dropout),
                                                 activation=activation)
    encoder.build()  # its weights without a forward pass (0.4-0.5 s for ELECTRA-Small)
    return encoder


def load_encoder(pretrained: Optional[Pretrained], config: ElectraConfig, dropout: float,
                 activation: str = GELU):
    """The discriminator encoder, restored from `pretrained` (None: random initialisation)."""
    if pretrained is None:
        return build_encoder(config, dropout, activation)
    with restoring():
        encoder = build_encoder(config, dropout, activation)
        try:
            restore_discriminator(encoder, pretrained.checkpoint, pretrained.config)
        except (AssertionError, ValueError) as e:
            raise ConfigError(f"Checkpoint {pretrained.checkpoint} does not match the encoder "
                              f"of its {CONFIG_FILE}: {first_line(e, 300)}")
    return encoder


def layers_only(model) -> tf.train.Checkpoint:
    """A stand-in for `model` in a checkpoint to restore from: its layers under their
    attribute names, without its optimizer. (A restore keeps saved objects it cannot
    match pending, and an optimizer that a later `compile` attaches would receive the
    saved optimizer's state, shapes unrelated.)"""
    return tf.train.Checkpoint(**{name: value for name, value in vars(model).items()
                                  if not name.startswith("_")
                                  and isinstance(value, keras.layers.Layer)})


def restore_pretrainer(model, pretrained: Pretrained, parts: dict) -> None:
    """Restores the `parts` (see `Pretrained.parts`) of a built `ElectraPretrainer` from
    `pretrained`'s checkpoint; every weight of those parts must be found. A compiled model's
    optimizer is left out: a new run starts it fresh."""
    if parts["generator"]:
        checkpoint = tf.train.Checkpoint(discriminator=model.discriminator,
                                         model=layers_only(model))
    else:
        checkpoint = encoder_checkpoint(
            model.discriminator, model.discriminator_head if parts["discriminator_head"]
            else None)
    status = checkpoint.restore(pretrained.checkpoint)
    status.assert_existing_objects_matched().expect_partial()


# ----------------------------------------------------------------------------- fine-tuned
def write_finetuning_setup(directory: str, settings: dict, pretrained: Pretrained,
                           labels: list, task_info: dict) -> None:
    """Writes what a fine-tuning run needs to be restored, before training starts.

    `task_info` holds "task", "kind", "text_pairs", "model" ({"class_name",
    "head_config"} of the task model, an `electra_tf.models` class) and what the task's kind
    adds for serving.
    """
    os.makedirs(directory, exist_ok=True)
    write_json(directory, FINETUNE_CONFIG_FILE, settings)
    write_json(directory, LABELS_FILE, labels)
    pretrained.config.save(os.path.join(directory, ENCODER_CONFIG_FILE))
    with open(pretrained.vocab_path, encoding="utf-8") as f:
        files.write_text(os.path.join(directory, VOCAB_FILE), f.read())
    write_json(directory, TASK_FILE, task_info)


def trial_dir(directory: str, trial: int) -> str:
    return os.path.join(directory, f"trial_{trial}")


def kept_model_dir(directory: str, trial: int) -> str:
    """Where trial `trial` of a fine-tuning run keeps its model's checkpoint."""
    return os.path.join(trial_dir(directory, trial), KEPT_MODEL_DIR)


def is_finetuned(path: str) -> bool:
    """Whether `path` is a fine-tuning run directory (`finetune.py --model_dir`)."""
    return all(os.path.isfile(os.path.join(path, name))
               for name in (TASK_FILE, ENCODER_CONFIG_FILE, FINETUNE_CONFIG_FILE))


def finished_finetuned_file(directory: str, name: str) -> str:
    """The path of `name` in a fine-tuning run; ConfigError when the run lacks it."""
    full = os.path.join(directory, name)
    if not os.path.exists(full):
        raise ConfigError(f"{directory!r} is not a finished fine-tuning run: {name} is "
                          "missing. Pass the --model_dir of finetune.py.")
    return full


def read_finetuned_json(directory: str, name: str):
    with open(finished_finetuned_file(directory, name), encoding="utf-8") as f:
        return json.load(f)


def read_finetuned_config(directory: str) -> ElectraConfig:
    """The encoder config of a fine-tuning run."""
    return ElectraConfig.load(finished_finetuned_file(directory, ENCODER_CONFIG_FILE))


def kept_checkpoint(directory: str, trial: Optional[int] = None) -> tuple:
    """(trial, checkpoint prefix) of a fine-tuning run's kept model: `trial`'s, by default
    the trial with the best main metric."""
    results = read_finetuned_json(directory, EVAL_RESULTS_FILE)
    trial = results["best_trial"] if trial is None else trial
    if not 0 <= trial < len(results["trials"]):
        raise ConfigError(f"{directory!r} has trials 0..{len(results['trials']) - 1}; "
                          f"got trial {trial}.")
    checkpoint = tf.train.latest_checkpoint(kept_model_dir(directory, trial))
    if checkpoint is None:
        raise ConfigError(f"{directory!r}: no checkpoint in trial_{trial}/"
                          f"{KEPT_MODEL_DIR}.")
    return trial, checkpoint
