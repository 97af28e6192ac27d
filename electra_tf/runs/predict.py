"""Predicting with a fine-tuned model: a fine-tuning run or its serving export, raw inputs
in, one JSON line per input out (the input's fields, all kept, and its `prediction`).

Inputs by the model's kind:
- classification, regression: JSONL `text` (and `text_pair` for a model trained on pairs),
  CSV/TSV with those columns, or plain text (one text per line);
- tagging: CoNLL (the words in the first column; other columns are ignored), JSONL `words`
  (a list) or `text` (split on white space), or plain text (one sentence per line);
- question answering (runs only: the QA model has no serving export): SQuAD JSON, or JSONL
  `question` and `context` (optional `id`).

A run and its export predict through the same graph (the task model's serving signature),
so they answer alike; the output holds what `electra-finetune`'s predictions.jsonl holds.
"""

import dataclasses
import json
import os
import sys
import time
from typing import Callable, Optional

import tensorflow as tf
from tqdm import tqdm

from electra_tf import files, run_dir
from electra_tf.errors import ConfigError, TaskDataError
from electra_tf.finetuning import readers, squad
from electra_tf.models.finetuned import load_finetuned
from electra_tf.models.serving import version_dirs

CLASSIFICATION, REGRESSION, TAGGING, QA = "classification", "regression", "tagging", "qa"


@dataclasses.dataclass
class Predictor:
    """A model ready to predict: `predict(rows)` answers a batch of input rows (dicts of
    the fields `read_inputs` gives) with one prediction record each."""

    kind: str
    text_pairs: bool
    predict: Callable[[list], list]


# ----------------------------------------------------------------------------- models
def open_predictor(path: str, trial: Optional[int] = None) -> Predictor:
    """A fine-tuning run directory (its best trial, or `trial`), or a serving export (a
    version directory, or a model base directory: its newest version)."""
    if run_dir.is_finetuned(path):
        finetuned = load_finetuned(path, trial)
        if finetuned.kind == QA:
            return Predictor(QA, True, _qa_predictor(finetuned.model))
        return _signature_predictor(finetuned.model.serving_signatures()["serving_default"])
    version = _export_version(path)
    if version is None:
        raise ConfigError(f"{path!r} is neither a fine-tuning run (electra-finetune "
                          "--model_dir) nor a serving export (electra-export-classifier "
                          "--output); a pretrained model must be fine-tuned first.")
    if trial is not None:
        raise ConfigError("--trial picks a trial of a fine-tuning run; an export holds one "
                          "model.")
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops before loading)

    return _signature_predictor(tf.saved_model.load(version).signatures["serving_default"])


