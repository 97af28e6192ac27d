"""`regression`: a text (or pair) -> a score."""

import keras
import numpy as np

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import metrics
from electra_tf.finetuning.kinds.base import SequenceKind, TaskData, keras_loss


class Regression(SequenceKind):
    """One score from the `[CLS]` vector, trained with squared error.

    A task with a known label range (STS-B: 0 to 5) trains on labels scaled as the
    official code does, `(label - low) / high`; predictions are scaled back.
    """

    name = "regression"
    numeric_labels = True

    def parse_label(self, raw, source):
        if raw is None or str(raw).strip() == "":
            raise TaskDataError(f"{source}: missing label.")
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise TaskDataError(f"{source}: label {raw!r} is not a number (regression task).")

    def targets(self, task, examples, labels):
        low, high = task.label_range or (0.0, 1.0)
        return (np.asarray([e.label for e in examples], np.float32) - low) / high

    def task_data(self, task, train, eval_inputs, eval_examples, labels):
        return _RegressionData(train, eval_inputs, eval_examples)

    def task_info(self, task, cfg):
        return {"label_range": task.label_range}

    def head_config(self, task, labels, cfg, initializer_range, data):
        return {**super().head_config(task, labels, cfg, initializer_range, data),
                "num_classes": 1, "label_names": None, "label_range": task.label_range}

    def loss(self, task, cfg):
        return keras_loss(keras.losses.MeanSquaredError, cfg), None

    def score(self, gold, predicted):
        return {"pearson": metrics.pearson(gold, predicted),
                "spearman": metrics.spearman(gold, predicted)}


class _RegressionData(TaskData):
    def predictions(self, outputs):
        scores = [float(s) for s in outputs]  # the model's `predict`: in the labels' range
        return scores, [{"prediction": s} for s in scores]
