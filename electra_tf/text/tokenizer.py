"""`ElectraTokenizer`, the in-graph WordPiece tokenizer used everywhere: data building,
fine-tuning, the task models, exports."""

import json
import weakref

import keras
import keras_hub
import tensorflow as tf
from keras_hub.src.utils.tensor_utils import (convert_preprocessing_outputs, no_convert_scope,
                                              preprocessing_function)

from electra_tf import traced
from electra_tf.layers.export_tracing import tracing_an_exports_graph
from electra_tf.text import vocab as vocab_lib
from electra_tf.text.words import split_words


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraTokenizer(keras_hub.tokenizers.WordPieceTokenizer):
    """keras-hub's WordPiece tokenizer (tf-text ops, BERT pre-tokenization) with ELECTRA's
    vocab rules: the special tokens must be there and `[PAD]` is id 0.

    Strings [batch] in, int32 ids ragged [batch, (pieces)] out (dense with
    `sequence_length`); the same ops run in `tf.data`, eagerly and inside SavedModels.
    The vocab is saved as an asset of `.keras` files.

    Args:
        vocabulary: a vocab file or a list of tokens.
        lowercase: lower-case the text (uncased models).
        strip_accents: NFD-normalize and drop combining marks; None follows `lowercase`
            (BERT's uncased behaviour; keep it off for Korean, whose syllables it would
            decompose into jamo).
    """

    def __init__(self, vocabulary=None, lowercase=True, strip_accents=None, **kwargs):
        kwargs.setdefault("oov_token", "[UNK]")
        kwargs.setdefault("dtype", "int32")
        # keras-hub runs a pure-Python WordPiece when called eagerly unless told not to: the
        # same ids, 10x slower than tf-text's in a graph (Moby-Dick, 1.2 MB: 2.3 s against
        # 0.22 s on a 2-core AMD EPYC), and data building and fine-tuning features tokenize
        # eagerly. `tokenize` runs eager calls as a graph.
        kwargs.setdefault("_allow_python_workflow", False)
        super().__init__(vocabulary=vocabulary, lowercase=lowercase,
                         strip_accents=vocab_lib.strips_accents(lowercase, strip_accents),
                         **kwargs)

    def set_vocabulary(self, vocabulary):
        if isinstance(vocabulary, str):
            vocabulary = vocab_lib.load_vocab(vocabulary)
        elif vocabulary is not None:
            vocabulary = vocab_lib.checked(list(vocabulary), "the vocabulary given")
        super().set_vocabulary(vocabulary)
        # Kept: indexing the vocab took ~1.5 ms, and packing reads them at every call.
        self._special_ids = (None if vocabulary is None
                             else vocab_lib.special_token_ids(self.vocabulary))
        _GRAPHS.pop(self, None)  # it tokenizes with the vocabulary replaced

    def tokenize(self, inputs):
        if isinstance(inputs, tf.RaggedTensor) or tracing_an_exports_graph():
            return super().tokenize(inputs)
        texts = tf.convert_to_tensor(inputs, tf.string)
        if texts.shape.rank not in (0, 1):
            return super().tokenize(inputs)
        # Eager calls: tf-text's ops run one by one re-do ~20 ms of set-up per call (a
        # text: 20 ms, 1.3 in a graph; 1,024 texts: 34 against 12). Traced calls (a
        # `tf.data` map, Keras's symbolic build of a preprocessor): tracing tf-text's ops
        # took 0.4-0.7 s a call, calling the traced graph 0.025 s. Both run one graph.
        # Exports trace the ops into their own graph: a `tiny` classifier's TF1 session
        # answered 32 long texts in 12.0-12.9 ms so, 15.5-17.9 ms calling the graph.
        graph = self._eager_graph()
        ids = graph(texts[None])[0] if texts.shape.rank == 0 else graph(texts)
        return convert_preprocessing_outputs(ids)

    def _eager_graph(self):
        graph = _GRAPHS.get(self)
        if graph is None:
            graph = _GRAPHS[self] = _shared_graph(self)
        return graph

    def traced_around(self, key, trace):
        """`trace(tokenize)`: a concrete function that calls `tokenize` (the graph this
        tokenizer's eager calls run: strings [batch] -> int32 ids ragged [batch,
        (pieces)]), traced once per `key` for all the tokenizers of this vocabulary and
        settings, and kept while their graph lives. For eager work around tokenizing run
        as one graph call (`ElectraPreprocessor`'s packing); `trace` must capture no
        tokenizer, which the graph would then keep alive."""
        graph = self._eager_graph()
        functions = _AROUND_GRAPHS.setdefault(graph, {})
        function = functions.get(key)
        if function is None:
            with tf.init_scope():  # as the graph's: outside any function being traced
                function = functions[key] = trace(graph)
        return function

    @preprocessing_function
    def _tokenize_tf(self, inputs):
        """keras-hub's `_tokenize_tf` with the words split by `split_words` (the same words,
        in half the time; keras-hub's calls its module's `pretokenize`, which nothing can
        replace per tokenizer), unless special tokens are matched in the strings or the
        words come split, which keras-hub's takes."""
        if not self.split or self._special_tokens_for_splitting() is not None:
            return super()._tokenize_tf.__wrapped__(self, inputs)
        self._maybe_initialized_tf()
        if not isinstance(inputs, tf.RaggedTensor):
            inputs = tf.convert_to_tensor(inputs)
        words = split_words(inputs, self.lowercase, self.strip_accents, self.split_on_cjk)
        # As keras-hub's: one ragged axis of pieces per text, dense with `sequence_length`.
        tokens = self._fast_word_piece.tokenize(words).merge_dims(-2, -1)
        if self.sequence_length:
            tokens = tokens.to_tensor(shape=[*tokens.shape[:-1], self.sequence_length])
        return tokens[0] if inputs.shape.rank == 0 else tokens

    @property
    def special_ids(self) -> dict:
        """{"pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id",
        "mask_token_id"} of the vocab."""
        return None if self._special_ids is None else dict(self._special_ids)

    @classmethod
    def from_pretrained(cls, name_or_path: str, **kwargs) -> "ElectraTokenizer":
        """The tokenizer of a model: a catalog name, `hf:ORG/REPO`, an archive URL, or a
        local Hugging Face, official, keras-hub or electra_tf directory."""
        # Deferred, as in ElectraEncoder.from_pretrained: opening a source may convert it.
        from electra_tf.models.sources import open_model

        return cls.of_model(open_model(name_or_path), **kwargs)

    @classmethod
    def of_model(cls, source, **kwargs) -> "ElectraTokenizer":
        """The tokenizer of an opened model (`models.sources.ModelSource`)."""
        return cls(source.vocab_path, lowercase=source.config.lower_case,
                   strip_accents=source.config.strip_accents, **kwargs)


