"""Packing tokenized text into the encoder's inputs, in graph ops (eager or inside
exported SavedModels): fine-tuning, its serving signatures and the TF Hub preprocessor use
the same functions.
"""

import functools

import tensorflow as tf

from electra_tf import traced

# How a pair too long for the sequence is cut: "longest_first" removes pieces from the
# longer segment (the second on ties), as BERT and the official ELECTRA fine-tuning code
# do; "round_robin" from each in turn, as TF Hub's BERT preprocessors do. For one or two
# segments both keep the same pieces (every pair of lengths: tests/test_text_packing.py),
# so one computation serves both.
TRUNCATIONS = ("longest_first", "round_robin")
# The raw-string inputs of serving signatures, [N] each: dense, so TF Serving's REST and
# gRPC APIs can carry them.
TEXT = tf.TensorSpec([None], tf.string, name="text")
TEXT_PAIR = tf.TensorSpec([None], tf.string, name="text_pair")


def traced_when_eager(function):
    """`function(tensors, *python_values)` as is inside graphs; called eagerly, run as a
    graph traced once per set of Python values (for any batch size and lengths): run one
    by one from Python, packing's ops take ~2.3 ms a call (~4.5 ms a pair, ~7 ms for
    words), as one graph ~0.4 ms, against ~14 ms for ELECTRA-Small's whole `predict` on
    one text."""
    graph = traced.function(function, reduce_retracing=True)
    eager = traced.concrete_calls(graph, _any_shape)

    @functools.wraps(function)
    def run(tensors, *args, **kwargs):
        if not tf.executing_eagerly():
            return function(tensors, *args, **kwargs)
        return eager(tensors, *args, **kwargs)

    run.traced = graph
    return run


def _any_shape(tensor):
    """The spec of `tensor`'s kind and rank with every dimension unknown."""
    if isinstance(tensor, tf.RaggedTensor):
        return tf.RaggedTensorSpec([None] * tensor.shape.rank, tensor.dtype,
                                   tensor.ragged_rank, tensor.row_splits.dtype)
    return tf.TensorSpec([None] * tensor.shape.rank, tensor.dtype)


