"""A fine-tuning run: load the pretrained discriminator, train a task head, keep the best.

Run directory layout (`--model_dir`):
    finetune_config.json   the recipe and task; encoder_config.json + vocab.txt: the encoder
    labels.json            label names in id order (inferred from the training file)
    task.json              task name, kind and whether inputs are text pairs (for serving)
    trial_<k>/best/        the best checkpoint of trial k by the task's main metric
    trial_<k>/logs/        TensorBoard
    predictions.jsonl      eval predictions of the best trial
    eval_results.json      best metrics of each trial, with the median and spread
"""

import dataclasses
import json
import os
import shutil
import statistics
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from electra_tf import files
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.finetuning import features as features_lib
from electra_tf.finetuning import models, squad, tasks, tfds_data
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.text import vocab as vocab_lib
from electra_tf.text.tokenizer import make_tokenizer
from electra_tf.training.checkpointing import restore_discriminator
from electra_tf.training import runtime as runtime_lib
from electra_tf.training.optimization import create_optimizer, layerwise_lr_multipliers
from electra_tf.training.runtime import RuntimeOptions


@dataclasses.dataclass
class FinetuneConfig:
    """The official ELECTRA fine-tuning recipe; None means "the default for this model"."""

    task: str = "text_classification"
    max_seq_length: Optional[int] = None  # 128; 384 for QA
    batch_size: int = 32
    epochs: Optional[int] = None  # task default: 3 (10 for RTE/STS-B)
    learning_rate: Optional[float] = None  # 1e-4; 3e-4 for small-sized encoders
    layerwise_decay: Optional[float] = None  # 0.8; 0.9 for 24-layer encoders
    official_layerwise_decay_bug: bool = False
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    adam_bias_correction: bool = False
    seed: int = 0
    num_trials: int = 1
    text_field: str = "text"
    pair_field: str = "text_pair"
    label_field: str = "label"
    tag_column: int = -1
    tfds_name: Optional[str] = None  # e.g. "glue/sst2": read a prepared TFDS dataset
    data_dir: Optional[str] = None  # where the TFDS dataset is prepared
    train_split: str = "train"
    eval_split: str = "validation"  # MNLI: validation_matched / validation_mismatched
    doc_stride: int = 128  # QA: step between context windows
    max_query_length: int = 64  # QA: question pieces kept
    max_answer_length: int = 30  # QA: longest answer span decoded, in pieces

    def resolved(self, encoder_config: ElectraConfig, task: tasks.Task) -> "FinetuneConfig":
        small = encoder_config.hidden_size <= 256
        return dataclasses.replace(
            self,
            max_seq_length=self.max_seq_length or (384 if task.kind == "qa" else 128),
            epochs=self.epochs or task.epochs,
            learning_rate=self.learning_rate or (3e-4 if small else 1e-4),
            layerwise_decay=self.layerwise_decay or (
                0.9 if encoder_config.num_layers >= 24 else 0.8))


@dataclasses.dataclass
class Pretrained:
    """A pretrained encoder on disk: its config, vocab and checkpoint."""

    config: ElectraConfig
    vocab_path: str
    special_ids: dict  # {"cls_token_id": ..., ...} read from the vocab
    checkpoint: str


def locate_pretrained(path: str) -> Pretrained:
    """Accepts a pretraining run directory or a checkpoint prefix inside one."""
    run_dir, checkpoint = path, None
    if not os.path.isdir(path):
        checkpoint = path
        run_dir = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    config_path = os.path.join(run_dir, "config.json")
    if not os.path.isfile(config_path):
        raise ConfigError(f"{path!r}: no config.json in {run_dir}; pass a "
                          "pretraining run directory or a checkpoint inside one.")
    checkpoint = checkpoint or tf.train.latest_checkpoint(os.path.join(run_dir, "checkpoints"))
    if not checkpoint or not tf.io.gfile.exists(checkpoint + ".index"):
        raise ConfigError(f"{path!r}: no checkpoint found in {run_dir}.")
    config = ElectraConfig.load(config_path)
    vocab_path = os.path.join(run_dir, "vocab.txt")
    return Pretrained(config, vocab_path, _special_ids(vocab_path, config), checkpoint)


