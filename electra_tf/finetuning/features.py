"""Examples -> encoder inputs (numpy), with the same packing exports use."""

import numpy as np

from electra_tf.text.packing import pack_segments
from electra_tf.text.tokenizer import tokenize_ragged, tokenize_to_lists

IGNORE = -1  # tagging label of non-first word pieces, [CLS], [SEP] and padding


class Encoder:
    """Tokenizes and packs text the way the fine-tuned model sees it.

    Pairs become `[CLS] a [SEP] b [SEP]`, truncated to `max_length` as `truncation` says
    (`text.packing`: longest first, as the official code; the serving signatures pack
    with the same function).
    """

    def __init__(self, tokenizer, special_ids: dict, max_length: int,
                 truncation: str = "longest_first"):
        self.tokenizer = tokenizer
        self.special_ids = special_ids
        self.max_length = max_length
        self.truncation = truncation

    def encode_pairs(self, texts, pairs=None, with_pairs=None, batch_size=1024) -> dict:
        """texts, pairs: lists of str (pairs None or all None for single texts).

        `with_pairs` packs every row as two segments, a missing pair as an empty second
        segment (`[CLS] a [SEP] [SEP]`); it defaults to "any pair is present". Fine-tuning
        decides it once from the training file so that train, eval and serving agree.
        """
        outputs = {"input_word_ids": [], "input_mask": [], "input_type_ids": []}
        pairs = [None] * len(texts) if pairs is None else pairs
        if with_pairs is None:
            with_pairs = any(p is not None for p in pairs)
        for start in range(0, len(texts), batch_size):
            segments = [tokenize_ragged(self.tokenizer, texts[start:start + batch_size])]
            if with_pairs:
                chunk = ["" if p is None else p for p in pairs[start:start + batch_size]]
                segments.append(tokenize_ragged(self.tokenizer, chunk))
            packed = pack_segments(segments, self.max_length, self.special_ids,
                                   self.truncation)
            for key, value in packed.items():
                outputs[key].append(value.numpy())
        return {k: np.concatenate(v) if v else np.zeros((0, self.max_length), np.int32)
                for k, v in outputs.items()}

    def encode_words(self, sentences, tag_ids=None):
        """Word-tokenized sentences -> (inputs, labels [n, len] or None, first-piece index).

        Each word's label sits on its first word piece; the other pieces, [CLS], [SEP] and
        padding get IGNORE. Words cut off by `max_length` keep index -1 in `word_starts`.
        """
        n, length = len(sentences), self.max_length
        pieces = tokenize_to_lists(self.tokenizer, [w for words in sentences for w in words])
        ids = np.full((n, length), self.special_ids["pad_token_id"], np.int32)
        labels = np.full((n, length), IGNORE, np.int32) if tag_ids is not None else None
        word_starts = [[-1] * len(words) for words in sentences]
        cursor = 0
        for row, words in enumerate(sentences):
            sequence = [self.special_ids["cls_token_id"]]
            for w, _ in enumerate(words):
                word_pieces = pieces[cursor + w] or [self.special_ids["unk_token_id"]]
                if len(sequence) + len(word_pieces) > length - 1:
                    break
                word_starts[row][w] = len(sequence)
                if labels is not None:
                    labels[row, len(sequence)] = tag_ids[row][w]
                sequence.extend(word_pieces)
            cursor += len(words)
            sequence.append(self.special_ids["sep_token_id"])
            ids[row, :len(sequence)] = sequence
        inputs = {"input_word_ids": ids,
                  "input_mask": (ids != self.special_ids["pad_token_id"]).astype(np.int32),
                  "input_type_ids": np.zeros_like(ids)}
        return inputs, labels, word_starts