def _export_version(path: str) -> Optional[str]:
    """The SavedModel directory of a serving export, or None."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = version_dirs(path)
    newest = versions and os.path.join(path, str(versions[-1]))
    return newest if newest and os.path.isfile(os.path.join(newest, "saved_model.pb")) else None


def _signature_predictor(signature) -> Predictor:
    """A serving signature (`ElectraTextClassifier`'s or `ElectraTokenClassifier`'s, from
    the run or its export) as a Predictor."""
    concrete = (signature if hasattr(signature, "structured_outputs")  # loaded
                else signature.get_concrete_function())
    positional, named = concrete.structured_input_signature
    inputs = {spec.name for spec in positional} | set(named)
    outputs = concrete.structured_outputs
    if "words" in inputs:
        def predict(rows):
            words = [row["words"] for row in rows]
            width = max(1, max(map(len, words)))
            padded = tf.constant([w + [""] * (width - len(w)) for w in words])
            tags = concrete(words=padded)["tags"].numpy()
            return [{"prediction": [t.decode() for t in row[:len(w)]]}
                    for row, w in zip(tags, words)]
        return Predictor(TAGGING, False, predict)

    text_pairs = "text_pair" in inputs

    def predict(rows):
        feed = {"text": tf.constant([row["text"] for row in rows])}
        if text_pairs:
            feed["text_pair"] = tf.constant([str(row.get("text_pair") or "") for row in rows])
        answers = concrete(**feed)
        if "score" in answers:
            return [{"prediction": round(float(s), 5)} for s in answers["score"].numpy()]
        return [{"prediction": label.decode(),
                 "probabilities": [round(float(p), 5) for p in probabilities]}
                for label, probabilities in zip(answers["label"].numpy(),
                                                answers["probabilities"].numpy())]

    return Predictor(REGRESSION if "score" in outputs else CLASSIFICATION, text_pairs, predict)


def _qa_predictor(model):
    def predict(rows):
        answers = model.predict(([r["question"] for r in rows], [r["context"] for r in rows]),
                                batch_size=len(rows), verbose=0)
        return [{"prediction": answer} for answer in answers]
    return predict


# ----------------------------------------------------------------------------- inputs
def read_inputs(path: str, kind: str, text_pairs: bool) -> list:
    """The input rows of `path` for a model of `kind` (see the module's docstring)."""
    if not os.path.isfile(path):
        raise ConfigError(f"--input {path!r} does not exist.")
    if kind == QA:
        rows = _qa_rows(path)
    elif kind == TAGGING:
        rows = _word_rows(path)
    else:
        rows = _text_rows(path, text_pairs)
    if not rows:
        raise TaskDataError(f"{path} holds no input.")
    return rows


def _records(path: str):
    """(where, {field: value}) of a JSONL or CSV/TSV file; None for other formats."""
    if path.endswith((".jsonl", ".json")):
        return readers.jsonl_rows(path)
    if path.endswith((".csv", ".tsv")):
        return readers.delimited_rows(path, "\t" if path.endswith(".tsv") else ",")
    return None


def _text_rows(path: str, text_pairs: bool) -> list:
    records = _records(path)
    if records is None:  # plain text: one input per line
        with open(path, encoding="utf-8") as f:
            return [{"text": line.rstrip("\n")} for line in f if line.strip()]
    rows = []
    for where, record in records:
        text = record.get("text")
        if not isinstance(text, str):
            raise TaskDataError(f"{where}: no string field 'text' (have {sorted(record)}).")
        pair = record.get("text_pair")
        if pair not in (None, "") and not text_pairs:
            raise TaskDataError(f"{where}: has a text_pair, but the model was fine-tuned "
                                "on single texts; drop the field.")
        rows.append(record)  # every field is kept in the output (ids, gold labels, ...)
    return rows


def _word_rows(path: str) -> list:
    if path.endswith(".conll"):
        # The words' column only (a tag column, if any, is ignored).
        return [{"words": e.words} for e in readers.read_conll(path, tag_column=0)]
    records = _records(path)
    if records is None:
        with open(path, encoding="utf-8") as f:
            return [{"words": line.split()} for line in f if line.strip()]
    rows = []
    for where, record in records:
        words = record.get("words")
        if words is None and isinstance(record.get("text"), str):
            words = record["text"].split()
        if not (isinstance(words, list) and all(isinstance(w, str) for w in words)):
            raise TaskDataError(f"{where}: give 'words' (a list of strings) or 'text'.")
        rows.append({**record, "words": words})
    return rows


def _qa_rows(path: str) -> list:
    if path.endswith(".json"):
        return [{"id": e.qid, "question": e.question, "context": e.context}
                for e in squad.read_squad(path)]
    records = _records(path)
    if records is None:
        raise TaskDataError(f"{path}: give questions as SQuAD .json or as .jsonl with "
                            "'question' and 'context'.")
    rows = []
    for where, record in records:
        if not all(isinstance(record.get(k), str) for k in ("question", "context")):
            raise TaskDataError(f"{where}: give string fields 'question' and 'context'.")
        rows.append({**record, "id": str(record.get("id", where))})
    return rows


# ----------------------------------------------------------------------------- the command
def predict_file(checkpoint: str, input_path: str, output: str, batch_size: int = 32,
                 trial: Optional[int] = None) -> dict:
    """Predicts every input of `input_path` with the model at `checkpoint` and writes
    `output` (JSONL, a new file, written atomically). Returns {"inputs", "seconds",
    "kind"}."""
    if batch_size < 1:
        raise ConfigError(f"--batch_size must be >= 1; got {batch_size}.")
    files.check_new_file(output)
    predictor = open_predictor(checkpoint, trial)
    rows = read_inputs(input_path, predictor.kind, predictor.text_pairs)
    start = time.perf_counter()
    with files.atomic_file(output) as f, tqdm(total=len(rows), unit="input", file=sys.stderr,
                                              disable=None, desc="Predicting") as bar:
        for begin in range(0, len(rows), batch_size):
            batch = rows[begin:begin + batch_size]
            for row, record in zip(batch, predictor.predict(batch)):
                f.write(json.dumps({**row, **record}, ensure_ascii=False) + "\n")
            bar.update(len(batch))
    return {"inputs": len(rows), "seconds": time.perf_counter() - start,
            "kind": predictor.kind}