@traced_when_eager
def pack_segments(segments, seq_length, special_ids: dict,
                  truncation: str = "longest_first") -> dict:
    """One or two ragged int segments [batch, (pieces)] -> `[CLS] a [SEP] (b [SEP])`.

    Truncates to `seq_length` (see TRUNCATIONS: `truncation` names either) and returns
    `input_word_ids`, `input_mask`, `input_type_ids`, int32 [batch, seq_length].
    """
    del truncation  # both cut alike (TRUNCATIONS)
    lengths = [segment.row_lengths() for segment in segments]
    budget = tf.cast(seq_length - len(segments) - 1, lengths[0].dtype)
    if len(segments) == 1:
        kept = [tf.minimum(lengths[0], budget)]
    else:  # the first keeps half the budget (rounded up) unless the second needs less
        first = tf.minimum(lengths[0], tf.maximum(budget - lengths[1], (budget + 1) // 2))
        kept = [first, tf.minimum(lengths[1], budget - first)]
    return _place_segments([(segment.values, segment.row_splits[:-1], keep)
                            for segment, keep in zip(segments, kept)],
                           seq_length, special_ids)


def _place_segments(segments, seq_length, special_ids: dict) -> dict:
    """`[CLS] a [SEP] (b [SEP])` and padding, int32 [batch, seq_length] each, from segments
    given as (values, each row's first index in them, each row's pieces to take).

    Each output position picks its piece by index, rather than through tf-text's
    `combine_segments` and `pad_model_inputs`, which build ~385 graph ops for one segment
    where this builds ~100: every serving request runs them, and run one by one from
    Python they took ~9 ms a call (~40 ms a pair; this: ~2.3 / ~4.5 ms).
    """
    first_values, first_row_starts, first_kept = segments[0]
    index_dtype, dtype = first_row_starts.dtype, first_values.dtype
    positions = tf.range(tf.cast(seq_length, index_dtype), dtype=index_dtype)[None]
    token_ids = tf.where(positions == 0, tf.constant(special_ids["cls_token_id"], dtype),
                         tf.constant(special_ids["pad_token_id"], dtype))
    start = tf.ones_like(first_kept)[:, None]  # each segment's first position in the row
    for values, row_starts, keep in segments:
        offset = positions - start  # the piece of the segment at each position
        inside = (offset >= 0) & (offset < keep[:, None])
        # One value more, so that the index is valid in rows without pieces.
        values = tf.concat([values, tf.zeros([1], dtype)], 0)
        index = tf.minimum(row_starts[:, None] + tf.maximum(offset, 0),
                           tf.size(values, out_type=index_dtype) - 1)
        end = start + keep[:, None]
        token_ids = tf.where(inside, tf.gather(values, index), tf.where(
            positions == end, tf.constant(special_ids["sep_token_id"], dtype), token_ids))
        start = end + 1
    mask = positions < start
    second = (positions >= first_kept[:, None] + 2) & mask  # empty for one segment
    return {"input_word_ids": tf.cast(token_ids, tf.int32),
            "input_mask": tf.cast(mask, tf.int32),
            "input_type_ids": tf.cast(second, tf.int32)}


@traced_when_eager
def pack_words(word_pieces: tf.RaggedTensor, seq_length: int, special_ids: dict):
    """Word-split sentences -> encoder inputs and each word's first-piece position.

    `word_pieces`: int [batch, (words), (pieces)]. Like `features.Encoder.encode_words`
    (what tagging trains on): a word with no piece becomes `[UNK]`, and a sentence keeps
    only the words whose pieces all fit, the rest being cut.

    Returns (inputs: dict of int32 [batch, seq_length], word_starts: int32 [batch,
    max_words], -1 for cut words and padding). By index as `_place_segments` (with ragged
    masks and concatenations: ~600 graph ops, ~16 ms a call eagerly).
    """
    words = word_pieces.values  # [total words, (pieces)]
    index_dtype, dtype = words.row_splits.dtype, words.dtype
    has_pieces = words.row_lengths() > 0
    counts = tf.where(has_pieces, words.row_lengths(), 1)  # [UNK] for a word without
    ends = tf.cumsum(counts)
    # Every sentence's pieces, [UNK]s included, one after another.
    piece = tf.range(tf.reduce_sum(counts), dtype=index_dtype)
    word = tf.searchsorted(ends, piece, side="right")
    from_word = tf.gather(words.row_splits[:-1], word) + piece - tf.gather(ends - counts, word)
    values = tf.where(tf.gather(has_pieces, word),
                      tf.gather(tf.concat([words.values, tf.zeros([1], dtype)], 0),
                                tf.minimum(from_word, tf.size(words.values, index_dtype))),
                      tf.constant(special_ids["unk_token_id"], dtype))
    sentence_starts = tf.gather(tf.concat([tf.zeros([1], index_dtype), ends], 0),
                                word_pieces.row_splits[:-1])

    per_sentence = tf.RaggedTensor.from_row_splits(counts, word_pieces.row_splits).to_tensor()
    word_ends = tf.math.cumsum(per_sentence, axis=1)
    real = tf.sequence_mask(word_pieces.row_lengths(), tf.shape(per_sentence)[1])
    # [CLS] + the word's pieces + [SEP] must fit.
    keep = real & (word_ends <= tf.cast(seq_length - 2, index_dtype))
    kept = tf.reduce_sum(tf.where(keep, per_sentence, 0), axis=1)  # keep: a prefix
    inputs = _place_segments([(values, sentence_starts, kept)], seq_length, special_ids)
    starts = tf.cast(1 + word_ends - per_sentence, tf.int32)
    return inputs, tf.where(keep, starts, -1)
