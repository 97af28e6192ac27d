"""In-graph packing of tokenized text into the encoder's inputs, for exported SavedModels.

Fine-tuning packs with keras-hub's `MultiSegmentPacker` and `features.Encoder` in eager
numpy; a SavedModel needs the same result from graph ops with a `seq_length` that may be a
tensor, so these call the tf-text ops the packer runs directly. Tests check both agree.
"""

import tensorflow as tf


def pack_segments(segments, seq_length, special_ids: dict) -> dict:
    """One or two ragged int segments [batch, (pieces)] -> `[CLS] a [SEP] (b [SEP])`.

    Truncates round-robin to `seq_length` and returns `input_word_ids`, `input_mask`,
    `input_type_ids`, int32 [batch, seq_length].
    """
    import tensorflow_text as tf_text

    trimmed = tf_text.RoundRobinTrimmer(seq_length - len(segments) - 1).trim(segments)
    token_ids, segment_ids = tf_text.combine_segments(
        trimmed, start_of_sequence_id=special_ids["cls_token_id"],
        end_of_segment_id=special_ids["sep_token_id"])
    token_ids, mask = tf_text.pad_model_inputs(token_ids, seq_length,
                                               pad_value=special_ids["pad_token_id"])
    segment_ids, _ = tf_text.pad_model_inputs(segment_ids, seq_length)
    return {"input_word_ids": tf.cast(token_ids, tf.int32),
            "input_mask": tf.cast(mask, tf.int32),
            "input_type_ids": tf.cast(segment_ids, tf.int32)}


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
