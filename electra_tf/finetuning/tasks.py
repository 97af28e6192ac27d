"""Fine-tuning tasks: readers for the input formats, label sets and official metrics.

Formats: JSONL (`text`, optional `text_pair`, `label`), CSV/TSV with named columns, GLUE's
own TSV files for the GLUE tasks, CoNLL-style files for tagging. Every reader reports bad
input as `TaskDataError` naming the file and line.
"""

import csv
import dataclasses
import json
import os
from typing import List, Optional, Sequence

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import metrics as metrics_lib


@dataclasses.dataclass
class SequenceExample:
    text: str
    text_pair: Optional[str]
    label: object  # str for classification, float for regression
    source: str  # "file:line", for error messages and predictions


@dataclasses.dataclass
class TaggingExample:
    words: List[str]
    tags: List[str]
    source: str


@dataclasses.dataclass(frozen=True)
class Task:
    """A named task: how to read it, what kind of head it needs, how it is scored."""

    name: str
    kind: str  # "classification" | "regression" | "tagging" | "qa"
    main_metric: str
    labels: Optional[Sequence[str]] = None  # fixed label set; None = inferred from train
    glue_columns: Optional[tuple] = None  # (text, pair or None, label) for GLUE TSVs
    glue_header: bool = True
    epochs: int = 3

    def score(self, gold, predicted) -> dict:
        return SCORERS[self.name if self.name in SCORERS else self.kind](gold, predicted)


def _classification_scores(gold, predicted):
    return {"accuracy": metrics_lib.accuracy(gold, predicted)}


def _accuracy_and_f1(gold, predicted):
    # GLUE's positive class for MRPC/QQP is label "1".
    return {"accuracy": metrics_lib.accuracy(gold, predicted),
            "f1": metrics_lib.binary_f1(gold, predicted, positive="1")}


def _regression_scores(gold, predicted):
    return {"pearson": metrics_lib.pearson(gold, predicted),
            "spearman": metrics_lib.spearman(gold, predicted)}


def _tagging_scores(gold, predicted):
    iob = any(t[:2] in ("B-", "I-") for tags in gold for t in tags)
    scores = {"accuracy": metrics_lib.token_accuracy(gold, predicted)}
    if iob:
        scores.update({f"span_{k}": v for k, v in metrics_lib.span_f1(gold, predicted).items()})
    return scores


def _mcc(gold, predicted):
    as_int = lambda values: [int(v) for v in values]  # noqa: E731
    return {"mcc": metrics_lib.matthews_corrcoef(as_int(gold), as_int(predicted)),
            "accuracy": metrics_lib.accuracy(gold, predicted)}


SCORERS = {
    "classification": _classification_scores,
    "regression": _regression_scores,
    "tagging": _tagging_scores,
    "qa": lambda gold, predicted: metrics_lib.squad_scores(gold, predicted),
    "cola": _mcc,
    "mrpc": _accuracy_and_f1,
    "qqp": _accuracy_and_f1,
}

TASKS = {task.name: task for task in [
    Task("text_classification", "classification", "accuracy"),
    Task("text_regression", "regression", "pearson"),
    Task("tagging", "tagging", "span_f1"),
    Task("pos_tagging", "tagging", "accuracy"),
    Task("squad", "qa", "f1", epochs=2),  # SQuAD 1.1: every question has an answer
    Task("squad_v2", "qa", "f1", epochs=2),  # SQuAD 2.0: unanswerable questions too
    # GLUE; columns are those of the official GLUE TSV files.
    Task("cola", "classification", "mcc", ("0", "1"), (3, None, 1), glue_header=False),
    Task("sst2", "classification", "accuracy", ("0", "1"), (0, None, 1)),
    Task("mrpc", "classification", "f1", ("0", "1"), (3, 4, 0)),
    Task("qqp", "classification", "f1", ("0", "1"), (3, 4, 5)),
    Task("stsb", "regression", "spearman", None, (7, 8, -1), epochs=10),
    Task("mnli", "classification", "accuracy", ("contradiction", "entailment", "neutral"),
         (8, 9, -1)),
    Task("qnli", "classification", "accuracy", ("entailment", "not_entailment"), (1, 2, -1)),
    Task("rte", "classification", "accuracy", ("entailment", "not_entailment"), (1, 2, -1),
         epochs=10),
    Task("wnli", "classification", "accuracy", ("0", "1"), (1, 2, -1)),
]}


def get_task(name: str) -> Task:
    key = name.lower().replace("-", "").replace("glue/", "").replace("squadv2", "squad_v2")
    if key not in TASKS:
        raise TaskDataError(f"Unknown task {name!r}; choose one of {', '.join(TASKS)}.")
    return TASKS[key]


# ----------------------------------------------------------------------------- readers
def _check_file(path):
    if not os.path.isfile(path):
        raise TaskDataError(f"Data file {path!r} does not exist.")
    if os.path.getsize(path) == 0:
        raise TaskDataError(f"Data file {path!r} is empty.")


