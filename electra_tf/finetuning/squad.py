"""SQuAD 1.1 / 2.0 extractive QA: reading, windowed features (doc stride), span decoding.

Contexts are split on white space into words (as the official BERT/ELECTRA code does); each
word is tokenized into word pieces. A question and a window of the context form one feature
`[CLS] question [SEP] window [SEP]`; windows start every `doc_stride` pieces so long contexts
are covered, and each piece is scored only in the window where it has the most context.
Answers are decoded as the best valid span over all windows of a question, then mapped back
to the context's characters.
"""

import collections
import dataclasses
import json
from typing import Dict, List

import numpy as np

from electra_tf.errors import TaskDataError

# The official recipe's windowing and decoding (`configure_finetuning.py`).
DOC_STRIDE = 128  # pieces between the starts of a context's windows
MAX_QUERY_LENGTH = 64  # question pieces kept
MAX_ANSWER_LENGTH = 30  # longest answer decoded, in pieces
BEAM_SIZE = 20  # starts (and ends per start) kept when decoding
ANSWERABLE_WEIGHT = 0.5  # weight of the no-answer classifier's loss
NO_ANSWER_THRESHOLD = -2.75  # SQuAD 2.0: "" when the no-answer logit exceeds it


@dataclasses.dataclass
class QAExample:
    qid: str
    question: str
    context: str
    words: List[str]
    word_spans: List[tuple]  # (char start, char end) of each word in `context`
    answers: List[str]  # all gold answer texts; [] = unanswerable
    start_word: int = -1  # first answer's word span (training target); -1 = none
    end_word: int = -1


def split_words(context):
    """The white-space separated words of `context` and their (char start, char end)."""
    words, spans, start = [], [], None
    for i, ch in enumerate(context + " "):
        if ch.isspace():
            if start is not None:
                words.append(context[start:i])
                spans.append((start, i))
                start = None
        elif start is None:
            start = i
    return words, spans


def make_example(qid: str, question: str, context: str, answers=(),
                 where: str = "") -> QAExample:
    """A question on `context`; `answers` are (text, char offset) pairs, none for a
    question without an answer. The first answer is the training target; an offset that
    does not hold its text is refused (`where` names the example in the error)."""
    words, spans = split_words(context)
    for text, start in answers:
        if context[start:start + len(text)] != text:
            raise TaskDataError(
                f"{where or qid}: answer {text!r} is not at offset {start} of the "
                f"context (found {context[start:start + len(text)]!r}).")
    example = QAExample(qid, question, context, words, spans, [text for text, _ in answers])
    if answers:
        text, start = answers[0]
        end = start + len(text)
        inside = [i for i, (s, e) in enumerate(spans) if s < end and e > start]
        example.start_word, example.end_word = inside[0], inside[-1]
    return example