def _special_ids(vocab_path: str, config: ElectraConfig) -> dict:
    """The vocab's special token ids, after checking it belongs to `config`'s encoder."""
    tokens = vocab_lib.load_vocab(vocab_path)
    if len(tokens) != config.vocab_size:
        raise ConfigError(f"{vocab_path} has {len(tokens)} tokens but the encoder config says "
                          f"vocab_size={config.vocab_size}: they belong to different runs.")
    return vocab_lib.special_token_ids(tokens)


def load_encoder(pretrained: Optional[Pretrained], config: ElectraConfig, dropout: float,
                 activation: str = "gelu"):
    """The discriminator encoder, restored from `pretrained` (None: random initialisation);
    `activation` as in `ElectraEncoder`."""
    encoder = ElectraEncoder.from_electra_config(config.replace(dropout=dropout),
                                                 activation=activation)
    ids = np.zeros((1, 8), np.int32)
    encoder({"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": ids})
    if pretrained is not None:
        try:
            restore_discriminator(encoder, pretrained.checkpoint)
        except (AssertionError, ValueError) as e:
            raise ConfigError(f"Checkpoint {pretrained.checkpoint} does not match the encoder "
                              f"of its config.json: {str(e).splitlines()[0][:300]}")
    return encoder


class _TaskData:
    """Encoded train/eval arrays plus what is needed to turn outputs into predictions."""

    def __init__(self, task, encoder_fn, train_examples, eval_examples, labels):
        self.task, self.labels = task, labels
        self.train_examples, self.eval_examples = train_examples, eval_examples
        index = {t: i for i, t in enumerate(labels)}
        # Decided once, from the training file: serving packs the way training did.
        self.text_pairs = task.kind != "tagging" and any(
            e.text_pair is not None for e in train_examples)
        if task.kind == "tagging":
            def encode(examples):
                tag_ids = [[index[t] for t in e.tags] for e in examples]
                inputs, y, starts = encoder_fn.encode_words([e.words for e in examples],
                                                            tag_ids)
                weights = (y != features_lib.IGNORE).astype(np.float32)
                return inputs, np.maximum(y, 0), weights, starts
        else:
            def encode(examples):
                inputs = encoder_fn.encode_pairs([e.text for e in examples],
                                                 [e.text_pair for e in examples],
                                                 with_pairs=self.text_pairs)
                if task.kind == "regression":
                    y = np.asarray([e.label for e in examples], np.float32)
                else:
                    y = np.asarray([index[e.label] for e in examples], np.int32)
                return inputs, y, np.ones(len(examples), np.float32), None
        self.train = encode(train_examples)
        self.eval = encode(eval_examples)

    def describe(self, example):
        gold = example.tags if self.task.kind == "tagging" else example.label
        return {"source": example.source, "label": gold}

    def gold(self):
        if self.task.kind == "tagging":
            return [e.tags for e in self.eval_examples]
        return [e.label for e in self.eval_examples]

    def predictions(self, outputs):
        """Model outputs on the eval set -> (predicted labels, per-example records)."""
        if self.task.kind == "regression":
            scores = [float(s) for s in outputs]
            return scores, [{"prediction": s} for s in scores]
        if self.task.kind == "tagging":
            best = np.argmax(outputs, -1)
            tags = [[self.labels[best[row, s]] if s >= 0 else "O" for s in starts]
                    for row, starts in enumerate(self.eval[3])]
            return tags, [{"prediction": t} for t in tags]
        probabilities = tf.nn.softmax(outputs).numpy()
        predicted = [self.labels[i] for i in probabilities.argmax(-1)]
        return predicted, [{"prediction": p, "probabilities": [round(float(x), 5) for x in row]}
                           for p, row in zip(predicted, probabilities)]


