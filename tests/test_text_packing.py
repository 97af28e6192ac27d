"""`pack_segments` against tf-text's packing and the official code's truncation."""

import itertools
import random

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from electra_tf.finetuning.features import Encoder
from electra_tf.text.packing import pack_segments, pack_words

SPECIAL_IDS = {"pad_token_id": 0, "unk_token_id": 100, "cls_token_id": 101,
               "sep_token_id": 102, "mask_token_id": 103}


def official_truncate_seq_pair(first_length, second_length, max_length):
    """The kept lengths of the official `_truncate_seq_pair` (pop from the longer one, the
    second on ties)."""
    while first_length + second_length > max_length:
        if first_length > second_length:
            first_length -= 1
        else:
            second_length -= 1
    return first_length, second_length


def tf_text_packing(segments, seq_length):
    """The same packing from tf-text's building blocks."""
    trimmed = tf_text.RoundRobinTrimmer(seq_length - len(segments) - 1).trim(segments)
    ids, types = tf_text.combine_segments(trimmed, SPECIAL_IDS["cls_token_id"],
                                          SPECIAL_IDS["sep_token_id"])
    ids, mask = tf_text.pad_model_inputs(ids, seq_length, SPECIAL_IDS["pad_token_id"])
    types, _ = tf_text.pad_model_inputs(types, seq_length)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def random_segment(rng, rows):
    lengths = [rng.choice([0, 1, 3, 7, 20, 40]) for _ in range(rows)]
    values = [rng.randrange(1000, 2000) for _ in range(sum(lengths))]
    return tf.RaggedTensor.from_row_lengths(tf.constant(values, tf.int32, [len(values)]),
                                            tf.constant(lengths, tf.int64, [rows]))


def test_a_pair_keeps_the_official_and_the_round_robin_lengths_for_every_pair_of_lengths():
    lengths = list(itertools.product(range(16), repeat=2))
    first, second = (tf.ragged.range(tf.constant(column, tf.int64))
                     for column in zip(*lengths))
    for budget in range(14):
        packed = pack_segments([first, second], budget + 3, SPECIAL_IDS)
        kept_second = packed["input_type_ids"].numpy().sum(1) - 1  # its [SEP] too
        kept_first = packed["input_mask"].numpy().sum(1) - kept_second - 3
        round_robin = tf_text.RoundRobinTrimmer(budget).trim([first, second])
        expected = [official_truncate_seq_pair(a, b, budget) for a, b in lengths]
        assert list(zip(kept_first, kept_second)) == expected, budget
        assert [tuple(map(len, pair)) for pair in zip(
            *(part.to_list() for part in round_robin))] == expected, budget


def test_packs_as_tf_text_singles_pairs_empty_rows_and_no_rows():
    rng = random.Random(0)
    for trial in range(40):
        rows = rng.choice([0, 1, 2, 5])
        segments = [random_segment(rng, rows) for _ in range(1 + trial % 2)]
        seq_length = rng.choice([4, 8, 16, 32, 128])
        packed = pack_segments(segments, seq_length, SPECIAL_IDS)
        for key, expected in tf_text_packing(segments, seq_length).items():
            assert packed[key].dtype == tf.int32 and packed[key].shape == (rows, seq_length)
            np.testing.assert_array_equal(packed[key], expected, err_msg=f"{trial} {key}")


def test_in_a_graph_with_the_length_as_a_tensor():
    """As TF Hub's `bert_pack_inputs(segments, seq_length=...)` calls it."""
    rng = random.Random(1)
    segments = [random_segment(rng, 3), random_segment(rng, 3)]
    in_graph = tf.function(lambda segments, length: pack_segments(segments, length,
                                                                  SPECIAL_IDS))
    packed = in_graph(segments, tf.constant(16))
    for key, expected in tf_text_packing(segments, 16).items():
        np.testing.assert_array_equal(packed[key], expected)


def piece_ids_tokenizer(texts):
    """A stand-in tokenizer: a word is its pieces' ids, separated by spaces."""
    return tf.strings.to_number(tf.strings.split(texts), tf.int32)


def test_packs_words_whole_with_unknown_for_empty_words_as_tagging_trains():
    """As `features.Encoder.encode_words`, the Python packing tagging trains on: [UNK]
    for a word without pieces, whole words only."""
    rng = random.Random(2)
    for trial in range(30):
        sentences = [[[rng.randrange(1000, 2000) for _ in range(rng.choice([0, 1, 1, 2, 5]))]
                      for _ in range(rng.choice([0, 1, 3, 9]))]
                     for _ in range(rng.choice([0, 1, 4]))]
        seq_length = rng.choice([4, 8, 16, 64])
        word_pieces = tf.RaggedTensor.from_nested_row_lengths(
            tf.constant([p for words in sentences for pieces in words for p in pieces],
                        tf.int32, [sum(len(p) for words in sentences for p in words)]),
            [tf.constant([len(words) for words in sentences], tf.int64, [len(sentences)]),
             tf.constant([len(p) for words in sentences for p in words], tf.int64,
                         [sum(map(len, sentences))])])
        inputs, starts = pack_words(word_pieces, seq_length, SPECIAL_IDS)
        expected, _, expected_starts = Encoder(
            piece_ids_tokenizer, SPECIAL_IDS, seq_length).encode_words(
            [[" ".join(map(str, pieces)) for pieces in words] for words in sentences])
        width = max(map(len, sentences), default=0)
        for key, value in expected.items():
            np.testing.assert_array_equal(inputs[key], value, err_msg=f"{trial} {key}")
        np.testing.assert_array_equal(
            starts, np.array([row + [-1] * (width - len(row)) for row in expected_starts],
                             np.int32).reshape(len(sentences), width), err_msg=str(trial))