def _label(task: Task, raw, source):
    if task.kind == "regression":
        try:
            return float(raw)
        except (TypeError, ValueError):
            raise TaskDataError(f"{source}: label {raw!r} is not a number (regression task).")
    if raw is None or str(raw).strip() == "":
        raise TaskDataError(f"{source}: missing label.")
    return str(raw).strip()


def read_sequence_examples(task: Task, path: str, text_field="text",
                           pair_field="text_pair", label_field="label",
                           require_labels=True) -> List[SequenceExample]:
    """Reads JSONL, CSV/TSV (named columns) or, for GLUE tasks, GLUE's TSV files."""
    _check_file(path)
    if task.glue_columns and path.endswith(".tsv") and not _has_named_columns(
            path, text_field):
        return _read_glue(task, path, require_labels)
    if path.endswith((".jsonl", ".json")):
        rows = _jsonl_rows(path)
    elif path.endswith((".csv", ".tsv")):
        rows = _delimited_rows(path, "\t" if path.endswith(".tsv") else ",")
    else:
        raise TaskDataError(f"{path}: unknown format; use .jsonl, .csv or .tsv.")
    examples = []
    for source, row in rows:
        if text_field not in row:
            raise TaskDataError(f"{source}: no {text_field!r} field/column (have "
                                f"{sorted(row)}); pass --text_field to name it.")
        label = row.get(label_field)
        if require_labels or label is not None:
            label = _label(task, label, source)
        examples.append(SequenceExample(str(row[text_field]), row.get(pair_field), label,
                                        source))
    if not examples:
        raise TaskDataError(f"Data file {path!r} holds no example.")
    return examples


def _has_named_columns(path, text_field):
    with open(path, encoding="utf-8") as f:
        return text_field in f.readline().rstrip("\n").split("\t")


def _jsonl_rows(path):
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}:{number}: not valid JSON ({e.msg}).")
            if not isinstance(row, dict):
                raise TaskDataError(f"{path}:{number}: expected a JSON object per line.")
            yield f"{path}:{number}", row


def _delimited_rows(path, delimiter):
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f, delimiter=delimiter, quoting=csv.QUOTE_MINIMAL)
        for row in reader:
            if None in row:
                raise TaskDataError(f"{path}:{reader.line_num}: more fields than the header "
                                    f"has columns ({len(reader.fieldnames)}).")
            yield f"{path}:{reader.line_num}", row


def _read_glue(task, path, require_labels):
    text_column, pair_column, label_column = task.glue_columns
    examples = []
    with open(path, encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    for number, row in enumerate(rows, 1):
        if number == 1 and task.glue_header:
            continue
        source = f"{path}:{number}"
        needed = max(c if c >= 0 else -c - 1 for c in (text_column, pair_column or 0,
                                                       label_column if require_labels else 0))
        if len(row) <= needed:
            raise TaskDataError(f"{source}: {len(row)} columns, the {task.name} format needs "
                                f"more than {needed}.")
        label = _label(task, row[label_column], source) if require_labels else None
        examples.append(SequenceExample(row[text_column],
                                        row[pair_column] if pair_column is not None else None,
                                        label, source))
    if not examples:
        raise TaskDataError(f"Data file {path!r} holds no example.")
    return examples


def read_conll(path: str, tag_column: int = -1, token_column: int = 0) -> List[TaggingExample]:
    """CoNLL-style: one token per line, tab- or space-separated columns, a blank line between
    sentences. Feature columns may vary in number (MeCab output does), but every line must
    hold the token and the tag columns."""
    _check_file(path)
    needed = max(token_column, tag_column) + 1 if tag_column >= 0 else max(2, token_column + 1)
    examples, words, tags, start = [], [], [], 1
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip() or line.startswith("-DOCSTART-"):
                if words:
                    examples.append(TaggingExample(words, tags, f"{path}:{start}"))
                words, tags, start = [], [], number + 1
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            if len(fields) < needed:
                raise TaskDataError(
                    f"{path}:{number}: {len(fields)} column(s); a token and a tag column "
                    f"(tag column {tag_column}) need at least {needed}.")
            words.append(fields[token_column])
            tags.append(fields[tag_column])
    if words:
        examples.append(TaggingExample(words, tags, f"{path}:{start}"))
    if not examples:
        raise TaskDataError(f"Data file {path!r} holds no sentence.")
    return examples


def infer_labels(task: Task, train_examples) -> list:
    """The label set: fixed for GLUE tasks, else sorted labels of the training file."""
    if task.kind == "regression":
        return []
    if task.labels:
        return list(task.labels)
    if task.kind == "tagging":
        return sorted({t for e in train_examples for t in e.tags})
    return sorted({e.label for e in train_examples})


def check_labels(examples, labels: list, kind: str) -> None:
    """Refuses an evaluation label unseen in training, naming where it occurs."""
    if kind == "regression":
        return
    known = set(labels)
    for example in examples:
        found = example.tags if kind == "tagging" else [example.label]
        for label in found:
            if label is not None and label not in known:
                raise TaskDataError(
                    f"{example.source}: label {label!r} does not occur in the training "
                    f"data (labels: {sorted(known)}).")


