"""`ElectraPreprocessor`: raw strings (or pairs of strings) -> the encoder's inputs."""

import keras
import keras_hub
import tensorflow as tf

from electra_tf import traced
from electra_tf.errors import ConfigError, check_choice
from electra_tf.layers.export_tracing import tracing_an_exports_graph
from electra_tf.models.sources import open_model
from electra_tf.text.tokenizer import ElectraTokenizer
from electra_tf.text.packing import TRUNCATIONS, pack_segments, pack_words
from electra_tf.text.tokenizer import tokenize_ragged


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraPreprocessor(keras_hub.models.Preprocessor):
    """Tokenizes one text or a pair of texts per example and packs them as
    `[CLS] a [SEP] (b [SEP])` into `input_word_ids`, `input_mask`, `input_type_ids`
    (int32 [batch, sequence_length]), in graph ops: usable in `tf.data`, inside models
    and in exported SavedModels.

    Call with strings [batch] or a tuple (texts, pairs); labels and sample weights
    (`y`, `sample_weight`) pass through, so it maps over a labelled `tf.data.Dataset`.
    A pair too long is cut longest segment first, as the official fine-tuning code does
    (`truncation="round_robin"`: in turn, as TF Hub's BERT preprocessors; for a pair both
    keep the same pieces).

    Args:
        tokenizer: an `ElectraTokenizer`.
        sequence_length: the packed length (the official recipe: 128).
    """

    def __init__(self, tokenizer: ElectraTokenizer, sequence_length=128,
                 truncation="longest_first", **kwargs):
        super().__init__(**kwargs)
        check_choice("truncation", truncation, TRUNCATIONS)
        self.tokenizer = tokenizer
        self.sequence_length = sequence_length
        self.truncation = truncation

    # Not converted by autograph (in `tf.data` maps), which mistakes its `super()`.
    @tf.autograph.experimental.do_not_convert
    def __call__(self, *args, **kwargs):
        # keras-hub's preprocessing layers take a lone 2- or 3-tuple for (x, y[, sample
        # weight]), as a dataset's element; here a tuple is a pair of texts (this class's
        # contract, and keras-hub's own documentation of its classifier preprocessors).
        if len(args) == 1 and isinstance(args[0], tuple) and not (
                {"y", "sample_weight"} & set(kwargs)):
            kwargs["y"] = None
        return super().__call__(*args, **kwargs)

    def build(self, input_shape=None):
        # Packing calls the tokenizer's traced graph rather than the tokenizer layer
        # (`_traced_around_tokenizer`), which Keras's first call would otherwise find
        # unbuilt, and warn.
        self.tokenizer.build(input_shape)
        self.built = True

    def call(self, x, y=None, sample_weight=None):
        # A tuple holds segments; a list is a batch of texts, as in keras-hub.
        segments = list(x) if isinstance(x, tuple) else [x]
        if not 1 <= len(segments) <= 2:
            raise ValueError(f"ElectraPreprocessor takes a text or a pair of texts per "
                             f"example; got {len(segments)} segments.")
        segments = [tf.convert_to_tensor(s, tf.string) for s in segments]
        sizes = {s.shape[0] if s.shape.rank else 1 for s in segments} - {None}
        if len(sizes) > 1:
            raise ConfigError(f"ElectraPreprocessor got texts and pairs of different "
                              f"lengths {sorted(sizes)}: give one pair per text.")
        single = segments[0].shape.rank == 0
        if single:
            segments = [s[None] for s in segments]
        if not tracing_an_exports_graph() and all(s.shape.rank == 1 for s in segments):
            inputs = self._packed_by_one_call(segments)
        else:
            inputs = pack_segments([tokenize_ragged(self.tokenizer, s) for s in segments],
                                   self.sequence_length,
                                   self.tokenizer.special_ids, self.truncation)
        if single:
            inputs = {k: v[0] for k, v in inputs.items()}
        return keras.utils.pack_x_y_sample_weight(inputs, y, sample_weight)

    def _packed_by_one_call(self, segments: list) -> dict:
        """`segments` (string tensors [batch]) tokenized and packed by one graph call
        (`_traced_around_tokenizer` says why)."""
        count, length, truncation = len(segments), self.sequence_length, self.truncation
        special_ids = self.tokenizer.special_ids
        packing = self._traced_around_tokenizer(
            ("pack_segments", count, length, truncation),
            [[tf.TensorSpec([None], tf.string)] * count],
            lambda tokenize: lambda texts: pack_segments(
                [tokenize(t) for t in texts], length, special_ids, truncation))
        return packing(segments)

    def pack_words(self, words: tf.RaggedTensor):
        """Word-split sentences, strings [batch, (words)] -> (the encoder's inputs, each
        word's first-piece position int32 [batch, max words], -1 for words cut by the
        length and for padding); see `text.packing.pack_words`. Run as one graph call
        (`_traced_around_tokenizer`) but in an export's graph."""
        length, special_ids = self.sequence_length, self.tokenizer.special_ids
        words = words.with_row_splits_dtype(tf.int64)  # as the tokenizer's pieces
        if not tracing_an_exports_graph() and words.ragged_rank == 1:
            packing = self._traced_around_tokenizer(
                ("pack_words", length),
                [tf.RaggedTensorSpec([None, None], tf.string, 1, tf.int64)],
                lambda tokenize: lambda words: pack_words(
                    words.with_values(tokenize(words.values)), length, special_ids))
            return packing(words)
        pieces = words.with_values(tokenize_ragged(self.tokenizer, words.values))
        return pack_words(pieces, length, special_ids)

    def _traced_around_tokenizer(self, key, signature, packing_of):
        """`packing_of(tokenize)` (a function of tensors that calls `tokenize`, the
        tokenizer's graph), traced for `signature` once per `key` for the preprocessors of
        a vocabulary (`ElectraTokenizer.traced_around`); `packing_of` captures no
        preprocessor.

        Why: eager calls tokenized (the tokenizer's graph, behind a Keras layer call) and
        packed (the packing's graph) in two calls, with ragged ids back in Python in
        between: packing one text 0.97-1.10 ms against 0.24-0.27 as one call (of a
        `predict` taking 6.5 ms), one sentence's words 1.39 against 0.47 (2-core
        Sapphire Rapids). Traces other than an export's graph call it too
        (`layers.export_tracing.tracing_an_exports_graph`): `fit` and `evaluate` build a
        `tf.data` map of the preprocessing at every call (keras-hub's), which traced the
        packing ops anew each time (~0.11 s of a tagger's `fit` call for `pack_words`)."""
        return self.tokenizer.traced_around(key, lambda tokenize: traced.function(
            packing_of(tokenize), input_signature=signature).get_concrete_function())

    def get_config(self):
        config = super().get_config()
        config.update({"sequence_length": self.sequence_length,
                       "truncation": self.truncation})
        return config

    @classmethod
    def from_pretrained(cls, name_or_path: str, sequence_length=128,
                        **kwargs) -> "ElectraPreprocessor":
        """The preprocessor of a model (any source `ElectraTokenizer.from_pretrained`
        takes) packing to `sequence_length`."""
        return cls.of_model(open_model(name_or_path), sequence_length, **kwargs)

    @classmethod
    def of_model(cls, source, sequence_length: int, **kwargs) -> "ElectraPreprocessor":
        """The preprocessor of an opened model (`sources.ModelSource`)."""
        positions = source.config.max_position_embeddings
        if sequence_length > positions:
            raise ConfigError(f"sequence_length={sequence_length} exceeds the encoder's "
                              f"{positions} positions.")
        return cls(ElectraTokenizer.of_model(source), sequence_length=sequence_length,
                   **kwargs)