_GRAPHS = weakref.WeakKeyDictionary()  # tokenizer: the graph its calls run
_SHARED_GRAPHS = weakref.WeakValueDictionary()  # vocabulary and settings: graph
_AROUND_GRAPHS = weakref.WeakKeyDictionary()  # graph: {key: function traced around it}


def _shared_graph(tokenizer: ElectraTokenizer):
    """The graph `tokenizer`'s calls run, eager or traced: one per vocabulary and settings
    in the process, shared by the tokenizers that have them while any of them lives.

    Tracing it takes 0.11-0.12 s (2-core AVX2 EPYC; 0.3-0.6 s when keras-hub's split, whose
    ragged tensors are checked op by op, was traced), and a Python session often makes several
    tokenizers of one vocabulary (preprocessors, fine-tuning features, models loaded
    again) and traces them in several functions (each `fit`'s `tf.data` map, Keras's
    symbolic build of a preprocessor, `electra-predict`'s signature of a run): the
    suite's workers asked for 78 eager graphs and traced 16. The graph is kept outside
    the layer, which SavedModels would save as its own function, and captures the
    tokenizer's tables, not the tokenizer, which can go. Traced outside any function
    being traced (`init_scope`), so that it captures nothing of one.
    """
    settings = {**tokenizer.get_config(), "name": None,
                "split_on_cjk": getattr(tokenizer, "split_on_cjk", None)}
    key = (tuple(tokenizer.vocabulary), json.dumps(settings, sort_keys=True, default=str))
    graph = _SHARED_GRAPHS.get(key)
    if graph is None:
        traced_tokenizer = weakref.ref(tokenizer)  # traced now, while it lives
        with tf.init_scope():
            graph = _SHARED_GRAPHS[key] = traced.function(
                lambda batch: keras_hub.tokenizers.WordPieceTokenizer.tokenize(
                    traced_tokenizer(), batch),
                input_signature=[tf.TensorSpec([None], tf.string)]).get_concrete_function()
    return graph


def tokenize_ragged(tokenizer, texts) -> tf.RaggedTensor:
    """Token ids of each text (a list, or a string tensor [batch]), int32 ragged
    [len(texts), (pieces)]."""
    texts = texts if isinstance(texts, tf.Tensor) else tf.constant(list(texts), tf.string)
    # keras-hub hands eager outputs back as Python lists, which a RaggedTensor built again
    # from them costs 3-4x the tokenizing (fine-tuning features of 9,600 texts: 1.0-1.7 s
    # against 0.32-0.39 s kept as a tensor); the scope is how keras-hub's tasks keep them.
    with no_convert_scope():
        return tokenizer(texts)


def tokenize_to_lists(tokenizer, texts) -> list:
    """Token ids of each text as a Python list (`[]` for no texts), for callers that pack
    or window ids in Python."""
    return tokenize_ragged(tokenizer, texts).to_list()
