import json

import numpy as np
import pytest

from electra_tf.finetuning import squad
from electra_tf.errors import TaskDataError
from electra_tf.text.tokenizer import make_tokenizer

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
    tokenizer = make_tokenizer(VOCAB, lower_case=True, strip_accents=True)
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
            assert features.answerable[row] == 1.0
        else:
            assert features.end_positions[row] == 0 and features.answerable[row] == 0.0
    # Every context word is scored in some window ("max context" for its pieces there).
    best_words = {features.piece_to_word[row][position]
                  for row, best in enumerate(features.max_context)
                  for position, is_best in best.items() if is_best}
    assert best_words == set(range(len(example.words)))


def test_decoding_picks_the_best_valid_span_and_handles_no_answer(tmp_path):
    qas = [seine_question(), {"id": "q2", "question": "What is big?", "answers": [],
                              "is_impossible": True}]
    examples = squad.read_squad(squad_file(tmp_path, qas))
    tokenizer = make_tokenizer(VOCAB, lower_case=True, strip_accents=True)
    features = squad.create_features(examples, tokenizer, SPECIAL, max_length=24,
                                     doc_stride=8, max_query_length=10)
    n, length = features.inputs["input_word_ids"].shape
    start = np.full((n, length), -5.0)
    end = np.full((n, length), -5.0)
    for row in range(n):  # put the mass on the gold span where there is one
        s, e = features.start_positions[row], features.end_positions[row]
        start[row, s] += 10.0
        end[row, e] += 10.0
    answerable = np.where(features.answerable > 0, 5.0, -5.0)
    # q2's windows have no gold span: make its answerability logit clearly negative.
    predictions, null_odds = squad.decode(examples, features, start, end, answerable,
                                          null_threshold=0.0)
    assert predictions["q1"] == "Seine"
    assert predictions["q2"] == ""
    assert null_odds["q2"] > 0 > null_odds["q1"]
    # SQuAD 1.1 decoding never answers "".
    predictions, _ = squad.decode(examples, features, start, end, None, null_threshold=None)
    assert predictions["q2"] != ""
