"""Task metrics with the official definitions (GLUE, CoNLL span F1, SQuAD EM/F1)."""

import collections
import re
import string

import numpy as np


def accuracy(labels, predictions) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return float(np.mean(labels == predictions)) if len(labels) else 0.0


def binary_f1(labels, predictions, positive=1) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = np.sum((predictions == positive) & (labels == positive))
    fp = np.sum((predictions == positive) & (labels != positive))
    fn = np.sum((predictions != positive) & (labels == positive))
    return float(2 * tp / (2 * tp + fp + fn)) if tp else 0.0


def matthews_corrcoef(labels, predictions) -> float:
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp = float(np.sum((predictions == 1) & (labels == 1)))
    tn = float(np.sum((predictions == 0) & (labels == 0)))
    fp = float(np.sum((predictions == 1) & (labels == 0)))
    fn = float(np.sum((predictions == 0) & (labels == 1)))
    denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson(x, y) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    if x.std() == 0 or y.std() == 0:
        return 0.0
    return float(np.corrcoef(x, y)[0, 1])


def _ranks(values):
    """Average ranks (ties share the mean rank), as scipy.stats.rankdata."""
    values = np.asarray(values, np.float64)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            ranks[order[start:end]] = (start + end - 1) / 2.0 + 1
            start = end
    return ranks


def spearman(x, y) -> float:
    return pearson(_ranks(x), _ranks(y))


# ----------------------------------------------------------------------------- tagging
def iob_spans(tags):
    """Set of (type, start, end) entity spans from IOB1/IOB2 tags (CoNLL eval rules:
    an I- tag after O or of another type starts a new span)."""
    spans, start, kind = set(), None, None
    for i, tag in enumerate(list(tags) + ["O"]):
        prefix, _, tag_kind = tag.partition("-") if tag != "O" else ("O", "", None)
        if start is not None and (prefix in ("O", "B", "S") or tag_kind != kind):
            spans.add((kind, start, i - 1))
            start, kind = None, None
        if prefix in ("B", "S") or (prefix == "I" and start is None):
            start, kind = i, tag_kind
        if prefix in ("E", "S") and start is not None:
            spans.add((kind, start, i))
            start, kind = None, None
    return spans


def span_f1(gold_sequences, predicted_sequences) -> dict:
    """Micro precision/recall/F1 over entity spans, as conlleval computes them."""
    tp = fp = fn = 0
    for gold, predicted in zip(gold_sequences, predicted_sequences):
        gold_spans, predicted_spans = iob_spans(gold), iob_spans(predicted)
        tp += len(gold_spans & predicted_spans)
        fp += len(predicted_spans - gold_spans)
        fn += len(gold_spans - predicted_spans)
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def token_accuracy(gold_sequences, predicted_sequences) -> float:
    pairs = [(g, p) for gs, ps in zip(gold_sequences, predicted_sequences)
             for g, p in zip(gs, ps)]
    return sum(g == p for g, p in pairs) / len(pairs) if pairs else 0.0


# ----------------------------------------------------------------------------- SQuAD
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and English articles, fold white space (official)."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, truth: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(truth))


def token_f1(prediction: str, truth: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(truth).split()
    if not predicted or not gold:  # SQuAD 2.0: no-answer matches only no-answer
        return float(predicted == gold)
    common = collections.Counter(predicted) & collections.Counter(gold)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(predicted), overlap / len(gold)
    return 2 * precision * recall / (precision + recall)


def squad_scores(gold_answers: dict, predictions: dict) -> dict:
    """gold_answers: {qid: [answer texts] ([] = unanswerable)}; predictions: {qid: text}.

    Returns exact/f1 (percent) overall and, when both kinds exist, HasAns_/NoAns_ splits.
    """
    per_question = {}
    for qid, answers in gold_answers.items():
        answers = answers or [""]
        predicted = predictions.get(qid, "")
        per_question[qid] = (max(exact_match(predicted, a) for a in answers),
                             max(token_f1(predicted, a) for a in answers),
                             answers != [""])
    def summary(items):
        n = len(items)
        return {"exact": 100.0 * sum(i[0] for i in items) / n if n else 0.0,
                "f1": 100.0 * sum(i[1] for i in items) / n if n else 0.0, "total": n}
    scores = summary(list(per_question.values()))
    has = [v for v in per_question.values() if v[2]]
    no = [v for v in per_question.values() if not v[2]]
    if has and no:
        for name, items in (("HasAns", has), ("NoAns", no)):
            scores.update({f"{name}_{k}": v for k, v in summary(items).items()})
    return scores


def best_no_answer_threshold(gold_answers: dict, best_texts: dict, null_odds: dict) -> dict:
    """SQuAD 2.0: the null-odds threshold that would have scored best, as the official
    evaluation script finds it (`find_all_best_thresh`): best_exact / best_exact_thresh /
    best_f1 / best_f1_thresh (percent). `best_texts` are the best non-null answers."""
    scores = {}
    for metric, name in ((exact_match, "exact"), (token_f1, "f1")):
        has_answer = {qid: bool(answers) for qid, answers in gold_answers.items()}
        # Answering "" everywhere is right on exactly the unanswerable questions.
        current = best = sum(not has for has in has_answer.values())
        threshold = 0.0
        for qid in sorted(gold_answers, key=lambda q: null_odds[q]):
            if has_answer[qid]:
                current += max(metric(best_texts[qid], a) for a in gold_answers[qid])
            elif best_texts[qid]:
                current -= 1
            if current > best:
                best, threshold = current, null_odds[qid]
        scores[f"best_{name}"] = 100.0 * best / max(1, len(gold_answers))
        scores[f"best_{name}_thresh"] = float(threshold)
    return scores
