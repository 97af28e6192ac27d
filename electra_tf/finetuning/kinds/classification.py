"""`classification`: a text (or pair) -> one of the training data's labels."""

import keras
import numpy as np

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import metrics
from electra_tf.finetuning.kinds.base import (SequenceKind, TaskData, check_known_labels,
                                              keras_loss)


class Classification(SequenceKind):
    """Softmax over the labels from the `[CLS]` vector; served as probabilities, label id
    and label name."""

    name = "classification"

    def parse_label(self, raw, source):
        if raw is None or str(raw).strip() == "":
            raise TaskDataError(f"{source}: missing label.")
        return str(raw).strip()

    def labels(self, task, train_examples, cfg):
        return list(task.labels) if task.labels else sorted({e.label for e in train_examples})

    def check_labels(self, examples, labels, cfg):
        check_known_labels(examples, labels, lambda example: [example.label])

    def targets(self, task, examples, labels):
        index = {label: i for i, label in enumerate(labels)}
        return np.asarray([index[e.label] for e in examples], np.int32)

    def task_data(self, task, train, eval_inputs, eval_examples, labels):
        return _ClassificationData(train, eval_inputs, eval_examples, labels)

    def loss(self, task, cfg):
        return keras_loss(keras.losses.SparseCategoricalCrossentropy, cfg,
                          from_logits=True), None

    def score(self, gold, predicted):
        return {"accuracy": metrics.accuracy(gold, predicted)}


class _ClassificationData(TaskData):
    def __init__(self, train, eval_inputs, eval_examples, labels):
        super().__init__(train, eval_inputs, eval_examples)
        self.labels = labels

    def predictions(self, outputs):
        probabilities = np.asarray(outputs)  # the classifier's `predict`
        predicted = [self.labels[i] for i in probabilities.argmax(-1)]
        return predicted, [{"prediction": p, "probabilities": [round(float(x), 5) for x in row]}
                           for p, row in zip(predicted, probabilities)]
