"""Keras callbacks for your own `ElectraPretrainer.fit`: `DownstreamProbe`, which shows
whether pretraining is making the encoder useful for a task of yours.

(The callbacks a pretraining run uses itself, for checkpoints, preemption and progress,
are in `training.callbacks`.)
"""

import dataclasses
import hashlib
import math
import os
import random
import sys
import time
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from electra_tf import files, traced
from electra_tf.errors import TaskDataError
from electra_tf.finetuning.readers import jsonl_rows
from electra_tf.layers.encoder import ElectraEncoder, input_specs
from electra_tf.pretraining import flops
from electra_tf.text.packing import pack_segments
from electra_tf.text.tokenizer import tokenize_ragged

# The share of training time the probe may take by default (`default_probe_every`).
PROBE_BUDGET = 0.04

# The ridge penalty of the probe's classifier, on standardised features: strong enough
# that a few hundred examples of 2 x hidden features do not overfit.
RIDGE_PENALTY = 100.0


@dataclasses.dataclass
class ProbeTask:
    """A small labelled text task, tokenized and packed: what the probe learns and scores.
    `ProbeTask.read` makes one from JSONL files."""

    name: str
    train_inputs: dict  # the encoder's inputs, int32 [examples, length]
    train_labels: np.ndarray  # int [examples]
    eval_inputs: dict
    eval_labels: np.ndarray
    label_names: list
    fingerprint: str = ""  # what the task's data and settings were (resuming checks it)

    @classmethod
    def read(cls, path: str, tokenizer, eval_path: Optional[str] = None,
             eval_fraction: float = 0.25, examples: int = 512, max_seq_length: int = 64,
             seed: int = 0) -> "ProbeTask":
        """JSONL `text`, `label` (and optional `text_pair`) rows of `path`; scored on
        `eval_path`'s rows, else on `eval_fraction` of `path` held out. At most `examples`
        rows each for training and scoring, picked with `seed`; packed no longer than the
        longest example needs (at most `max_seq_length` pieces)."""
        rng = random.Random(seed)
        rows = _probe_rows(path)
        rng.shuffle(rows)
        if eval_path:
            eval_rows = _probe_rows(eval_path)
            rng.shuffle(eval_rows)
        else:
            held_out = max(1, int(len(rows) * eval_fraction))
            rows, eval_rows = rows[held_out:], rows[:held_out]
        rows, eval_rows = rows[:examples], eval_rows[:examples]
        label_names = sorted({label for _, _, label in rows})
        if len(label_names) < 2:
            raise TaskDataError(f"{path}: the probe task needs at least two labels among the "
                                f"examples it uses; found {label_names}.")
        unknown = sorted({label for _, _, label in eval_rows} - set(label_names))
        if unknown:
            raise TaskDataError(f"{eval_path or path}: labels {unknown[:5]} do not occur in "
                                "the probe's training examples.")
        pairs = any(pair is not None for _, pair, _ in rows + eval_rows)
        pieces = {}
        for split, split_rows in (("train", rows), ("eval", eval_rows)):
            segments = [tokenize_ragged(tokenizer, [text for text, _, _ in split_rows])]
            if pairs:
                segments.append(tokenize_ragged(tokenizer, [pair or "" for _, pair, _ in
                                                            split_rows]))
            pieces[split] = segments
        longest = max(int(np.max(sum(s.row_lengths().numpy() for s in segments)))
                      for segments in pieces.values())
        # Padded to a multiple of 16 that holds the longest example: short texts waste
        # little on padding.
        length = min(max_seq_length, 16 * math.ceil((longest + len(pieces["train"]) + 1) / 16))
        packed = {split: {k: v.numpy() for k, v in pack_segments(
            segments, length, tokenizer.special_ids).items()}
            for split, segments in pieces.items()}
        index = {name: i for i, name in enumerate(label_names)}
        fingerprint = hashlib.sha256(repr(
            (rows, eval_rows, length, tokenizer.vocabulary_size())).encode()).hexdigest()[:16]
        return cls(path, packed["train"], np.array([index[r[2]] for r in rows]),
                   packed["eval"], np.array([index[r[2]] for r in eval_rows]), label_names,
                   fingerprint)


