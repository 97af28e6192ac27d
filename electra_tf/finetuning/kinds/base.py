"""What a task kind decides: how its examples are read, labelled and encoded, which task
model it trains with which loss, and how outputs become predictions and scores (the task
model serves itself).

The fine-tuning run asks the task's kind for all of these; kinds hold no state (one
instance serves every task of its kind).
"""

import numpy as np

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import readers, tfds_data
from electra_tf.finetuning.features import Encoder

# Keras loss reductions of `FinetuneConfig.batch_loss`.
REDUCTIONS = {"sum": "sum", "mean": "sum_over_batch_size"}


class TaskKind:
    """One kind of task (classification, regression, tagging, QA); see the module doc."""

    name = ""
    model_class = ""  # its task model's class name (an `electra_tf.models` class)
    default_max_seq_length = 128

    def read_examples(self, task, cfg, source: str, training: bool) -> list:
        """The examples of `source`: a data file, or with `cfg.tfds_name` a TFDS split.
        Training examples must have labels; evaluation examples may have none (they are
        then predicted, not scored)."""
        if cfg.tfds_name:
            raise TaskDataError(f"--tfds_name reads sequence (GLUE-style) tasks; {task.name} "
                                "reads --train_file and --eval_file.")
        return self.read_file(task, cfg, source, training)

    def read_file(self, task, cfg, path: str, training: bool) -> list:
        raise NotImplementedError

    def labels(self, task, train_examples, cfg) -> list:
        """Label names in id order: the task model's outputs."""
        return []

    def check_labels(self, examples, labels: list, cfg) -> None:
        """Refuses an evaluation label unseen in training, naming where it occurs."""

    def official_head_dropout(self, dropout: float) -> float:
        """The dropout the official code applies before this kind's head."""
        return 0.0

    def prepare(self, task, cfg, tokenizer, special_ids: dict, train_examples,
                eval_examples, labels: list):
        """The encoded train/eval arrays and their decoding (a `TaskData`)."""
        raise NotImplementedError

    def head_config(self, task, labels: list, cfg, initializer_range: float,
                    data) -> dict:
        """The task model's constructor arguments besides the encoder and preprocessor,
        for `labels` and the prepared `data`."""
        raise NotImplementedError

    def task_info(self, task, cfg) -> dict:
        """What the run's task.json records about the task besides the labels."""
        return {}

    def loss(self, task, cfg) -> tuple:
        """(Keras loss, loss weights or None) to compile the task model with."""
        raise NotImplementedError

    def score(self, gold, predicted) -> dict:
        raise NotImplementedError

    def prediction_files(self, data, records) -> dict:
        """{file name: JSON value} written beside predictions.jsonl (QA's official files)."""
        return {}


class TaskData:
    """Encoded train/eval arrays, plus what turns model outputs back into predictions.

    `train` is (inputs, targets, sample weights or None); `eval_inputs` the eval inputs.
    An eval set without labels (a test split) is predicted, not scored: `gold()` is None.
    """

    text_pairs = False  # inputs are `[CLS] a [SEP] b [SEP]` (recorded for serving)

    def __init__(self, train, eval_inputs, eval_examples):
        self.train, self.eval_inputs, self.eval_examples = train, eval_inputs, eval_examples

    def predictions(self, outputs) -> tuple:
        """Model outputs on the eval set -> (predicted labels, per-example records)."""
        raise NotImplementedError

    def gold(self):
        return labelled([e.label for e in self.eval_examples], self.eval_examples)

    def score(self, task, predicted):
        """The task's official metrics of `predicted` (from `predictions`), or None for an
        eval set without labels."""
        gold = self.gold()
        return None if gold is None else task.score(gold, predicted)

    def describe(self, example) -> dict:
        """What predictions.jsonl shows of an example beside its prediction."""
        text = {"text": example.text}
        if example.text_pair is not None:
            text["text_pair"] = example.text_pair
        return {"source": example.source, **text, "label": example.label}


def labelled(gold: list, examples):
    """`gold`, or None when no example has a label; a mix is refused."""
    missing = [e for e, g in zip(examples, gold) if g is None]
    if len(missing) == len(gold):
        return None
    if missing:
        raise TaskDataError(f"{missing[0].source}: no label, while other evaluation examples "
                            "have one; label every example or none (to only predict).")
    return gold


def keras_loss(loss_class, cfg, **kwargs):
    """A Keras loss reduced over the batch as `cfg.batch_loss` says."""
    return loss_class(reduction=REDUCTIONS[cfg.batch_loss], **kwargs)


class SequenceKind(TaskKind):
    """A text (or text pair) in, one label or score out from the `[CLS]` vector."""

    model_class = "ElectraTextClassifier"
    numeric_labels = False  # labels are numbers (TFDS stores scores, not class ids)

    def read_examples(self, task, cfg, source, training):
        if cfg.tfds_name:
            examples = tfds_data.read_tfds(task, cfg.tfds_name, source, cfg.data_dir,
                                           cfg.text_field, cfg.pair_field, cfg.label_field)
            unlabelled = [e for e in examples if e.label is None]
            if training and unlabelled:
                raise TaskDataError(f"{unlabelled[0].source}: no label; train on a labelled "
                                    "split (--train_split).")
            return examples
        return self.read_file(task, cfg, source, training)

    def read_file(self, task, cfg, path, training):
        return readers.read_sequence_examples(task, path, cfg.text_field, cfg.pair_field,
                                              cfg.label_field, require_labels=training)

    def parse_label(self, raw, source: str):
        """A label as read from a file (`source` names the file and line for errors);
        None for a missing one."""
        raise NotImplementedError

    def official_head_dropout(self, dropout):
        return dropout  # dropout on the [CLS] vector during training

    def targets(self, task, examples, labels: list) -> np.ndarray:
        raise NotImplementedError

    def prepare(self, task, cfg, tokenizer, special_ids, train_examples, eval_examples,
                labels):
        if cfg.double_unordered and task.double_unordered:
            # Paraphrase-like tasks: the order of the pair carries nothing (official).
            train_examples = train_examples + [
                readers.SequenceExample(e.text_pair, e.text, e.label, e.source)
                for e in train_examples]
        encoder = Encoder(tokenizer, special_ids, cfg.max_seq_length)
        # Decided once, from the training file: serving packs the way training did.
        text_pairs = any(e.text_pair is not None for e in train_examples)

        def encode(examples):
            return encoder.encode_pairs([e.text for e in examples],
                                        [e.text_pair for e in examples],
                                        with_pairs=text_pairs)

        data = self.task_data(task, (encode(train_examples),
                                     self.targets(task, train_examples, labels), None),
                              encode(eval_examples), eval_examples, labels)
        data.text_pairs = text_pairs
        return data

    def task_data(self, task, train, eval_inputs, eval_examples, labels) -> TaskData:
        raise NotImplementedError

    def head_config(self, task, labels, cfg, initializer_range, data):
        return {"num_classes": len(labels), "dropout": cfg.head_dropout,
                "initializer_range": initializer_range, "label_names": labels,
                "text_pairs": data.text_pairs}


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

