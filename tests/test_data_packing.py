"""The official packing rules (`electra_tf.data.packing` states them) on hand-made documents."""

import random

from electra_tf.data.packing import ExampleBuilder

CLS, SEP = 2, 3


class ScriptedRandom:
    """Returns the scripted draws in order; fails the test if asked for more."""

    def __init__(self, draws, randints=()):
        self.draws, self.randints = list(draws), list(randints)

    def random(self):
        return self.draws.pop(0)

    def randint(self, low, high):
        value = self.randints.pop(0)
        assert low <= value <= high
        return value


def sentence(start, length):
    return list(range(start, start + length))


def test_two_segments_split_at_half_the_target():
    # target 16 -> first segment targets (16 - 3) // 2 = 6 tokens.
    # Draws: two segments (0.5 >= 0.1); the coin for the 2nd sentence (0.5: not < 0.5, so
    # it goes to B); keep the max target length (0.5 >= 0.05).
    rng = ScriptedRandom([0.5, 0.5, 0.5])
    builder = ExampleBuilder(16, CLS, SEP, rng=rng)
    assert builder.add_sentence(sentence(10, 4)) is None
    assert builder.add_sentence(sentence(20, 4)) is None  # 4 + 4 = 8 is not under 6
    example = builder.add_sentence(sentence(30, 8))  # total 16 >= 16: flush
    assert example.input_ids == [CLS, 10, 11, 12, 13, SEP, 20, 21, 22, 23, 30, 31, 32, 33,
                                 34, SEP]
    assert example.segment_ids == [0] * 6 + [1] * 10
    assert example.input_mask == [1] * 16
    assert rng.draws == []


def test_overflowing_sentence_joins_a_half_the_time_while_b_is_empty():
    # A has 4 < 6 tokens, B empty: the third draw (0.2 < 0.5) sends the sentence to A.
    rng = ScriptedRandom([0.5, 0.2, 0.5])
    builder = ExampleBuilder(16, CLS, SEP, rng=rng)
    builder.add_sentence(sentence(10, 4))
    example = builder.add_sentence(sentence(20, 12))
    # A = 16 tokens cut to max - 2 = 14; B empty: one segment.
    assert example.input_ids == [CLS] + sentence(10, 4) + sentence(20, 10) + [SEP]
    assert example.segment_ids == [0] * 16


def test_single_segment_with_probability_point_one():
    rng = ScriptedRandom([0.05, 0.9])
    builder = ExampleBuilder(12, CLS, SEP, rng=rng)
    builder.add_sentence(sentence(10, 3))
    builder.add_sentence(sentence(20, 3))
    example = builder.end_document()
    assert example.input_ids == [CLS, 10, 11, 12, 20, 21, 22, SEP, 0, 0, 0, 0]
    assert example.input_mask == [1] * 8 + [0] * 4
    assert example.segment_ids == [0] * 12


def test_second_segment_is_cut_to_what_is_left():
    # max 10: A takes the first sentence (5 tokens); B gets max - len(A) - 3 = 2 tokens.
    rng = ScriptedRandom([0.5, 0.5])
    builder = ExampleBuilder(10, CLS, SEP, rng=rng)
    builder.add_sentence(sentence(10, 5))
    example = builder.add_sentence(sentence(20, 6))
    assert example.input_ids == [CLS, 10, 11, 12, 13, 14, SEP, 20, 21, SEP]
    assert example.segment_ids == [0] * 7 + [1] * 3


def test_document_end_flushes_and_empty_documents_write_nothing():
    builder = ExampleBuilder(32, CLS, SEP, rng=ScriptedRandom([0.5, 0.5]))
    assert builder.end_document() is None
    builder.add_sentence(sentence(10, 3))
    example = builder.end_document()
    assert example.input_ids[:5] == [CLS, 10, 11, 12, SEP]
    assert builder.end_document() is None


def test_random_target_length_with_probability_point_zero_five():
    rng = ScriptedRandom([0.5, 0.01, 0.5, 0.5], randints=[7])
    builder = ExampleBuilder(32, CLS, SEP, rng=rng)
    builder.add_sentence(sentence(10, 40))  # flush; next target = randint(5, 32) = 7
    first_target_after = builder.add_sentence(sentence(100, 7))  # 7 >= 7: flush now
    # target 7 -> A targets (7 - 3) // 2 = 2; a single sentence always fills A first.
    assert first_target_after.input_ids[:9] == [CLS] + sentence(100, 7) + [SEP]


def test_deterministic_for_a_seed():
    def build(seed):
        builder = ExampleBuilder(24, CLS, SEP, rng=random.Random(seed))
        out = []
        for i in range(50):
            example = builder.add_sentence(sentence(10 + i, 3 + i % 7))
            if example:
                out.append(example)
        return out

    assert build(1) == build(1)
    assert build(1) != build(2)
