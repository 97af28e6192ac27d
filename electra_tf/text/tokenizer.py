"""The in-graph WordPiece tokenizer used everywhere: data building, fine-tuning, export.

A thin factory over keras-hub's `WordPieceTokenizer` (tf-text ops, BERT pre-tokenization),
so the same ops run in `tf.data`, in Python and inside exported SavedModels.
"""

import keras_hub
import tensorflow as tf


def make_tokenizer(vocab, lower_case: bool, strip_accents: bool, sequence_length=None):
    """Returns a `keras_hub.tokenizers.WordPieceTokenizer`.

    Args:
        vocab: path to a vocab file or a list of tokens.
        lower_case: lower-case the text (uncased models).
        strip_accents: NFD-normalize and drop combining marks (BERT's uncased behaviour;
            turn off for Korean, whose syllables it would decompose into jamo).
        sequence_length: pad/truncate to this length; None gives ragged ids.

    Calling it on a string tensor of shape [batch] returns int32 ids, ragged [batch, None].
    """
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=vocab,
        sequence_length=sequence_length,
        lowercase=lower_case,
        strip_accents=strip_accents,
        oov_token="[UNK]",
        dtype="int32",
    )


def tokenize_ragged(tokenizer, texts) -> tf.RaggedTensor:
    """Token ids of each text (a list, or a string tensor [batch]), int32 ragged
    [len(texts), (pieces)], however keras-hub returns them for this input (Python lists
    for some eager inputs)."""
    ids = tokenizer(texts if isinstance(texts, tf.Tensor) else tf.constant(list(texts),
                                                                            tf.string))
    if isinstance(ids, tf.RaggedTensor):
        return ids
    return tf.ragged.constant([list(row) for row in ids], dtype=tf.int32, ragged_rank=1)


def tokenize_to_lists(tokenizer, texts) -> list:
    """Token ids of each text as a Python list (`[]` for no texts).

    keras-hub returns Python lists for some eager inputs and a RaggedTensor for others;
    callers that pack or window ids in Python get one form here.
    """
    texts = list(texts)
    if not texts:
        return []
    ids = tokenizer(tf.constant(texts, tf.string))
    return [list(x) for x in (ids if isinstance(ids, list) else ids.to_list())]
