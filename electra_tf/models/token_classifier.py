"""`ElectraTokenClassifier`: sentences as lists of words -> one tag per word."""

import keras
import numpy as np
import tensorflow as tf

from electra_tf import traced
from electra_tf.errors import ConfigError
from electra_tf.finetuning.tags import tag_labels, to_bioes, to_iob2, trained_on_bioes
from electra_tf.models.task import ElectraTask, at_packed_length, encoder_inputs
from electra_tf.text.packing import TEXT

# Served words: strings [N, W], "" padding (dense, as TF Serving needs).
WORDS = tf.TensorSpec([None, None], tf.string, name="words")


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraTokenClassifier(ElectraTask):
    """A tag per word (NER, POS, chunking), predicted at the word's first word piece with
    one dense layer, as the official fine-tuning code does (no dropout before it); the
    loss sums over the words.

    Span tags train as BIOES when `label_names` are BIOES tags (`labels_for` makes them
    from training tags, the official recipe): `fit` takes IOB1 / IOB2 / BIOES tags and
    `predict` answers IOB2.

        tagger = ElectraTokenClassifier.from_pretrained(
            "electra-small", label_names=ElectraTokenClassifier.labels_for(train_tags))
        tagger.fit(train_words, train_tags, epochs=3)   # lists of words, lists of tags
        tagger.predict([["John", "lives", "in", "Paris"]])   # [["B-PER", "O", "O", "B-LOC"]]

    Called on packed inputs it returns tag logits [batch, sequence_length, num_classes]
    (zeros past the batch's last real token, which the encoder does not read). Words cut
    by `sequence_length` are tagged "O".

    Args:
        encoder: the discriminator `ElectraEncoder`.
        num_classes: the tags (defaults to the number of `label_names`).
        preprocessor: an `ElectraPreprocessor`, or None for packed inputs.
        dropout: before the head (the official recipe: none).
        label_names: the tags' names, in id order.
    """

    def __init__(self, encoder, num_classes=None, preprocessor=None, dropout=0.0,
                 initializer_range=0.02, label_names=None, **kwargs):
        self._init_dense_head(encoder, preprocessor, num_classes, dropout, initializer_range,
                              label_names)
        super().__init__(**kwargs)

    @staticmethod
    def labels_for(tag_sequences, bioes: bool = True) -> list:
        """The labels to train on for these tags: with `bioes` and span tags, every
        BIOES tag of their span types (the official recipe), else the tags seen."""
        return tag_labels(tag_sequences, bioes)

    @property
    def bioes(self) -> bool:
        return trained_on_bioes(self.label_names or [])

    def call(self, inputs, training=None):
        packed = encoder_inputs(inputs)
        # Words start before the padding: the encoder reads up to the batch's last real
        # token (a short sentence packed to 128 pieces is mostly padding); the cut
        # positions' logits are zeros.
        sequence = self.encoder(self.cut_padding_tail(packed),
                                training=training)["sequence_output"]
        return at_packed_length(self.head(self.dropout(sequence, training=training)), packed)

    def task_loss(self):
        # Sample weights select the words' first pieces: "sum" adds up every word's loss.
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    def task_metrics(self):
        return []  # word accuracy is a weighted metric (see compile)

    def compile(self, *args, weighted_metrics="auto", **kwargs):
        if weighted_metrics == "auto":  # weighted: counts the words' first pieces only
            weighted_metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(*args, weighted_metrics=weighted_metrics, **kwargs)

    # ------------------------------------------------------------------ data
    @tf.autograph.experimental.do_not_convert  # as `ElectraTask.preprocess_samples`
    def preprocess_samples(self, x, y=None, sample_weight=None):
        """Words [batch, (words)] (and tag ids [batch, (words)]) -> packed inputs with
        each word's first-piece position (`word_starts`) and word count (`num_words`);
        labels sit on first pieces, weighted 1 there and 0 elsewhere."""
        if self.preprocessor is None:
            return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)
        words = x if isinstance(x, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(
            x, padding="")
        inputs, word_starts = self.preprocessor.pack_words(words)
        # As wide as the most words a sequence holds, whatever the batch: batches of
        # predictions concatenate, and `predict`'s batches share one shape.
        width = self.preprocessor.sequence_length - 2
        held = word_starts[:, :width]
        held = tf.pad(held, [[0, 0], [0, width - tf.shape(held)[1]]], constant_values=-1)
        inputs = {**inputs, "word_starts": held,
                  "num_words": tf.cast(words.row_lengths(), tf.int32)}
        if y is None:
            return keras.utils.pack_x_y_sample_weight(inputs, None, sample_weight)
        tag_ids = y.to_tensor(0) if isinstance(y, tf.RaggedTensor) else y
        at_word = tf.one_hot(word_starts, self.preprocessor.sequence_length)  # -1: zeros
        labels = tf.cast(tf.reduce_sum(at_word * tf.cast(tag_ids, at_word.dtype)[..., None],
                                       axis=1), tf.int32)
        weights = tf.reduce_sum(at_word, axis=1)
        if sample_weight is not None:  # one weight per sentence
            weights *= tf.cast(sample_weight, weights.dtype)[:, None]
        return inputs, labels, weights

    def example_tensors(self, x):
        return super().example_tensors(x) if self.preprocessor is None else _ragged_words(x)

    def label_tensors(self, y):
        if self.preprocessor is None or y is None:
            return super().label_tensors(y)
        return tf.ragged.constant(self.label_ids(y), tf.int32)

    def label_ids(self, tag_sequences) -> list:
        """Tag names (IOB or BIOES for a BIOES model) -> ids, per sentence; ids as they
        are."""
        tag_sequences = [list(tags) for tags in tag_sequences]
        if not any(isinstance(t, str) for tags in tag_sequences for t in tags):
            return tag_sequences
        if not self.label_names:
            raise ConfigError("Tags given as names need label_names on the model.")
        index = {name: i for i, name in enumerate(self.label_names)}
        ids = []
        for tags in tag_sequences:
            tags = to_bioes(tags) if self.bioes else tags
            unknown = [t for t in tags if t not in index]
            if unknown:
                raise ConfigError(f"Tag {unknown[0]!r} is not among label_names "
                                  f"{self.label_names}.")
            ids.append([index[t] for t in tags])
        return ids

    # ------------------------------------------------------------------ predicting
    def word_outputs(self, logits, word_starts) -> dict:
        """Logits [batch, seq, classes] -> per word (`word_starts` [batch, words]):
        `tag_ids` (-1 for cut words and padding) and `probabilities` (zeros there)."""
        tagged = word_starts >= 0
        probabilities = tf.gather(tf.nn.softmax(logits), tf.maximum(word_starts, 0),
                                  batch_dims=1)
        probabilities *= tf.cast(tagged, probabilities.dtype)[..., None]
        tag_ids = tf.where(tagged, tf.argmax(probabilities, -1, output_type=tf.int32), -1)
        return {"tag_ids": tag_ids, "probabilities": probabilities}

    def predict_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        logits = self(x, training=False)
        if "word_starts" not in x:
            return logits
        return {**self.word_outputs(logits, x["word_starts"]), "num_words": x["num_words"]}

    def predict(self, x, batch_size=None, **kwargs):
        """Lists of words in; each sentence's tags out (label names, IOB2 for a BIOES
        model; "O" for words cut by the length). Without a preprocessor: logits."""
        outputs = super().predict(x, batch_size=batch_size, **kwargs)
        if self.preprocessor is None:
            return outputs
        names = self.output_tags()
        return [[names[i] if i >= 0 else "O" for i in ids[:n]] + ["O"] * (n - len(ids))
                for ids, n in zip(outputs["tag_ids"], outputs["num_words"])]

    def output_tags(self) -> list:
        """The predicted tag of each class id (IOB2 for a BIOES model)."""
        names = self.label_names or [str(i) for i in range(self.num_classes)]
        return [to_iob2(name) for name in names] if self.bioes else names

    # ------------------------------------------------------------------ serving
    def serving_signatures(self) -> dict:
        """`serving_default(words string [N, W], "" padding)` and `tag_text(text [N])`
        (split on white space) -> `tags` string [N, W] ("O" for words cut by the length,
        "" for padding), `tag_ids` int32 [N, W] (-1 for both) and `probabilities`
        float32 [N, W, classes]."""
        names = tf.constant(self.output_tags())

        def tag(words: tf.RaggedTensor):
            inputs, word_starts = self.preprocessor.pack_words(words)
            outputs = self.word_outputs(self(inputs, training=False), word_starts)
            tagged = outputs["tag_ids"] >= 0
            real = words.with_values(tf.ones_like(words.values, tf.bool)).to_tensor(False)
            tags = tf.where(tagged, tf.gather(names, tf.maximum(outputs["tag_ids"], 0)),
                            tf.where(real, "O", ""))
            return {"tags": tags, **outputs}

        @traced.function(input_signature=[WORDS])
        def serve(words):
            return tag(tf.RaggedTensor.from_tensor(words, padding=""))

        @traced.function(input_signature=[TEXT])
        def tag_text(text):
            return tag(tf.strings.split(text))

        return {"serving_default": serve, "tag_text": tag_text}

    def get_config(self):
        config = super().get_config()
        config.update(self._dense_head_config())
        return config


def _ragged_words(sentences) -> tf.RaggedTensor:
    """Sentences as lists of words (or a ragged / ""-padded string tensor) -> ragged
    strings [sentences, (words)]."""
    if isinstance(sentences, tf.RaggedTensor):
        return sentences
    if isinstance(sentences, (tf.Tensor, np.ndarray)) and len(np.shape(sentences)) == 2:
        return tf.RaggedTensor.from_tensor(tf.constant(sentences, tf.string), padding="")
    if any(isinstance(words, (str, bytes)) for words in sentences):
        raise ConfigError("ElectraTokenClassifier takes sentences as lists of words, not "
                          "strings: split them first (e.g. text.split()).")
    sentences = [list(words) for words in sentences]
    return tf.ragged.constant(sentences, tf.string, ragged_rank=1)
