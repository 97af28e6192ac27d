"""tf-text's WordPiece vocabulary learner, giving the same vocab in a fraction of the time.

Written here because no maintained library runs tf-text's algorithm faster, and our vocabs
follow it (keras-hub's `compute_word_piece_vocabulary` calls tf-text's `learn`). `learn`
binary-searches a frequency threshold. At each threshold it runs a few iterations, each
counting every piece the words can be cut into (at first every substring; later only
those starting where the last iteration's vocab cuts the word) and then, longest pieces
first, subtracting each piece's count from every piece it begins with. A piece keeps the
vocab's place if its count is still at least the threshold. On the demo corpus that took
15 thresholds of 3.7-7.2 s each, the pure-Python loop over substrings nearly all of it.

Two facts give the same vocab for less work:
- After the subtraction a piece's count is the number of times it ends a word (by
  induction from the longest: what the pieces one character longer count before their
  own subtraction is what the piece loses, its occurrences that go on). So one update
  per cut is enough: the rest of the word from each place it is cut at.
- The first iteration cuts every word at every character whatever the threshold: its
  counts serve the whole search. A later iteration counts each piece at some of those
  places only, so it keeps some of the first iteration's pieces: a threshold whose first
  iteration gives a vocab too small for the search's slack gives one too small at the end,
  and the search moves on without the other iterations (11 of 15 thresholds on the demo
  corpus).
tf-text's own functions do the rest (which words and characters count, the vocab's final
order; where a word is cut, by its `FastWordpieceTokenizer`), and the tests check the vocab
against tf-text's `learn`.
"""

import inspect

import numpy as np
import tensorflow as tf
import tensorflow_text as text
from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as tf_text

from electra_tf import traced


def learn(word_counts, vocab_size: int, reserved_tokens: list, joiner: str = "##") -> list:
    """The vocab that tf-text's `learn(word_counts, vocab_size, reserved_tokens,
    include_joiner_token=True, joiner=joiner)` returns (as keras-hub calls it) for a
    {word: count} dict; like it, more than `vocab_size` tokens when no threshold gives
    fewer."""
    params = parameters(vocab_size, reserved_tokens, joiner)
    word_counts = word_counts.items()
    # As tf-text's `learn` does: the search's bounds from every word, pieces only from
    # the words it keeps.
    upper, lower = tf_text.get_search_threshs(word_counts, params.upper_thresh,
                                              params.lower_thresh)
    words = tf_text.get_input_words(word_counts, params.reserved_tokens,
                                    params.max_token_length)
    allowed_chars = tf_text.get_allowed_chars(words, params.max_unique_chars)
    words = tf_text.filter_input_words(words, allowed_chars, params.max_input_tokens)
    return _binary_search(words, lower, upper, params)


def parameters(vocab_size: int, reserved_tokens: list, joiner: str = "##"):
    """tf-text's `Params` for `learn`: these arguments, tf-text's defaults for the rest (the
    frequency threshold's bounds, the slack below `vocab_size`, ...)."""
    arguments = inspect.signature(tf_text.learn).bind(
        None, vocab_size, reserved_tokens, include_joiner_token=True, joiner=joiner)
    arguments.apply_defaults()
    return tf_text.Params(**{name: arguments.arguments[name]
                             for name in tf_text.Params._fields})


def _binary_search(words, lower: int, upper: int, params) -> list:
    """tf-text's `learn_binary_search`, with the first iteration's counts computed once."""
    chars = tf_text.extract_char_tokens(words)
    # No threshold the search tries is lower: the bounds cross at most by one.
    counter = _PieceCounter(words, min(lower, upper) - 1, params)
    slack = max(0, params.slack_ratio * params.vocab_size)
    while True:
        threshold = (upper + lower) // 2
        last = lower >= upper or threshold <= 1
        first = counter.first_iteration(threshold)
        if not last and params.vocab_size - slack > len(_final_vocab(first, chars, params)):
            upper = threshold - 1  # the search's move for a vocab this small
            continue
        vocab = _learn_with_threshold(first, threshold, chars, counter, params)
        within_slack = (len(vocab) <= params.vocab_size
                        and params.vocab_size - len(vocab) <= slack)
        if within_slack or last:
            return vocab
        if len(vocab) > params.vocab_size:
            lower = threshold + 1
        else:
            upper = threshold - 1


def _learn_with_threshold(first: dict, threshold: int, chars: set, counter, params) -> list:
    """tf-text's `learn_with_thresh` for a threshold of at least 1 (the search's are),
    from its first iteration's pieces `first` ({piece: count})."""
    kept = first
    for _ in range(1, params.num_iterations):
        tokens = tf_text.ensure_all_tokens_exist(chars, kept, True, params.joiner)
        kept = counter.cut_by(tokens, threshold)
    return _final_vocab(kept, chars, params)


def _final_vocab(kept: dict, chars: set, params) -> list:
    """The vocab of an iteration that kept the pieces `kept` ({piece: count})."""
    tokens = tf_text.ensure_all_tokens_exist(chars, kept, True, params.joiner)
    return tf_text.generate_final_vocabulary(params.reserved_tokens, chars, tokens)


