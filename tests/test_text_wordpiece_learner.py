"""Our WordPiece learner against tf-text's and keras-hub's, which it must match token for
token."""

import random

import keras_hub
import pytest
import tensorflow as tf
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as tf_text

from electra_tf.text import corpus, vocab, wordpiece_learner
from conftest import DEMO

RESERVED = list(vocab.SPECIAL_TOKENS)


def zipf_words(seed: int, alphabet: str, count: int) -> dict:
    """Words sharing many beginnings and endings, counts from 1 to thousands with ties."""
    rng = random.Random(seed)
    stems = ["".join(rng.choices(alphabet, k=rng.randint(1, 6))) for _ in range(count // 4)]
    endings = ["", "", "s", "ing", "ed", "tion", "é"]
    words = {}
    for rank in range(1, count + 1):
        word = rng.choice(stems) + rng.choice(endings) + rng.choice(["", rng.choice(stems)])
        words[word] = words.get(word, 0) + 5_000 // rank
    # Left out by both learners: a reserved token and a word over 50 characters.
    words["[MASK]"] = 500
    words["x" * 60] = 500
    return words


@pytest.mark.parametrize("seed, vocab_size", [(0, 60), (1, 150), (2, 300), (3, 2000)])
def test_learns_tf_texts_vocab_token_for_token(seed, vocab_size):
    words = zipf_words(seed, "abcdeéfst", 800)
    expected = tf_text.learn(words, vocab_size, RESERVED, include_joiner_token=True,
                             joiner="##")
    assert wordpiece_learner.learn(words, vocab_size, RESERVED) == expected
    assert "[MASK]" in expected and "x" * 60 not in expected


def test_runs_the_later_iterations_only_where_the_first_leaves_enough_pieces(monkeypatch):
    """A threshold whose first iteration gives a vocab too small for the slack is passed
    over without cutting the words; tf-text's search tries it and moves the same way."""
    words = zipf_words(3, "abcdeéfst", 800)
    tried, cut = [], set()
    learn_with_thresh, cut_by = tf_text.learn_with_thresh, wordpiece_learner._PieceCounter.cut_by

    def trying(word_counts, threshold, params):
        tried.append(threshold)
        return learn_with_thresh(word_counts, threshold, params)

    def cutting(counter, tokens, threshold):
        cut.add(threshold)
        return cut_by(counter, tokens, threshold)

    monkeypatch.setattr(tf_text, "learn_with_thresh", trying)
    monkeypatch.setattr(wordpiece_learner._PieceCounter, "cut_by", cutting)
    expected = tf_text.learn(words, 2000, RESERVED, include_joiner_token=True, joiner="##")
    assert wordpiece_learner.learn(words, 2000, RESERVED) == expected
    assert tried[-1] in cut and cut < set(tried) and len(cut) <= len(tried) // 2


def test_learn_vocab_is_keras_hubs_vocab(tmp_path):
    """The whole command's learning: pre-tokenization, the cut to the size asked."""
    # A third of a speech (keras-hub's learner is the slow side) and the Korean sample.
    text = (DEMO / "corpus" / "sotu_2019_donald_j_trump_r.txt").read_text(encoding="utf-8")
    speech = tmp_path / "speech.txt"
    speech.write_text(text[:text.index(" ", len(text) // 3)], encoding="utf-8")
    korean = DEMO / "korean" / "constitution.txt"
    for path, size, lower_case in ((speech, 300, True), (korean, 700, False)):
        lines = [line for line in corpus.read_lines(str(path), corpus.DecodeStats())
                 if line.strip()]
        expected = keras_hub.tokenizers.compute_word_piece_vocabulary(
            tf.data.Dataset.from_tensor_slices(lines).batch(64), size,
            lowercase=lower_case, strip_accents=lower_case, reserved_tokens=RESERVED)
        learned = vocab.learn_vocab([str(path)], size, lower_case, lower_case)
        assert learned == expected and len(learned) <= size


@pytest.mark.parametrize("text", ["  \n\t\n", "x" * 60 + "\n"],
                         ids=["blank", "only-words-over-50-characters"])
def test_a_corpus_without_pieces_is_refused_with_a_reason(tmp_path, text):
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    with pytest.raises(vocab.VocabError, match="no word pieces"):
        vocab.learn_vocab([str(path)], 100, True, True)


def test_learn_vocab_splits_the_tokenizers_words_without_autotuning(tmp_path, monkeypatch):
    """The words are split as the tokenizer splits them (`split_words`), in a pipeline
    without `tf.data`'s autotuning (`tf_runtime.without_autotuning`: counting a 12 MB
    corpus's words took 2.6 s instead of 1.3 in one call of three with it)."""
    from electra_tf.text import words

    seen = {}
    count_words, split_words = tf_text.count_words, words.split_words

    def counting(dataset):
        seen["autotuning"] = dataset.options().autotune.enabled
        return count_words(dataset)

    def splitting(*args):
        seen["split_words"] = True
        return split_words(*args)

    monkeypatch.setattr(tf_text, "count_words", counting)
    monkeypatch.setattr(words, "split_words", splitting)
    path = tmp_path / "corpus.txt"
    path.write_text("the cat sat on the mat\n" * 20)
    assert "cat" in vocab.learn_vocab([str(path)], 100, True, True)
    assert seen == {"autotuning": False, "split_words": True}
