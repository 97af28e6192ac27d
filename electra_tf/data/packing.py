"""Sentence packing into fixed-length pretraining examples, as the official
`build_pretraining_dataset.py` does it.

Sentences are appended to the current example until it reaches its target length; a
document end flushes it. Each flush splits the sentences into segments A and B:
- with probability 0.1 the example has a single segment;
- otherwise A targets `(target - 3) // 2` tokens, and a sentence joins A if A is empty, or
  it fits under A's target, or (B is still empty and A is under target) with p = 0.5;
- A is cut to `max - 2` tokens and B to `max - len(A) - 3`;
- with probability 0.05 the next example's target is `randint(5, max)`.
The random draws happen in the same order as in the official code, so a `random.Random`
seeded alike gives the same examples.
"""

import dataclasses
import random
from typing import List, Optional


@dataclasses.dataclass(frozen=True)
class PackedExample:
    """One example; all three lists have length `max_length` (padded with `pad_id`/0)."""

    input_ids: List[int]
    input_mask: List[int]
    segment_ids: List[int]


class ExampleBuilder:
    """Streams tokenized sentences in, packed examples out.

    Example:
    >>> builder = ExampleBuilder(8, cls_id=2, sep_id=3, rng=random.Random(0))
    >>> builder.add_sentence([10, 11, 12])  # under the target length: nothing yet
    >>> builder.end_document().input_ids
    [2, 10, 11, 12, 3, 0, 0, 0]
    """

    def __init__(self, max_length: int, cls_id: int, sep_id: int, pad_id: int = 0,
                 rng: Optional[random.Random] = None):
        self.max_length = max_length
        self.cls_id, self.sep_id, self.pad_id = cls_id, sep_id, pad_id
        self.rng = rng or random.Random()
        self._sentences: List[List[int]] = []
        self._length = 0
        self._target_length = max_length

    def add_sentence(self, token_ids: List[int]) -> Optional[PackedExample]:
        """Adds one sentence; returns an example when the target length is reached."""
        self._sentences.append(list(token_ids))
        self._length += len(token_ids)
        if self._length >= self._target_length:
            return self._create_example()
        return None

    def end_document(self) -> Optional[PackedExample]:
        """Marks a document boundary; flushes the pending sentences, if any."""
        if self._length:
            return self._create_example()
        self._sentences = []
        return None

    def _create_example(self) -> PackedExample:
        if self.rng.random() < 0.1:
            first_target = float("inf")  # a single segment, as in classification inputs
        else:
            first_target = (self._target_length - 3) // 2  # room for [CLS] [SEP] [SEP]
        first, second = [], []
        for sentence in self._sentences:
            if (not first
                    or len(first) + len(sentence) < first_target
                    or (not second and len(first) < first_target
                        and self.rng.random() < 0.5)):
                first += sentence
            else:
                second += sentence
        first = first[:self.max_length - 2]
        second = second[:max(0, self.max_length - len(first) - 3)]

        self._sentences, self._length = [], 0
        if self.rng.random() < 0.05:
            self._target_length = self.rng.randint(5, self.max_length)
        else:
            self._target_length = self.max_length
        return self._make_example(first, second)

    def _make_example(self, first: List[int], second: List[int]) -> PackedExample:
        input_ids = [self.cls_id] + first + [self.sep_id]
        segment_ids = [0] * len(input_ids)
        if second:
            input_ids += second + [self.sep_id]
            segment_ids += [1] * (len(second) + 1)
        padding = self.max_length - len(input_ids)
        return PackedExample(
            input_ids=input_ids + [self.pad_id] * padding,
            input_mask=[1] * len(input_ids) + [0] * padding,
            segment_ids=segment_ids + [0] * padding,
        )
