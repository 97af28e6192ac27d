"""Packing tokenized text into the encoder's inputs, in graph ops (eager or inside
exported SavedModels): fine-tuning, its serving signatures and the TF Hub preprocessor use
the same functions.
"""

import functools

import tensorflow as tf

# How a pair too long for the sequence is cut: "longest_first" removes pieces from the
# longer segment (the second on ties), as BERT and the official ELECTRA fine-tuning code
# do; "round_robin" from each in turn, as TF Hub's BERT preprocessors do.
TRUNCATIONS = ("longest_first", "round_robin")
# The raw-string inputs of serving signatures, [N] each: dense, so TF Serving's REST and
# gRPC APIs can carry them.
TEXT = tf.TensorSpec([None], tf.string, name="text")
TEXT_PAIR = tf.TensorSpec([None], tf.string, name="text_pair")


def traced_when_eager(function):
    """`function(tensors, *python_values)` as is inside graphs; called eagerly, run as a
    graph traced once per set of Python values (for any batch size and lengths): the
    ragged ops of packing cost ~10 ms a call run one by one from Python (~40 ms for
    pairs), ~1.7 ms as one graph (ELECTRA-Small's predict on one text took 29 ms)."""
    graph = tf.function(function, autograph=False, reduce_retracing=True)

    @functools.wraps(function)
    def run(tensors, *args, **kwargs):
        if not tf.executing_eagerly():
            return function(tensors, *args, **kwargs)
        # Traced for unknown shapes first, so that later calls of other shapes reuse it.
        graph.get_concrete_function(tf.nest.map_structure(_any_shape, tensors), *args,
                                    **kwargs)
        return graph(tensors, *args, **kwargs)

    run.traced = graph
    return run


def _any_shape(tensor):
    """The spec of `tensor`'s kind and rank with every dimension unknown."""
    if isinstance(tensor, tf.RaggedTensor):
        return tf.RaggedTensorSpec([None] * tensor.shape.rank, tensor.dtype,
                                   tensor.ragged_rank, tensor.row_splits.dtype)
    return tf.TensorSpec([None] * tensor.shape.rank, tensor.dtype)


def truncate_longest_first(segments, budget):
    """Cuts ragged segments [batch, (pieces)] to at most `budget` pieces in all, each row
    as the official `_truncate_seq_pair` does (one or two segments)."""
    if len(segments) == 1:
        return [segments[0][:, :budget]]
    first, second = segments
    first_length = first.row_lengths()
    second_length = second.row_lengths()
    budget = tf.cast(budget, first_length.dtype)
    # Pop from the longer one until both are equal, then from the second, then alternate:
    # the first keeps ceil(budget / 2) pieces unless the second is shorter than that.
    keep_first = tf.minimum(first_length, tf.maximum(budget - second_length,
                                                     (budget + 1) // 2))
    keep_second = tf.minimum(second_length, budget - keep_first)
    return [_keep_prefix(first, keep_first), _keep_prefix(second, keep_second)]


def _keep_prefix(ragged, lengths):
    positions = tf.ragged.range(ragged.row_lengths())
    return tf.ragged.boolean_mask(ragged, positions < tf.expand_dims(lengths, 1))


@traced_when_eager
def pack_segments(segments, seq_length, special_ids: dict,
                  truncation: str = "longest_first") -> dict:
    """One or two ragged int segments [batch, (pieces)] -> `[CLS] a [SEP] (b [SEP])`.

    Truncates to `seq_length` (see TRUNCATIONS) and returns `input_word_ids`, `input_mask`,
    `input_type_ids`, int32 [batch, seq_length].
    """
    import tensorflow_text as tf_text

    budget = seq_length - len(segments) - 1
    if truncation == "round_robin":
        trimmed = tf_text.RoundRobinTrimmer(budget).trim(segments)
    else:
        trimmed = truncate_longest_first(segments, budget)
    token_ids, segment_ids = tf_text.combine_segments(
        trimmed, start_of_sequence_id=special_ids["cls_token_id"],
        end_of_segment_id=special_ids["sep_token_id"])
    token_ids, mask = tf_text.pad_model_inputs(token_ids, seq_length,
                                               pad_value=special_ids["pad_token_id"])
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, seq_length)
    return {"input_word_ids": tf.cast(token_ids, tf.int32),
            "input_mask": tf.cast(mask, tf.int32),
            "input_type_ids": tf.cast(segment_ids, tf.int32)}


@traced_when_eager
def pack_words(word_pieces: tf.RaggedTensor, seq_length: int, special_ids: dict):
    """Word-split sentences -> encoder inputs and each word's first-piece position.

    `word_pieces`: int [batch, (words), (pieces)]. Like `features.Encoder.encode_words`
    (what tagging trains on): a word with no piece becomes `[UNK]`, and a sentence keeps
    only the words whose pieces all fit, the rest being cut.

    Returns (inputs: dict of int32 [batch, seq_length], word_starts: int32 [batch,
    max_words], -1 for cut words and padding).
    """
    per_word = word_pieces.values  # [total_words, (pieces)]
    empty = tf.equal(per_word.row_lengths(), 0)
    unknown = tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(tf.cast(empty, tf.int32))],
                tf.constant(special_ids["unk_token_id"], per_word.dtype)),
        tf.cast(empty, tf.int64))
    word_pieces = word_pieces.with_values(tf.concat([per_word, unknown], axis=1))

    pieces_per_word = word_pieces.with_values(word_pieces.values.row_lengths())
    counts = pieces_per_word.to_tensor()
    ends = tf.math.cumsum(counts, axis=1)
    real = pieces_per_word.with_values(tf.ones_like(pieces_per_word.values, tf.bool))
    # [CLS] + the word's pieces + [SEP] must fit.
    keep = tf.logical_and(real.to_tensor(False), ends <= seq_length - 2)
    kept = tf.ragged.boolean_mask(
        word_pieces, tf.RaggedTensor.from_tensor(keep, lengths=word_pieces.row_lengths()))
    inputs = pack_segments([kept.merge_dims(1, 2)], seq_length, special_ids)
    starts = tf.cast(1 + ends - counts, tf.int32)
    return inputs, tf.where(keep, starts, -1)
