"""`regression`: a text (or pair) -> a score."""

import keras
import numpy as np

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import metrics
from electra_tf.finetuning.kinds.base import SequenceKind, TaskData


class Regression(SequenceKind):
    """One score from the `[CLS]` vector, trained with mean squared error."""

    name = "regression"
    numeric_labels = True

    def parse_label(self, raw, source):
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise TaskDataError(f"{source}: label {raw!r} is not a number (regression task).")

    def targets(self, examples, labels):
        return np.asarray([e.label for e in examples], np.float32)

    def task_data(self, train, eval_inputs, eval_examples, labels):
        return _RegressionData(train, eval_inputs, eval_examples)

    def head_config(self, num_labels, cfg, initializer_range):
        return super().head_config(1, cfg, initializer_range)

    def loss(self, task):
        return keras.losses.MeanSquaredError(), None

    def score(self, gold, predicted):
        return {"pearson": metrics.pearson(gold, predicted),
                "spearman": metrics.spearman(gold, predicted)}

    def serving_outputs(self, outputs, label_names):
        return {"score": outputs}


class _RegressionData(TaskData):
    def predictions(self, outputs):
        scores = [float(s) for s in outputs]
        return scores, [{"prediction": s} for s in scores]