class _QAData:
    """SQuAD features: windowed train/eval arrays; decoding back to answer texts."""

    text_pairs = False  # question + context are packed by squad.create_features

    def __init__(self, task, cfg, tokenizer, special, train_examples, eval_examples):
        self.task, self.cfg = task, cfg
        self.eval_examples = eval_examples
        make = lambda examples: squad.create_features(  # noqa: E731
            examples, tokenizer, special, cfg.max_seq_length, cfg.doc_stride,
            cfg.max_query_length)
        train, self.eval_features = make(train_examples), make(eval_examples)
        targets = {"start_logits": train.start_positions, "end_logits": train.end_positions,
                   "answerable_logit": train.answerable}
        self.train = (train.inputs, targets, None, None)
        self.eval = (self.eval_features.inputs, None, None, None)

    def describe(self, example):
        return {"id": example.qid, "question": example.question, "label": example.answers}

    def gold(self):
        return {e.qid: e.answers for e in self.eval_examples}

    def predictions(self, outputs):
        with_null = self.task.name == "squad_v2"
        answers, null_odds = squad.decode(
            self.eval_examples, self.eval_features, outputs["start_logits"],
            outputs["end_logits"], outputs["answerable_logit"] if with_null else None,
            max_answer_length=self.cfg.max_answer_length,
            null_threshold=0.0 if with_null else None)
        records = [{"id": e.qid, "prediction": answers[e.qid], "null_odds": null_odds[e.qid]}
                   for e in self.eval_examples]
        return answers, records


def _dataset(arrays, batch_size, shuffle, seed):
    inputs, y, weights, _ = arrays
    data = tf.data.Dataset.from_tensor_slices(
        (inputs, y) if weights is None else (inputs, y, weights))
    if shuffle:
        data = data.shuffle(len(y), seed=seed, reshuffle_each_iteration=True)
    return data.batch(batch_size).prefetch(tf.data.AUTOTUNE)