@dataclasses.dataclass
class ProbeOptions:
    """A pretraining run's probe (`electra-pretrain --probe_task ...`)."""

    task_file: str  # JSONL `text`, `label`, optional `text_pair`
    eval_file: Optional[str] = None  # default: a quarter of task_file held out
    every: Optional[int] = None  # steps between probes; default: `default_probe_every`
    examples: int = 256  # at most this many examples to fit on, and to score on
    max_seq_length: int = 64

    def __post_init__(self):  # checked before a run builds its data
        for path in (self.task_file, self.eval_file):
            if path and not os.path.isfile(path):
                raise TaskDataError(f"Probe task file {path!r} does not exist.")
        if self.every is not None and self.every < 1:
            raise TaskDataError(f"--probe_every must be >= 1; got {self.every}.")

    def read(self, tokenizer, seed: int) -> ProbeTask:
        return ProbeTask.read(self.task_file, tokenizer, self.eval_file,
                              examples=self.examples, max_seq_length=self.max_seq_length,
                              seed=seed)


def default_probe_every(config, task: ProbeTask) -> int:
    """Steps between probes so that probing costs about PROBE_BUDGET of the training
    compute (a probe is the discriminator's forward pass over the task's examples; a step,
    the forward and backward passes of the batch), in whole checkpoint intervals."""
    length = task.train_inputs["input_word_ids"].shape[1]
    examples = len(task.train_labels) + len(task.eval_labels)
    probe = examples * flops.forward_flops_per_sequence(
        config.replace(max_seq_length=length), sparse_embedding=True)["discriminator"]
    step = flops.training_flops_per_step(config, sparse_embedding=True, backward_multiplier=2)
    steps = probe / step / PROBE_BUDGET
    return config.checkpoint_every * max(1, math.ceil(steps / config.checkpoint_every))


def _probe_rows(path: str) -> list:
    """[(text, text_pair or None, label as a string)] of a JSONL file."""
    if not os.path.isfile(path):
        raise TaskDataError(f"Probe task file {path!r} does not exist.")
    rows = []
    for where, row in jsonl_rows(path):
        if not isinstance(row.get("text"), str) or row.get("label") is None:
            raise TaskDataError(f"{where}: a probe example needs 'text' (a string) and "
                                "'label'.")
        pair = row.get("text_pair")
        rows.append((row["text"], None if pair is None else str(pair), str(row["label"])))
    if not rows:
        raise TaskDataError(f"Probe task file {path!r} holds no example.")
    return rows


def feature_function(encoder):
    """A compiled function: the encoder's inputs -> their frozen features (inference mode):
    the last layer's `[CLS]` vector and its mean over the real tokens, [batch, 2 x hidden].
    Made once per encoder and traced once for every batch shape (each batch is cut to its
    own length), so each probe runs the same graph."""
    @traced.function(input_signature=[input_specs()])
    def features(batch):
        sequence = tf.cast(encoder(batch, training=False)["sequence_output"], tf.float32)
        mask = tf.cast(batch["input_mask"], tf.float32)[..., None]
        mean = tf.reduce_sum(sequence * mask, 1) / tf.maximum(tf.reduce_sum(mask, 1), 1.0)
        return tf.concat([sequence[:, 0], mean], -1)
    return features


def encoder_features(features, inputs: dict, batch_size: int = 128) -> np.ndarray:
    """`features` (from `feature_function`) of `inputs`, float64 [examples, features].

    Examples go through in order of length, each batch cut to its longest (rounded up to
    16 tokens): most probe texts are far shorter than the packed length, and the padding
    would otherwise cost most of the probe's time (the features do not change: padding is
    masked out).
    """
    lengths = inputs["input_mask"].sum(1)
    order = np.argsort(lengths, kind="stable")
    values = np.zeros((len(order), 0))
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        width = min(inputs["input_mask"].shape[1], 16 * math.ceil(lengths[rows].max() / 16))
        batch = features({k: tf.constant(v[rows, :width]) for k, v in inputs.items()}).numpy()
        if not values.shape[1]:
            values = np.zeros((len(order), batch.shape[1]))
        values[rows] = batch
    return values


def linear_probe_accuracy(train_x, train_y, eval_x, eval_y, num_classes: int,
                          penalty: float = RIDGE_PENALTY) -> float:
    """Accuracy on (eval_x, eval_y) of a ridge classifier fitted on (train_x, train_y),
    features standardised by the training set's statistics.

    Closed form (one linear solve) on purpose: exact and deterministic, milliseconds for
    a few hundred examples, where fitting a Keras layer would cost seconds of tracing at
    every probe.
    """
    mean, scale = train_x.mean(0), train_x.std(0) + 1e-6
    x = np.hstack([(train_x - mean) / scale, np.ones((len(train_x), 1))])
    targets = np.eye(num_classes)[train_y]
    regulariser = penalty * np.eye(x.shape[1])
    regulariser[-1, -1] = 0.0  # the bias is free
    weights = np.linalg.solve(x.T @ x + regulariser, x.T @ targets)
    scores = np.hstack([(eval_x - mean) / scale, np.ones((len(eval_x), 1))]) @ weights
    return float(np.mean(scores.argmax(-1) == eval_y))


