"""What a task kind decides: how its examples are read, labelled and encoded, which task
model it trains with which loss, how outputs become predictions and scores, and what its
served model takes and returns.

The fine-tuning run and the serving export ask the task's kind for all of these; kinds hold
no state (one instance serves every task of its kind).
"""

import numpy as np
import tensorflow as tf

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import readers, tfds_data
from electra_tf.finetuning.features import Encoder
from electra_tf.text.packing import pack_segments

# Serving inputs: every input and output is a dense tensor, so TF Serving's REST and gRPC
# APIs can carry them (`N` = batch).
TEXT = tf.TensorSpec([None], tf.string, name="text")
TEXT_PAIR = tf.TensorSpec([None], tf.string, name="text_pair")


class TaskKind:
    """One kind of task (classification, regression, tagging, QA); see the module doc."""

    name = ""
    model_class = ""  # the task model in `layers.task_models`
    default_max_seq_length = 128

    def read_examples(self, task, cfg, source: str) -> list:
        """The examples of `source`: a data file, or with `cfg.tfds_name` a TFDS split."""
        if cfg.tfds_name:
            raise TaskDataError(f"--tfds_name reads sequence (GLUE-style) tasks; {task.name} "
                                "reads --train_file and --eval_file.")
        return self.read_file(task, cfg, source)

    def read_file(self, task, cfg, path: str) -> list:
        raise NotImplementedError

    def labels(self, task, train_examples) -> list:
        """Label names in id order (fixed for GLUE tasks, else from the training data)."""
        return []

    def check_labels(self, examples, labels: list) -> None:
        """Refuses an evaluation label unseen in training, naming where it occurs."""

    def prepare(self, task, cfg, tokenizer, special_ids: dict, train_examples,
                eval_examples, labels: list):
        """The encoded train/eval arrays and their decoding (a `TaskData`)."""
        raise NotImplementedError

    def head_config(self, num_labels: int, cfg, initializer_range: float) -> dict:
        """The task model's head settings (see `layers.task_models`)."""
        return {"head_outputs": num_labels, "dropout": cfg.dropout,
                "initializer_range": initializer_range}

    def loss(self, task) -> tuple:
        """(Keras loss, loss weights or None) to compile the task model with."""
        raise NotImplementedError

    def score(self, gold, predicted) -> dict:
        raise NotImplementedError

    def prediction_files(self, records) -> dict:
        """{file name: JSON value} written beside predictions.jsonl (QA's official files)."""
        return {}

    def serving_signatures(self, model, tokenizer, seq_length: int, special_ids: dict,
                           labels: list, text_pairs: bool) -> dict:
        """{signature name: tf.function with an input signature}, "serving_default" first:
        raw strings in, predictions out, through `tokenizer` (strings [N] -> ragged ids)
        and the in-graph packing of `text.packing`. Texts longer than the training length
        are truncated, never refused."""
        raise NotImplementedError


class TaskData:
    """Encoded train/eval arrays, plus what turns model outputs back into predictions.

    `train` is (inputs, targets, sample weights or None); `eval_inputs` the eval inputs.
    """

    text_pairs = False  # inputs are `[CLS] a [SEP] b [SEP]` (recorded for serving)

    def __init__(self, train, eval_inputs, eval_examples):
        self.train, self.eval_inputs, self.eval_examples = train, eval_inputs, eval_examples

    def predictions(self, outputs) -> tuple:
        """Model outputs on the eval set -> (predicted labels, per-example records)."""
        raise NotImplementedError

    def gold(self):
        return [e.label for e in self.eval_examples]

    def describe(self, example) -> dict:
        return {"source": example.source, "label": example.label}


class SequenceKind(TaskKind):
    """A text (or text pair) in, one label or score out from the `[CLS]` vector."""

    model_class = "SequenceClassifier"
    numeric_labels = False  # labels are numbers (TFDS stores scores, not class ids)

    def parse_label(self, raw, source: str):
        """A label as read from a file (`source` names the file and line for errors)."""
        raise NotImplementedError

    def read_examples(self, task, cfg, source):
        if cfg.tfds_name:
            return tfds_data.read_tfds(task, cfg.tfds_name, source, cfg.data_dir,
                                       cfg.text_field, cfg.pair_field, cfg.label_field)
        return self.read_file(task, cfg, source)

    def read_file(self, task, cfg, path):
        return readers.read_sequence_examples(task, path, cfg.text_field, cfg.pair_field,
                                              cfg.label_field)

    def targets(self, examples, labels: list) -> np.ndarray:
        raise NotImplementedError

    def prepare(self, task, cfg, tokenizer, special_ids, train_examples, eval_examples,
                labels):
        encoder = Encoder(tokenizer, special_ids, cfg.max_seq_length)
        # Decided once, from the training file: serving packs the way training did.
        text_pairs = any(e.text_pair is not None for e in train_examples)

        def encode(examples):
            return encoder.encode_pairs([e.text for e in examples],
                                        [e.text_pair for e in examples],
                                        with_pairs=text_pairs)

        data = self.task_data((encode(train_examples), self.targets(train_examples, labels),
                               None), encode(eval_examples), eval_examples, labels)
        data.text_pairs = text_pairs
        return data

    def task_data(self, train, eval_inputs, eval_examples, labels) -> TaskData:
        raise NotImplementedError

    def serving_outputs(self, outputs, label_names) -> dict:
        """The served predictions of the model's outputs on a batch."""
        raise NotImplementedError

    def serving_signatures(self, model, tokenizer, seq_length, special_ids, labels,
                           text_pairs):
        """`serving_default(text [N] (, text_pair [N]))`; `text_pair` only when the model
        was trained on pairs (an empty one packs as `[CLS] text [SEP] [SEP]`, as training
        packed examples without a pair)."""
        label_names = tf.constant([str(label) for label in labels] or [""])

        def predict(segments):
            inputs = pack_segments([tokenizer(s) for s in segments], seq_length, special_ids)
            return self.serving_outputs(model(inputs, training=False), label_names)

        if text_pairs:
            serve = tf.function(lambda text, text_pair: predict([text, text_pair]),
                                input_signature=[TEXT, TEXT_PAIR])
        else:
            serve = tf.function(lambda text: predict([text]), input_signature=[TEXT])
        return {"serving_default": serve}


def check_known_labels(examples, labels: list, labels_of) -> None:
    """TaskDataError for the first label of `examples` (`labels_of(example)`) that is not in
    `labels` (None: an unlabelled example)."""
    known = set(labels)
    for example in examples:
        for label in labels_of(example):
            if label is not None and label not in known:
                raise TaskDataError(
                    f"{example.source}: label {label!r} does not occur in the training "
                    f"data (labels: {sorted(known)}).")
