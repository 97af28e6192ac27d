"""Readers of fine-tuning data: examples from the input formats, bad input named.

Formats: JSONL (`text`, optional `text_pair`, `label`), CSV/TSV with named columns, GLUE's
own TSV files for the GLUE tasks, CoNLL-style files for tagging (SQuAD JSON: `squad`).
Every reader reports bad input as `TaskDataError` naming the file and line; labels are
parsed by the task's kind (`kinds/`).
"""

import csv
import dataclasses
import json
import os
from typing import List, Optional

from electra_tf.errors import TaskDataError


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


def _check_file(path):
    if not os.path.isfile(path):
        raise TaskDataError(f"Data file {path!r} does not exist.")
    if os.path.getsize(path) == 0:
        raise TaskDataError(f"Data file {path!r} is empty.")


def read_sequence_examples(task, path: str, text_field="text",
                           pair_field="text_pair", label_field="label",
                           require_labels=True) -> List[SequenceExample]:
    """Reads JSONL, CSV/TSV (named columns) or, for GLUE tasks, GLUE's TSV files."""
    _check_file(path)
    if task.glue_columns and path.endswith(".tsv") and not _has_named_columns(
            path, text_field):
        return _read_glue(task, path, require_labels)
    if path.endswith((".jsonl", ".json")):
        rows = jsonl_rows(path)
    elif path.endswith((".csv", ".tsv")):
        rows = delimited_rows(path, "\t" if path.endswith(".tsv") else ",")
    else:
        raise TaskDataError(f"{path}: unknown format; use .jsonl, .csv or .tsv.")
    examples = []
    for source, row in rows:
        if text_field not in row:
            raise TaskDataError(f"{source}: no {text_field!r} field/column (have "
                                f"{sorted(row)}); pass --text_field to name it.")
        label = row.get(label_field)
        if require_labels or label is not None:
            label = task.kind.parse_label(label, source)
        examples.append(SequenceExample(str(row[text_field]), row.get(pair_field), label,
                                        source))
    if not examples:
        raise TaskDataError(f"Data file {path!r} holds no example.")
    return examples


def _has_named_columns(path, text_field):
    with open(path, encoding="utf-8") as f:
        return text_field in f.readline().rstrip("\n").split("\t")


def jsonl_rows(path):
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


def delimited_rows(path, delimiter):
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
        has_label = len(row) > (label_column if label_column >= 0 else -label_column - 1)
        label = task.kind.parse_label(row[label_column], source) if has_label else None
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
