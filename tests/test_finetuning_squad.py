import json

import numpy as np
import pytest

from electra_tf.finetuning import squad
from electra_tf.errors import TaskDataError
from electra_tf.text.tokenizer import ElectraTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "capital", "of", "france",
         "is", "paris", "what", "?", ".", "a", "city", "river", "seine", "flows", "through",
         "which", "it", "##s", "big", "old"]
SPECIAL = {"pad_token_id": 0, "unk_token_id": 1, "cls_token_id": 2, "sep_token_id": 3,
           "mask_token_id": 4}
LONG_CONTEXT = ("The capital of France is Paris. " + "It is a big old city. " * 6 +
                "The river Seine flows through Paris.")


def squad_file(tmp_path, qas, context=LONG_CONTEXT, name="squad.json"):
    path = tmp_path / name
    path.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": qas}]}]}))
    return str(path)


def seine_question():
    start = LONG_CONTEXT.index("Seine")
    return {"id": "q1", "question": "Which river flows through Paris?",
            "answers": [{"text": "Seine", "answer_start": start}]}


def test_reader_maps_answers_to_words_and_refuses_bad_offsets(tmp_path):
    (example,) = squad.read_squad(squad_file(tmp_path, [seine_question()]))
    assert example.words[example.start_word] == "Seine"
    bad = dict(seine_question(), answers=[{"text": "Seine", "answer_start": 3}])
    with pytest.raises(TaskDataError, match="'q1'.*not at offset 3"):
        squad.read_squad(squad_file(tmp_path, [bad]))


def test_long_context_is_windowed_with_stride_and_targets_follow_the_answer(tmp_path):
    (example,) = squad.read_squad(squad_file(tmp_path, [seine_question()]))
    tokenizer = ElectraTokenizer(VOCAB, lowercase=True)
    features = squad.create_features([example], tokenizer, SPECIAL, max_length=24,
                                     doc_stride=8, max_query_length=10)
    assert len(features.example_index) > 3  # the context does not fit one window
    ids = features.inputs["input_word_ids"]
    hits = [row for row in range(len(ids)) if features.start_positions[row] > 0]
    assert hits, "some window must contain the answer"
    for row in range(len(ids)):
        start = features.start_positions[row]
        if start:
            assert ids[row, start] == VOCAB.index("seine")
        else:
            assert features.end_positions[row] == 0
    # "No answer" is the question's, whatever the window (the official label).
    assert not features.impossible.any()
    # Every context word is scored in some window ("max context" for its pieces there).
    best_words = {features.piece_to_word[row][position]
                  for row, best in enumerate(features.max_context)
                  for position, is_best in best.items() if is_best}
    assert best_words == set(range(len(example.words)))


def test_decoding_picks_the_best_valid_span_and_handles_no_answer(tmp_path):
    qas = [seine_question(), {"id": "q2", "question": "What is big?", "answers": [],
                              "is_impossible": True}]
    examples = squad.read_squad(squad_file(tmp_path, qas))
    tokenizer = ElectraTokenizer(VOCAB, lowercase=True)
    features = squad.create_features(examples, tokenizer, SPECIAL, max_length=24,
                                     doc_stride=8, max_query_length=10)
    assert features.impossible.tolist() == [float(features.example_index[row] == 1)
                                            for row in range(len(features.impossible))]
    n, length = features.inputs["input_word_ids"].shape
    start = np.full((n, length), -5.0)
    end = np.full((n, length), -5.0)
    for row in range(n):  # put the mass on the gold span where there is one
        s, e = features.start_positions[row], features.end_positions[row]
        start[row, s] += 10.0
        end[row, e] += 10.0
        if features.example_index[row] == 1:  # q2: something to answer with anyway
            start[row, 14] += 4.0
            end[row, 15] += 4.0
    no_answer = np.where(features.impossible > 0, 3.0, -4.0)
    no_answer[features.example_index.index(1)] = 1.0  # the question's minimum counts
    independent = {"start_logits": start, "end_logits": end, "no_answer_logit": no_answer}
    predictions, best, null_odds = squad.decode(examples, features, independent, True,
                                                null_threshold=-2.75)
    assert predictions["q1"] == best["q1"] == "Seine"
    assert predictions["q2"] == "" and best["q2"] != ""
    assert null_odds == {"q1": -4.0, "q2": 1.0}
    assert squad.decode(examples, features, independent, True, null_threshold=2.0)[0][
        "q2"] == best["q2"]
    # SQuAD 1.1 decoding never answers "" and has no null odds.
    predictions, _, null_odds = squad.decode(examples, features, independent, False)
    assert predictions["q2"] != "" and null_odds == {}

    # Joint prediction: beams of starts, and of ends for each start, with log-probabilities.
    beam = 2
    log_softmax = start - np.log(np.exp(start).sum(-1, keepdims=True))
    start_top = np.argsort(-log_softmax, -1)[:, :beam]
    end_top = np.argsort(-end, -1)[:, None, :beam].repeat(beam, 1)
    joint = {"start_top_index": start_top,
             "start_top_log_probs": np.take_along_axis(log_softmax, start_top, -1),
             "end_top_index": end_top,
             "end_top_log_probs": np.take_along_axis(end[:, None], end_top, -1),
             "no_answer_logit": no_answer}
    predictions, best, _ = squad.decode(examples, features, joint, True, -2.75)
    assert predictions == {"q1": "Seine", "q2": ""}


def test_best_no_answer_threshold_is_the_official_sweep():
    from electra_tf.finetuning.metrics import best_no_answer_threshold

    gold = {"a": ["Paris"], "b": [], "c": ["Seine"]}
    best_texts = {"a": "Paris", "b": "a city", "c": "Loire"}
    # Sorted by null odds: a (-3) right, c (-1) wrong, b (2) unanswerable. Answering a
    # only (threshold -3) scores a + b = 2 of 3.
    scores = best_no_answer_threshold(gold, best_texts, {"a": -3.0, "b": 2.0, "c": -1.0})
    assert scores["best_exact"] == pytest.approx(200 / 3)
    assert scores["best_exact_thresh"] == -3.0
