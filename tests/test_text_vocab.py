import gc
import weakref

import pytest

from electra_tf.text import vocab
from electra_tf.errors import VocabError
from electra_tf.text.tokenizer import _GRAPHS, ElectraTokenizer, tokenize_ragged
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
    graph = _GRAPHS[tokenizer]
    assert list(tokenizer("The American people")) == list(ids)
    assert [list(row) for row in tokenizer(["a", "The American people", ""])][1] == list(ids)
    assert _GRAPHS[tokenizer] is graph
    gone = ElectraTokenizer(vocab_path, lowercase=True)
    assert list(gone("The American people")) == list(ids)
    assert _GRAPHS[gone] is graph
    gone = weakref.ref(gone)
    gc.collect()
    assert gone() is None  # the graph holds no tokenizer
    cased = ElectraTokenizer(vocab_path, lowercase=False)
    assert list(cased("The American people")) != list(ids)
    assert _GRAPHS[cased] is not graph
    # A tokenizer given another vocabulary tokenizes with it, alone.
    relabeled = ElectraTokenizer(vocab_path, lowercase=True)
    assert list(relabeled("The American people")) == list(ids)
    assert _GRAPHS[relabeled] is graph
    tokens = vocab.load_vocab(vocab_path)
    reordered = tokens[:5] + tokens[5:][::-1]
    relabeled.set_vocabulary(reordered)
    assert list(relabeled("The American people")) == [reordered.index(tokens[i]) for i in ids]
    assert list(tokenizer("The American people")) == list(ids)
    monkeypatch.setattr(tensor_utils, "tensor_to_list", refused("A tensor to Python lists"))
    ragged = tokenize_ragged(tokenizer, ["The American people", ""])
    assert isinstance(ragged, tf.RaggedTensor) and ragged.to_list() == [list(ids), []]


def test_functions_traced_around_the_graph_live_as_long_as_it(vocab_path):
    """A preprocessor's eager packing, traced around its tokenizer's graph, is kept for
    the tokenizers of the vocabulary while the graph lives, and keeps neither alive."""
    from electra_tf.models.preprocessor import ElectraPreprocessor
    from electra_tf.text.tokenizer import _AROUND_GRAPHS

    # Settings no other test's tokenizer has, so that no other keeps the graph alive.
    tokenizer = ElectraTokenizer(vocab_path, lowercase=True, strip_accents=False)
    packed = ElectraPreprocessor(tokenizer, sequence_length=8)(["The American people"])
    assert packed["input_mask"].numpy().sum() == 5
    graph = weakref.ref(_GRAPHS[tokenizer])
    assert len(_AROUND_GRAPHS[graph()]) == 1
    del tokenizer, packed
    gc.collect()
    assert graph() is None


def test_traced_calls_run_the_shared_graph_not_tf_texts_ops_again(vocab_path):
    """A function that tokenizes (a `tf.data` map, Keras's symbolic build) calls the graph
    eager calls run instead of tracing tf-text's ops and their ragged checks again (0.4-0.7
    s a trace), and gets the same ids; an export traces the ops."""
    import tensorflow as tf

    from electra_tf.layers.export_tracing import export_tracing

    tokenizer = ElectraTokenizer(vocab_path, lowercase=True)
    texts = ["The American people", "", "a"]
    eager = tokenize_ragged(tokenizer, texts).to_list()
    graph = _GRAPHS[tokenizer]
    function = tf.function(lambda batch: tokenizer(batch))
    traced = function.get_concrete_function(tf.TensorSpec([None], tf.string))
    calls = [op.node_def.attr["f"].func.name for op in traced.graph.get_operations()
             if op.type.endswith("PartitionedCall")]
    assert calls == [graph.name.decode()]
    assert len(traced.graph.get_operations()) < 10  # no tf-text op, no ragged check
    assert traced(tf.constant(texts)).to_list() == eager
    mapped = tf.data.Dataset.from_tensor_slices(texts).batch(2).map(tokenizer)
    assert [row for batch in mapped for row in batch.to_list()] == eager
    single = tf.function(lambda text: tokenizer(text))(tf.constant(texts[0]))
    assert single.numpy().tolist() == eager[0]
    # Exports trace tf-text's ops into their own graph, as TF1 sessions run them faster.
    with export_tracing():
        exported = tf.function(lambda batch: tokenizer(batch)).get_concrete_function(
            tf.TensorSpec([None], tf.string))
    op_types = {op.type for op in exported.graph.get_operations()}
    assert "FastWordpieceTokenizeWithOffsets" in op_types and not any(
        op_type.endswith("PartitionedCall") for op_type in op_types), op_types
    assert exported(tf.constant(texts)).to_list() == eager


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
