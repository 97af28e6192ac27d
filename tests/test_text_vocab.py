import gc
import weakref

import pytest

from electra_tf.text import vocab
from electra_tf.errors import VocabError
from electra_tf.text.tokenizer import _EAGER_GRAPHS, ElectraTokenizer, tokenize_ragged
from conftest import DEMO


def test_learned_vocab_has_special_tokens_first_and_tokenizes_in_graph(vocab_path):
    tokens = vocab.load_vocab(vocab_path)
    assert tuple(tokens[:5]) == vocab.SPECIAL_TOKENS
    assert 500 < len(tokens) <= 1500
    assert vocab.special_token_ids(tokens) == {
        "pad_token_id": 0, "unk_token_id": 1, "cls_token_id": 2, "sep_token_id": 3,
        "mask_token_id": 4}
    tokenizer = ElectraTokenizer(vocab_path, lowercase=True)
    ids = tokenizer(["The American people"])[0]
    assert 1 not in ids  # common words are in the vocab, not [UNK]
    assert tokenizer.detokenize([ids]) == ["the american people"]


def test_eager_calls_run_tf_text_and_keep_tensors(vocab_path, monkeypatch):
    """keras-hub tokenizes eager calls in pure Python unless told not to (the same ids, 10x
    slower), and hands eager outputs back as Python lists: data building and fine-tuning
    features tokenize eagerly, through tf-text and into tensors."""
    import keras_hub
    import tensorflow as tf
    from keras_hub.src.utils import tensor_utils

    def refused(what):
        def call(*args, **kwargs):
            raise AssertionError(f"{what} ran")
        return call

    for name in ("_tokenize_python", "_detokenize_python"):
        monkeypatch.setattr(keras_hub.tokenizers.WordPieceTokenizer, name,
                            refused("keras-hub's pure-Python WordPiece"))
    tokenizer = ElectraTokenizer(vocab_path, lowercase=True)
    ids = tokenizer(["The American people"])[0]
    assert tokenizer.detokenize([ids]) == ["the american people"]
    # Eager calls of any batch size, or of one text, run one graph, traced once for the
    # tokenizers of one vocabulary and settings.
    graph = _EAGER_GRAPHS[tokenizer]
    assert list(tokenizer("The American people")) == list(ids)
    assert [list(row) for row in tokenizer(["a", "The American people", ""])][1] == list(ids)
    assert _EAGER_GRAPHS[tokenizer] is graph
    gone = ElectraTokenizer(vocab_path, lowercase=True)
    assert list(gone("The American people")) == list(ids)
    assert _EAGER_GRAPHS[gone] is graph
    gone = weakref.ref(gone)
    gc.collect()
    assert gone() is None  # the graph holds no tokenizer
    cased = ElectraTokenizer(vocab_path, lowercase=False)
    assert list(cased("The American people")) != list(ids)
    assert _EAGER_GRAPHS[cased] is not graph
    # A tokenizer given another vocabulary tokenizes with it, alone.
    relabeled = ElectraTokenizer(vocab_path, lowercase=True)
    assert list(relabeled("The American people")) == list(ids)
    assert _EAGER_GRAPHS[relabeled] is graph
    tokens = vocab.load_vocab(vocab_path)
    reordered = tokens[:5] + tokens[5:][::-1]
    relabeled.set_vocabulary(reordered)
    assert list(relabeled("The American people")) == [reordered.index(tokens[i]) for i in ids]
    assert list(tokenizer("The American people")) == list(ids)
    monkeypatch.setattr(tensor_utils, "tensor_to_list", refused("A tensor to Python lists"))
    ragged = tokenize_ragged(tokenizer, ["The American people", ""])
    assert isinstance(ragged, tf.RaggedTensor) and ragged.to_list() == [list(ids), []]


def test_korean_vocab_keeps_hangul_syllables(tmp_path):
    korean = str(DEMO / "korean" / "constitution.txt")
    assert vocab.contains_hangul([korean])
    tokens = vocab.learn_vocab([korean], 2000, lower_case=False, strip_accents=False)
    assert "대한민국" in tokens or "대한" in tokens
    tokenizer = ElectraTokenizer(tokens, lowercase=False)
    ids = tokenizer(["대한민국은 민주공화국이다."])[0]
    unk = tokens.index("[UNK]")
    assert ids and unk not in ids
    assert tokenizer.detokenize([ids])[0].replace(" ", "") == "대한민국은민주공화국이다."


def test_vocab_without_special_tokens_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\nhello\n")
    with pytest.raises(VocabError, match=r"\[CLS\], \[SEP\], \[MASK\]"):
        vocab.load_vocab(str(path))


def test_vocab_with_pad_not_first_is_refused(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n")
    with pytest.raises(VocabError, match="id 0"):
        vocab.load_vocab(str(path))