def read_squad(path: str) -> List[QAExample]:
    """Reads SQuAD-format JSON; answer offsets that do not match the context are refused."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)["data"]
    except FileNotFoundError:
        raise TaskDataError(f"Data file {path!r} does not exist.")
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise TaskDataError(f"{path}: not SQuAD-format JSON ({e}).")
    examples = []
    for a, article in enumerate(data):
        for p, paragraph in enumerate(article.get("paragraphs", [])):
            for qa in paragraph.get("qas", []):
                answers = [] if qa.get("is_impossible") else qa.get("answers", [])
                examples.append(make_example(
                    qa["id"], qa["question"], paragraph["context"],
                    [(x["text"], x["answer_start"]) for x in answers],
                    f"{path}: data[{a}].paragraphs[{p}], question {qa.get('id')!r}"))
    if not examples:
        raise TaskDataError(f"{path}: no question found.")
    return examples


@dataclasses.dataclass
class QAFeatures:
    """Arrays for the model plus what decoding needs, one row per window."""

    inputs: Dict[str, np.ndarray]
    start_positions: np.ndarray
    end_positions: np.ndarray
    impossible: np.ndarray  # 1.0 when the window's question has no answer (official label)
    example_index: List[int]
    piece_to_word: List[Dict[int, int]]  # sequence position -> context word
    max_context: List[Dict[int, bool]]  # sequence position -> best window for that piece


def create_features(examples, tokenizer, special_ids, max_length=384,
                    doc_stride=DOC_STRIDE, max_query_length=MAX_QUERY_LENGTH) -> QAFeatures:
    """Windows every example's context; targets point at [CLS] (0) when the answer is not
    inside a window or the question has none; `impossible` is the question's (SQuAD 2.0
    unanswerable), whatever the window, as in the official code."""
    # Imported here, not at the top: `FinetuneConfig` takes this module's defaults, and the
    # commands define their flags from it without loading TensorFlow.
    from electra_tf.text.tokenizer import tokenize_to_lists

    question_pieces = tokenize_to_lists(tokenizer, [e.question for e in examples])
    word_pieces = tokenize_to_lists(tokenizer, [w for e in examples for w in e.words])
    cls, sep, pad = (special_ids["cls_token_id"], special_ids["sep_token_id"],
                     special_ids["pad_token_id"])
    rows = collections.defaultdict(list)
    cursor = 0
    for index, example in enumerate(examples):
        query = question_pieces[index][:max_query_length]
        doc, doc_word = [], []  # context pieces and the word each comes from
        first_piece_of_word, last_piece_of_word = [], []
        for w in range(len(example.words)):
            first_piece_of_word.append(len(doc))
            pieces = word_pieces[cursor + w] or [special_ids["unk_token_id"]]
            doc.extend(pieces)
            doc_word.extend([w] * len(pieces))
            last_piece_of_word.append(len(doc) - 1)
        cursor += len(example.words)
        budget = max_length - len(query) - 3
        if budget < 1:
            raise TaskDataError(f"max_length={max_length} leaves no room for the context "
                                f"after question {example.qid!r}; raise --max_seq_length.")
        windows, start = [], 0
        while True:
            length = min(budget, len(doc) - start)
            windows.append((start, length))
            if start + length >= len(doc):
                break
            start += min(length, doc_stride)
        for w_index, (w_start, w_length) in enumerate(windows):
            ids = [cls] + query + [sep]
            offset = len(ids)
            to_word, best = {}, {}
            for i in range(w_length):
                position = w_start + i
                to_word[offset + i] = doc_word[position]
                best[offset + i] = _is_max_context(windows, w_index, position)
            ids += doc[w_start:w_start + w_length] + [sep]
            segment = [0] * offset + [1] * (w_length + 1)
            answer_start = answer_end = 0
            if example.start_word >= 0:
                first = first_piece_of_word[example.start_word]
                last = last_piece_of_word[example.end_word]
                if first >= w_start and last < w_start + w_length:
                    answer_start, answer_end = first - w_start + offset, last - w_start + offset
            padding = max_length - len(ids)
            rows["ids"].append(ids + [pad] * padding)
            rows["mask"].append([1] * len(ids) + [0] * padding)
            rows["segments"].append(segment + [0] * padding)
            rows["start"].append(answer_start)
            rows["end"].append(answer_end)
            rows["impossible"].append(float(not example.answers))
            rows["example"].append(index)
            rows["to_word"].append(to_word)
            rows["best"].append(best)
    return QAFeatures(
        inputs={"input_word_ids": np.asarray(rows["ids"], np.int32),
                "input_mask": np.asarray(rows["mask"], np.int32),
                "input_type_ids": np.asarray(rows["segments"], np.int32)},
        start_positions=np.asarray(rows["start"], np.int32),
        end_positions=np.asarray(rows["end"], np.int32),
        impossible=np.asarray(rows["impossible"], np.float32),
        example_index=rows["example"], piece_to_word=rows["to_word"],
        max_context=rows["best"])


def _is_max_context(windows, current, position):
    """Whether window `current` gives `position` the most context (official rule: the
    minimum of left and right context, plus a small bonus for longer windows)."""
    best_score, best_window = None, None
    for index, (start, length) in enumerate(windows):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_window = score, index
    return best_window == current


def _span_candidates(outputs, row, n_best):
    """(start, end, score) candidates of one window: the beams of joint prediction (start
    and end log-probabilities), else the `n_best` best starts x ends (summed logits)."""
    if "start_top_index" in outputs:
        starts, ends = outputs["start_top_index"][row], outputs["end_top_index"][row]
        start_scores = outputs["start_top_log_probs"][row]
        end_scores = outputs["end_top_log_probs"][row]
        for i, start in enumerate(starts):
            for j, end in enumerate(ends[i]):
                yield int(start), int(end), float(start_scores[i] + end_scores[i, j])
        return
    start_logits, end_logits = outputs["start_logits"][row], outputs["end_logits"][row]
    top_ends = np.argsort(end_logits)[::-1][:n_best]
    for start in np.argsort(start_logits)[::-1][:n_best]:
        for end in top_ends:
            yield int(start), int(end), float(start_logits[start] + end_logits[end])


def decode(examples, features: QAFeatures, outputs: dict, with_null: bool,
           null_threshold: float = NO_ANSWER_THRESHOLD,
           max_answer_length=MAX_ANSWER_LENGTH, n_best=BEAM_SIZE):
    """Answers from the model's outputs on every window, as the official scorer decodes.

    The best valid span over a question's windows (inside the context, start no later
    than end, at most `max_answer_length` pieces, starting in the window that gives its
    start the most context) is its best non-null answer. With `with_null` (SQuAD 2.0) the
    question's null odds are its smallest `no_answer_logit` over the windows, and it is
    answered "" when they exceed `null_threshold`.

    Returns (predictions {qid: text}, best non-null answers {qid: text}, null odds {qid:
    float}, empty without `with_null`).
    """
    by_example = collections.defaultdict(list)
    for row, index in enumerate(features.example_index):
        by_example[index].append(row)
    predictions, best_texts, null_odds = {}, {}, {}
    for index, example in enumerate(examples):
        best_text, best_score, null_score = "", -np.inf, np.inf
        for row in by_example[index]:
            null_score = min(null_score, float(outputs["no_answer_logit"][row]))
            to_word, best = features.piece_to_word[row], features.max_context[row]
            for s, e, score in _span_candidates(outputs, row, n_best):
                if s not in to_word or e not in to_word or e < s:
                    continue
                if e - s + 1 > max_answer_length or not best.get(s, False):
                    continue
                if score > best_score:
                    first, last = to_word[s], to_word[e]
                    best_score = score
                    best_text = example.context[example.word_spans[first][0]:
                                                example.word_spans[last][1]]
        best_texts[example.qid] = best_text
        predictions[example.qid] = best_text
        if with_null:
            null_odds[example.qid] = null_score
            if null_score > null_threshold:
                predictions[example.qid] = ""
    return predictions, best_texts, null_odds