def probe_accuracy(features, task: ProbeTask) -> float:
    """The probe's dev accuracy on the frozen `features` (`feature_function`) of `task`."""
    return linear_probe_accuracy(encoder_features(features, task.train_inputs),
                                 task.train_labels,
                                 encoder_features(features, task.eval_inputs),
                                 task.eval_labels, len(task.label_names))


def random_encoder_accuracy(config, task: ProbeTask, seed: int = 0) -> float:
    """The probe on a randomly initialised encoder of `config`'s shape: the baseline a
    pretrained encoder must beat. Keras draws unseeded initialisers' seeds from Python's
    `random`: seeded here and put back, so the caller's training is not disturbed."""
    state = random.getstate()
    random.seed(seed)
    try:
        encoder = ElectraEncoder.from_electra_config(config)
        ids = np.zeros((1, 8), np.int32)
        encoder({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                 "input_type_ids": ids})
    finally:
        random.setstate(state)
    return probe_accuracy(feature_function(encoder), task)


class DownstreamProbe(keras.callbacks.Callback):
    """During `ElectraPretrainer.fit`, at the first step and every `every` optimizer steps
    (and at the end), fits a linear classifier on the discriminator's frozen features of
    `task` and records its dev accuracy beside a randomly initialised encoder's (measured
    once): pretraining helps when the first climbs above the second.

        task = ProbeTask.read("probe.jsonl", tokenizer)
        pretrainer.fit(data, steps_per_epoch=100, epochs=10,
                       callbacks=[DownstreamProbe(task, every=200)])

    `history` holds {"step", "accuracy"} per probe, `random_accuracy` the baseline and
    `seconds` the time spent probing. With `log_dir`, the accuracy goes to TensorBoard
    (`probe_accuracy`, and `probe_random_accuracy`); with `history_path`, the history
    is written there (atomically) after each probe and read back when training resumes
    with the same task.
    """

    def __init__(self, task: ProbeTask, every: int, log_dir: Optional[str] = None,
                 history_path: Optional[str] = None, seed: int = 0, verbose: bool = True):
        super().__init__()
        if every < 1:
            raise TaskDataError(f"The probe's interval must be >= 1 step; got {every}.")
        self.task, self.every, self.seed, self.verbose = task, every, seed, verbose
        self.history_path = history_path
        self.writer = tf.summary.create_file_writer(log_dir) if log_dir else None
        self.history, self.random_accuracy, self.seconds = [], None, 0.0
        self._features = None  # `feature_function` of the model's discriminator
        saved = files.read_json(history_path, "delete it to start the probe's history "
                                "anew.") if history_path else None
        if saved and saved.get("fingerprint") == task.fingerprint:
            self.history = saved["history"]
            self.random_accuracy = saved["random_accuracy"]
            self.seconds = saved.get("seconds", 0.0)

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs=None):
        if self.random_accuracy is None:
            started = time.perf_counter()
            self.random_accuracy = random_encoder_accuracy(self.model.config, self.task,
                                                           self.seed)
            self.seconds += time.perf_counter() - started
            self._log("probe_random_accuracy", self.random_accuracy, self._step())
        if not self.history:
            self.probe()

    def on_train_batch_end(self, batch, logs=None):
        if self._step() % self.every == 0:
            self.probe()

    def on_train_end(self, logs=None):
        self.probe()
        if self.writer:
            self.writer.flush()

    def probe(self) -> None:
        """Measures the probe at the current step (once per step)."""
        step = self._step()
        if any(point["step"] == step for point in self.history):
            return
        started = time.perf_counter()
        if self._features is None:
            self._features = feature_function(self.model.discriminator)
        accuracy = probe_accuracy(self._features, self.task)
        self.seconds += time.perf_counter() - started
        self.history.append({"step": step, "accuracy": round(accuracy, 4)})
        self._log("probe_accuracy", accuracy, step)
        if self.verbose:
            print(f"\nProbe at step {step}: accuracy {accuracy:.3f} (random encoder "
                  f"{self.random_accuracy:.3f}; {os.path.basename(self.task.name)})",
                  file=sys.stderr, flush=True)
        if self.history_path:
            files.write_json(self.history_path, self.results())

    def results(self) -> dict:
        return {"task": self.task.name, "fingerprint": self.task.fingerprint,
                "train_examples": len(self.task.train_labels),
                "eval_examples": len(self.task.eval_labels),
                "random_accuracy": self.random_accuracy and round(self.random_accuracy, 4),
                "history": self.history, "seconds": round(self.seconds, 2)}

    def _log(self, name: str, value: float, step: int) -> None:
        if self.writer:
            with self.writer.as_default():
                tf.summary.scalar(name, value, step=step)