class _PieceCounter:
    """How often each piece ends a word, the words cut at every character (the first
    iteration) or where a vocab cuts them, longest match first (tf-text's
    `get_split_indices`); only the pieces counted at least a threshold's times.

    In TensorFlow's ops, as no Python loop per word is: tf-text's `FastWordpieceTokenizer`
    cuts the words (the same greedy longest match, in C++), and `tf.unique` and a segment
    sum count the pieces. Offsets are in bytes, and so are the suffixes taken at them.
    Every word can be cut (`get_split_indices` would leave it out otherwise): the vocabs
    hold each of the words' characters, alone and after the joiner
    (`ensure_all_tokens_exist`), and no word is longer than the tokenizer's limit.

    A piece is counted at fewer places in a later iteration than in the first, where
    every place counts, so the first iteration's count bounds it: a place whose piece
    counted less than the threshold there is left out before its piece is even formed.
    """

    def __init__(self, words, lowest_threshold: int, params):
        self._joiner = params.joiner
        # Words are at most `max_token_length` characters of at most 4 UTF-8 bytes each.
        self._max_bytes = 4 * params.max_token_length
        self._words = tf.constant([word for word, _ in words], tf.string)
        self._counts = tf.constant([count for _, count in words], tf.int64)
        lengths = tf.strings.length(self._words)
        self._word_offsets = tf.cumsum(lengths, exclusive=True)
        _, char_starts = tf.strings.unicode_decode_with_offsets(self._words, "UTF-8")
        rows, starts = char_starts.value_rowids(), tf.cast(char_starts.flat_values, tf.int32)
        pieces, counts, index = self._count(rows, starts)
        # The first iteration's count of the piece from each byte of each word on.
        self._bound = tf.scatter_nd(self._places(rows, starts)[:, None],
                                    tf.gather(counts, index), [tf.reduce_sum(lengths)])
        # The first iteration's pieces that some threshold keeps, most counted first.
        pieces, counts = (tf.boolean_mask(values, counts >= lowest_threshold)
                          for values in (pieces, counts))
        order = tf.argsort(counts, direction="DESCENDING")
        self._first_pieces = [piece.decode("utf-8")
                              for piece in tf.gather(pieces, order).numpy()]
        self._first_counts = tf.gather(counts, order).numpy()

    def first_iteration(self, threshold: int) -> dict:
        kept = int(np.searchsorted(-self._first_counts, -threshold, side="right"))
        return dict(zip(self._first_pieces[:kept], self._first_counts[:kept].tolist()))

    def cut_by(self, tokens: dict, threshold: int) -> dict:
        unknown = "[UNK]"
        while unknown in tokens:
            unknown = f"[{unknown}]"
        tokenizer = text.FastWordpieceTokenizer(
            list(tokens) + [unknown], suffix_indicator=self._joiner,
            max_bytes_per_word=self._max_bytes, unknown_token=unknown,
            no_pretokenization=True)
        _, starts, _ = tokenizer.tokenize_with_offsets(self._words)
        pieces, counts = self._pieces_kept(starts, tf.constant(threshold, tf.int64))
        return dict(zip((piece.decode("utf-8") for piece in pieces.numpy()),
                        counts.numpy().tolist()))

    @traced.function(input_signature=[
        tf.RaggedTensorSpec([None, None], tf.int64, ragged_rank=1, row_splits_dtype=tf.int64),
        tf.TensorSpec([], tf.int64)])
    def _pieces_kept(self, starts, threshold):
        """The pieces from the cuts at `starts` (each word's byte offsets) that end a word
        at least `threshold` times, and those counts. Traced: run eagerly (the ragged
        tensors' row ids and masks are a dozen ops each), its ops took 1.4 s of the
        learner's 3.4 s on a 12 MB corpus's words (51 passes), 2.5 s traced (2-core AMD
        EPYC, AVX2; the search has made fewer passes since)."""
        rows, starts = starts.value_rowids(), tf.cast(starts.flat_values, tf.int32)
        # `tf.gather` at `tf.where`'s indices: `tf.boolean_mask` is ten ops, a third of
        # the trace.
        may_keep = _where(tf.gather(self._bound, self._places(rows, starts)) >= threshold)
        pieces, counts, _ = self._count(tf.gather(rows, may_keep), tf.gather(starts, may_keep))
        kept = _where(counts >= threshold)
        return tf.gather(pieces, kept), tf.gather(counts, kept)

    def _places(self, rows, starts):
        """Where the byte `starts[i]` of word `rows[i]` is among all words' bytes."""
        return tf.gather(self._word_offsets, rows) + starts

    def _count(self, rows, starts):
        """The distinct pieces from byte `starts[i]` of word `rows[i]` on, how often they
        end a word, and which of them each (row, start) gives."""
        words = tf.gather(self._words, rows)
        suffixes = tf.strings.substr(words, starts, tf.strings.length(words) - starts)
        pieces, index = tf.unique(tf.where(starts > 0, self._joiner + suffixes, suffixes))
        counts = tf.math.unsorted_segment_sum(tf.gather(self._counts, rows), index,
                                              tf.size(pieces))
        return pieces, counts, index


def _where(condition):
    """The indices where the vector `condition` is true."""
    return tf.reshape(tf.where(condition), [-1])
