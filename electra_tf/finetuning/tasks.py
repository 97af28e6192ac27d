"""Named fine-tuning tasks: a kind (`kinds/`), the official metric, GLUE's file layouts.

`get_task("sst2")` and friends; any labelled JSONL/CSV/TSV works through the generic
`text_classification` and `text_regression` tasks, CoNLL files through `tagging`.
"""

import dataclasses
from typing import Callable, Optional, Sequence

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import kinds, metrics
from electra_tf.finetuning.kinds.base import TaskKind


@dataclasses.dataclass(frozen=True)
class Task:
    """A named task: its kind, its main metric, and what differs from the kind's defaults."""

    name: str
    kind: TaskKind
    main_metric: str
    labels: Optional[Sequence[str]] = None  # fixed label set; None = inferred from train
    glue_columns: Optional[tuple] = None  # (text, pair or None, label) for GLUE TSVs
    glue_header: bool = True
    epochs: int = 3
    scorer: Optional[Callable] = None  # the official metrics, when not the kind's
    unanswerable: bool = False  # QA with unanswerable questions (SQuAD 2.0)
    # Paraphrase-like pairs whose order carries nothing: with `--double_unordered` (the
    # official default) training sees every pair in both orders.
    double_unordered: bool = False
    # Regression labels' (low, high): trained on (label - low) / high, as official.
    label_range: Optional[tuple] = None

    def score(self, gold, predicted) -> dict:
        return (self.scorer or self.kind.score)(gold, predicted)


def _accuracy_and_f1(gold, predicted):
    # GLUE's positive class for MRPC/QQP is label "1".
    return {"accuracy": metrics.accuracy(gold, predicted),
            "f1": metrics.binary_f1(gold, predicted, positive="1")}


def _mcc(gold, predicted):
    as_int = lambda values: [int(v) for v in values]  # noqa: E731
    return {"mcc": metrics.matthews_corrcoef(as_int(gold), as_int(predicted)),
            "accuracy": metrics.accuracy(gold, predicted)}


_CLASSIFICATION, _REGRESSION = kinds.get("classification"), kinds.get("regression")
TASKS = {task.name: task for task in [
    Task("text_classification", _CLASSIFICATION, "accuracy"),
    Task("text_regression", _REGRESSION, "pearson"),
    Task("tagging", kinds.get("tagging"), "span_f1"),
    Task("pos_tagging", kinds.get("tagging"), "accuracy"),
    Task("squad", kinds.get("qa"), "f1", epochs=2),  # SQuAD 1.1: every question has an answer
    Task("squad_v2", kinds.get("qa"), "f1", epochs=2, unanswerable=True),
    # GLUE; columns are those of the official GLUE TSV files.
    Task("cola", _CLASSIFICATION, "mcc", ("0", "1"), (3, None, 1), glue_header=False,
         scorer=_mcc),
    Task("sst2", _CLASSIFICATION, "accuracy", ("0", "1"), (0, None, 1)),
    Task("mrpc", _CLASSIFICATION, "f1", ("0", "1"), (3, 4, 0), scorer=_accuracy_and_f1,
         double_unordered=True),
    Task("qqp", _CLASSIFICATION, "f1", ("0", "1"), (3, 4, 5), scorer=_accuracy_and_f1),
    Task("stsb", _REGRESSION, "spearman", None, (7, 8, -1), epochs=10,
         double_unordered=True, label_range=(0.0, 5.0)),
    Task("mnli", _CLASSIFICATION, "accuracy", ("contradiction", "entailment", "neutral"),
         (8, 9, -1)),
    Task("qnli", _CLASSIFICATION, "accuracy", ("entailment", "not_entailment"), (1, 2, -1)),
    Task("rte", _CLASSIFICATION, "accuracy", ("entailment", "not_entailment"), (1, 2, -1),
         epochs=10),
    Task("wnli", _CLASSIFICATION, "accuracy", ("0", "1"), (1, 2, -1)),
]}


def get_task(name: str) -> Task:
    key = name.lower().replace("-", "").replace("glue/", "").replace("squadv2", "squad_v2")
    if key not in TASKS:
        raise TaskDataError(f"Unknown task {name!r}; choose one of {', '.join(TASKS)}.")
    return TASKS[key]
