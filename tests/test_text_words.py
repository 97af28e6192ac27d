"""`split_words` and the tokenizer that splits with it against keras-hub's pre-tokenization,
which they must match word for word and id for id, on text of every kind of character."""

import random

import keras_hub
import pytest
import tensorflow as tf
from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

from electra_tf.text import vocab
from electra_tf.text.tokenizer import _GRAPHS, ElectraTokenizer
from electra_tf.text.words import split_words

# Code points of every kind the split treats apart: ASCII, Latin-1 and Latin letters,
# combining marks, Greek (U+037E decomposes to ";"), general punctuation and spaces, CJK
# symbols, ideographs and compatibility ideographs, Hangul, control characters (NUL among
# them), half- and full-width forms, and a few more (U+1FEF decomposes to "`").
CODE_POINTS = [range(0x20, 0x7F), range(0xA0, 0x250), range(0x300, 0x370), range(0x370, 0x400),
               range(0x2000, 0x2070), range(0x3000, 0x3040), range(0x4E00, 0x4E40),
               range(0xF900, 0xF920), range(0xAC00, 0xAC40), range(0x0, 0x20),
               range(0xFE00, 0xFF70), [0x1FEF, 0x85, 0xAD, 0xFEFF, 0x20000, 0x2F800, 0x1F600]]


def mixed_texts(seed: int, count: int) -> list:
    """Texts of random characters from `CODE_POINTS`, and byte strings that are not all
    UTF-8."""
    rng = random.Random(seed)
    texts = ["".join(chr(rng.choice(rng.choice(CODE_POINTS))) for _ in range(rng.randint(0, 40)))
             .encode("utf-8") for _ in range(count)]
    texts += [bytes(rng.choice([rng.randrange(256), 0, 32, 46, 97, 0xC3, 0xA9])
                    for _ in range(rng.randint(0, 30))) for _ in range(count // 2)]
    return texts


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("strip_accents", [True, False])
@pytest.mark.parametrize("split_on_cjk", [True, False])
def test_split_words_gives_keras_hubs_words(lowercase, strip_accents, split_on_cjk):
    texts = tf.constant(mixed_texts(0, 1200))
    expected = pretokenize(texts, lowercase, strip_accents, True, split_on_cjk)
    assert split_words(texts, lowercase, strip_accents, split_on_cjk).to_list() == (
        expected.to_list())
    # A scalar, texts in rows of a matrix, and ragged rows.
    for shaped in (texts[3], tf.reshape(texts[:20], [4, 5]),
                   tf.RaggedTensor.from_row_lengths(texts[:20], [3, 0, 17])):
        assert split_words(shaped, lowercase, strip_accents, split_on_cjk).to_list() == (
            pretokenize(shaped, lowercase, strip_accents, True, split_on_cjk).to_list())


def test_the_tokenizer_gives_keras_hubs_ids_without_its_regex_split(vocab_path):
    """tf-text's `regex_split`, which keras-hub splits with, ran a regex search per
    delimiter (`electra_tf.text.words`); the tokenizer's graph splits without it, into the
    same ids, dense and single texts too. Special tokens matched in the strings take
    keras-hub's split."""
    texts = tf.constant(mixed_texts(1, 600) + [b"The American people [SEP] [MASK]."])
    tokens = vocab.load_vocab(vocab_path)
    for options in ({}, {"sequence_length": 12}, {"special_tokens_in_strings": True}):
        options["special_tokens"] = list(vocab.SPECIAL_TOKENS)
        ours = ElectraTokenizer(tokens, lowercase=True, **options)
        theirs = keras_hub.tokenizers.WordPieceTokenizer(
            tokens, lowercase=True, strip_accents=True, oov_token="[UNK]", dtype="int32",
            _allow_python_workflow=False, **options)
        assert tf.reduce_all(ours(texts) == theirs(texts)), options
        assert tf.reduce_all(ours(texts[-1]) == theirs(texts[-1])), options
        op_types = {node.op for function in _GRAPHS[ours].graph.as_graph_def().library.function
                    for node in function.node_def}
        op_types |= {op.type for op in _GRAPHS[ours].graph.get_operations()}
        split_by_keras_hub = options.get("special_tokens_in_strings", False)
        assert ("RegexSplitWithOffsets" in op_types) == split_by_keras_hub, op_types
        assert ("StringSplitV2" in op_types) != split_by_keras_hub, op_types