class _EvaluateAndKeepBest(keras.callbacks.Callback):
    """Scores the eval set with the official metric each epoch; checkpoints the best."""

    def __init__(self, data: _TaskData, manager, batch_size):
        super().__init__()
        self.data, self.manager, self.batch_size = data, manager, batch_size
        self.best = None

    def on_epoch_end(self, epoch, logs=None):
        outputs = self.model.predict(self.data.eval[0], batch_size=self.batch_size, verbose=0)
        predicted, records = self.data.predictions(outputs)
        scores = self.data.task.score(self.data.gold(), predicted)
        if logs is not None:
            logs.update({f"eval_{k}": v for k, v in scores.items()})
        main = scores[self.data.task.main_metric]
        print(f"  epoch {epoch + 1}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        if self.best is None or main > self.best["scores"][self.data.task.main_metric]:
            self.manager.save(checkpoint_number=epoch + 1)
            self.best = {"epoch": epoch + 1, "scores": scores, "records": records}


def finetune(cfg: FinetuneConfig, init_checkpoint: str, train_file: str, eval_file: str,
             model_dir: str, random_init: bool = False,
             runtime: Optional[RuntimeOptions] = None, strategy=None) -> dict:
    """Runs `cfg.num_trials` fine-tuning trials; returns and writes eval_results.json.

    `random_init` keeps the pretrained run's architecture and vocab but not its weights:
    the no-pretraining baseline. `strategy` defaults to the one `runtime` names;
    `cfg.batch_size` is the global batch.
    """
    runtime = (runtime or RuntimeOptions()).validated()
    if runtime.strategy == "multi_worker":
        raise ConfigError("Fine-tuning runs on one machine: use --strategy mirrored (all "
                          "local GPUs) or tpu; multi_worker is for pretraining.")
    strategy = strategy or runtime_lib.create_strategy(runtime)
    task = tasks.get_task(cfg.task)
    if not init_checkpoint:
        raise ConfigError("--init_checkpoint is required (a pretraining run directory).")
    pretrained = locate_pretrained(init_checkpoint)
    encoder_config = pretrained.config
    cfg = cfg.resolved(encoder_config, task)
    if cfg.max_seq_length > encoder_config.max_position_embeddings:
        raise ConfigError(f"--max_seq_length={cfg.max_seq_length} exceeds the encoder's "
                          f"{encoder_config.max_position_embeddings} positions.")

    if task.kind == "tagging":
        train_examples = tasks.read_conll(train_file, cfg.tag_column)
        eval_examples = tasks.read_conll(eval_file, cfg.tag_column)
    elif task.kind == "qa":
        train_examples, eval_examples = squad.read_squad(train_file), squad.read_squad(eval_file)
    elif cfg.tfds_name:
        read = lambda split: tfds_data.read_tfds(  # noqa: E731
            task, cfg.tfds_name, split, cfg.data_dir, cfg.text_field, cfg.pair_field,
            cfg.label_field)
        train_examples, eval_examples = read(cfg.train_split), read(cfg.eval_split)
    else:
        read = lambda path: tasks.read_sequence_examples(  # noqa: E731
            task, path, cfg.text_field, cfg.pair_field, cfg.label_field)
        train_examples, eval_examples = read(train_file), read(eval_file)
    labels = [] if task.kind == "qa" else tasks.infer_labels(task, train_examples)
    if task.kind != "qa":
        tasks.check_labels(eval_examples, labels, task.kind)

    os.makedirs(model_dir, exist_ok=True)
    _write_json(os.path.join(model_dir, "finetune_config.json"), dataclasses.asdict(cfg))
    _write_json(os.path.join(model_dir, "labels.json"), labels)
    encoder_config.save(os.path.join(model_dir, "encoder_config.json"))
    shutil.copyfile(pretrained.vocab_path, os.path.join(model_dir, "vocab.txt"))

    special = pretrained.special_ids
    tokenizer = make_tokenizer(pretrained.vocab_path, encoder_config.lower_case,
                               encoder_config.strip_accents)
    if task.kind == "qa":
        data = _QAData(task, cfg, tokenizer, special, train_examples, eval_examples)
    else:
        data = _TaskData(task, features_lib.Encoder(tokenizer, special, cfg.max_seq_length),
                         train_examples, eval_examples, labels)

    _write_json(os.path.join(model_dir, "task.json"),
                {"task": task.name, "kind": task.kind,
                 "text_pairs": data.text_pairs})

    trials = []
    for trial in range(cfg.num_trials):
        print(f"Trial {trial + 1}/{cfg.num_trials} (seed {cfg.seed + trial})")
        with strategy.scope():
            trials.append(_run_trial(cfg, task, data, None if random_init else pretrained,
                                     encoder_config, labels,
                                     os.path.join(model_dir, f"trial_{trial}"),
                                     cfg.seed + trial, runtime))
    best_trial = max(range(len(trials)),
                     key=lambda t: trials[t]["scores"][task.main_metric])
    records = trials[best_trial]["records"]
    with open(os.path.join(model_dir, "predictions.jsonl"), "w", encoding="utf-8") as f:
        for example, record in zip(eval_examples, records):
            f.write(json.dumps({**data.describe(example), **record}, ensure_ascii=False) + "\n")
    if task.kind == "qa":  # the official SQuAD evaluation script's input files
        _write_json(os.path.join(model_dir, "predictions.json"),
                    {r["id"]: r["prediction"] for r in records})
        _write_json(os.path.join(model_dir, "null_odds.json"),
                    {r["id"]: r["null_odds"] for r in records})
    for trial in trials:
        trial.pop("records", None)
    results = {"task": task.name, "main_metric": task.main_metric, "trials": trials,
               "best_trial": best_trial, "summary": _summary(trials)}
    _write_json(os.path.join(model_dir, "eval_results.json"), results)
    return results


def _run_trial(cfg, task, data, pretrained, encoder_config, labels, trial_dir, seed, runtime):
    keras.utils.set_random_seed(seed)
    with runtime_lib.precision(runtime.mixed_precision):
        encoder = load_encoder(pretrained, encoder_config, cfg.dropout,
                               runtime.encoder_activation)
        model = models.build_task_model(task.kind, encoder, len(labels), cfg.dropout,
                                        encoder_config.initializer_range)
        model({k: v[:1] for k, v in data.train[0].items()})  # builds the head
    steps = cfg.epochs * int(np.ceil(len(data.train[0]["input_word_ids"]) / cfg.batch_size))
    multipliers = layerwise_lr_multipliers(encoder, model.trainable_variables,
                                           cfg.layerwise_decay,
                                           cfg.official_layerwise_decay_bug)
    optimizer = create_optimizer(cfg.learning_rate, steps, int(cfg.warmup_proportion * steps),
                                 model.trainable_variables, cfg.weight_decay, 1.0,
                                 cfg.adam_bias_correction, lr_multipliers=multipliers)
    if task.kind == "qa":
        span_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        loss = {"start_logits": span_loss, "end_logits": span_loss,
                # SQuAD 1.1 has no unanswerable question: its answerability head is unused.
                "answerable_logit": keras.losses.BinaryCrossentropy(from_logits=True)}
        loss_weights = {"start_logits": 0.5, "end_logits": 0.5,
                        "answerable_logit": 1.0 if task.name == "squad_v2" else 0.0}
    else:
        loss_weights = None
        loss = (keras.losses.MeanSquaredError() if task.kind == "regression"
                else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.compile(optimizer=runtime_lib.wrap_optimizer(optimizer, runtime.mixed_precision),
                  loss=loss, loss_weights=loss_weights, jit_compile=runtime.jit_compile)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                         os.path.join(trial_dir, "best"), max_to_keep=1)
    keeper = _EvaluateAndKeepBest(data, manager, cfg.batch_size)
    model.fit(_dataset(data.train, cfg.batch_size, True, seed), epochs=cfg.epochs, verbose=2,
              shuffle=False,  # the dataset shuffles itself, seeded
              callbacks=[keeper, keras.callbacks.TensorBoard(os.path.join(trial_dir, "logs"))])
    return {"seed": seed, "best_epoch": keeper.best["epoch"], "scores": keeper.best["scores"],
            "checkpoint": manager.latest_checkpoint, "records": keeper.best["records"]}


@dataclasses.dataclass
class Finetuned:
    """A fine-tuned run on disk, restored: what serving needs to rebuild its inputs."""

    model: keras.Model
    task: tasks.Task
    labels: list
    text_pairs: bool  # the model was trained on `[CLS] a [SEP] b [SEP]` inputs
    cfg: FinetuneConfig
    encoder_config: ElectraConfig
    vocab_path: str
    special_ids: dict
    checkpoint: str


def load_finetuned(model_dir: str, trial: Optional[int] = None) -> Finetuned:
    """Restores the best checkpoint of `trial` (default: the best trial) of a fine-tuning run."""
    def path(name):
        full = os.path.join(model_dir, name)
        if not os.path.exists(full):
            raise ConfigError(f"{model_dir!r} is not a finished fine-tuning run: {name} is "
                              "missing. Pass the --model_dir of finetune.py.")
        return full

    def read_json(name):
        with open(path(name), encoding="utf-8") as f:
            return json.load(f)

    results, task_info = read_json("eval_results.json"), read_json("task.json")
    trial = results["best_trial"] if trial is None else trial
    if not 0 <= trial < len(results["trials"]):
        raise ConfigError(f"{model_dir!r} has trials 0..{len(results['trials']) - 1}; "
                          f"got trial {trial}.")
    checkpoint = tf.train.latest_checkpoint(path(os.path.join(f"trial_{trial}", "best")))
    if checkpoint is None:
        raise ConfigError(f"{model_dir!r}: no checkpoint in trial_{trial}/best.")
    cfg = FinetuneConfig(**read_json("finetune_config.json"))
    task = tasks.get_task(task_info["task"])
    labels = read_json("labels.json")
    encoder_config = ElectraConfig.load(path("encoder_config.json"))
    vocab_path = path("vocab.txt")
    encoder = load_encoder(None, encoder_config, cfg.dropout)
    model = models.build_task_model(task.kind, encoder, len(labels), cfg.dropout,
                                    encoder_config.initializer_range)
    ids = np.zeros((1, 8), np.int32)
    model({"input_word_ids": ids, "input_mask": np.ones_like(ids), "input_type_ids": ids})
    status = tf.train.Checkpoint(model=model).read(checkpoint)
    status.expect_partial().assert_existing_objects_matched()
    return Finetuned(model, task, labels, task_info["text_pairs"], cfg, encoder_config,
                     vocab_path, _special_ids(vocab_path, encoder_config), checkpoint)


def _summary(trials):
    summary = {}
    for metric in trials[0]["scores"]:
        values = [t["scores"][metric] for t in trials]
        summary[metric] = {"median": statistics.median(values), "min": min(values),
                           "max": max(values),
                           "std": statistics.pstdev(values) if len(values) > 1 else 0.0}
    return summary


def _write_json(path, value):
    files.write_json(path, value, ensure_ascii=False)
