"""`tagging`: words -> one tag per word (NER, POS, chunking), from CoNLL-style files."""

import keras
import numpy as np
import tensorflow as tf

from electra_tf.finetuning import features, metrics, readers
from electra_tf.finetuning.kinds.base import TEXT, TaskData, TaskKind, check_known_labels
from electra_tf.text.packing import pack_words

WORDS = tf.TensorSpec([None, None], tf.string, name="words")


class Tagging(TaskKind):
    """A tag per word, predicted at the word's first word piece.

    Served as `serving_default(words string [N, W], "" padding)` and
    `tag_text(text [N])` (split on whitespace) -> tags string [N, W] ("O" for words cut by
    the length limit, "" for padding), tag_ids int32 [N, W] (-1 for both) and
    probabilities float32 [N, W, L].
    """

    name = "tagging"
    model_class = "TokenClassifier"

    def read_file(self, task, cfg, path):
        return readers.read_conll(path, cfg.tag_column)

    def labels(self, task, train_examples):
        return list(task.labels) if task.labels else sorted(
            {t for e in train_examples for t in e.tags})

    def check_labels(self, examples, labels):
        check_known_labels(examples, labels, lambda example: example.tags)

    def prepare(self, task, cfg, tokenizer, special_ids, train_examples, eval_examples,
                labels):
        encoder = features.Encoder(tokenizer, special_ids, cfg.max_seq_length)
        index = {t: i for i, t in enumerate(labels)}

        def encode(examples):
            tag_ids = [[index[t] for t in e.tags] for e in examples]
            return encoder.encode_words([e.words for e in examples], tag_ids)

        inputs, y, _ = encode(train_examples)
        weights = (y != features.IGNORE).astype(np.float32)
        eval_inputs, _, eval_starts = encode(eval_examples)
        return _TaggingData((inputs, np.maximum(y, 0), weights), eval_inputs, eval_examples,
                            labels, eval_starts)

    def loss(self, task):
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True), None

    def score(self, gold, predicted):
        scores = {"accuracy": metrics.token_accuracy(gold, predicted)}
        if any(t[:2] in ("B-", "I-") for tags in gold for t in tags):
            scores.update({f"span_{k}": v for k, v in metrics.span_f1(gold, predicted).items()})
        return scores

    def serving_signatures(self, model, tokenizer, seq_length, special_ids, labels,
                           text_pairs):
        label_names = tf.constant([str(label) for label in labels] or [""])

        def tag(words: tf.RaggedTensor):
            pieces = words.with_values(tokenizer(words.values))
            inputs, word_starts = pack_words(pieces, seq_length, special_ids)
            logits = model(inputs, training=False)
            tagged = word_starts >= 0
            probabilities = tf.gather(tf.nn.softmax(logits), tf.maximum(word_starts, 0),
                                      batch_dims=1)
            probabilities *= tf.cast(tagged, probabilities.dtype)[..., None]
            tag_ids = tf.where(tagged, tf.argmax(probabilities, -1, output_type=tf.int32), -1)
            real = words.with_values(tf.ones_like(words.values, tf.bool)).to_tensor(False)
            tags = tf.where(tagged, tf.gather(label_names, tf.maximum(tag_ids, 0)),
                            tf.where(real, "O", ""))
            return {"tags": tags, "tag_ids": tag_ids, "probabilities": probabilities}

        @tf.function(input_signature=[WORDS])
        def serve(words):
            return tag(tf.RaggedTensor.from_tensor(words, padding=""))

        @tf.function(input_signature=[TEXT])
        def tag_text(text):
            return tag(tf.strings.split(text))

        return {"serving_default": serve, "tag_text": tag_text}


class _TaggingData(TaskData):
    def __init__(self, train, eval_inputs, eval_examples, labels, eval_starts):
        super().__init__(train, eval_inputs, eval_examples)
        self.labels, self.eval_starts = labels, eval_starts

    def predictions(self, outputs):
        best = np.argmax(outputs, -1)
        tags = [[self.labels[best[row, s]] if s >= 0 else "O" for s in starts]
                for row, starts in enumerate(self.eval_starts)]
        return tags, [{"prediction": t} for t in tags]

    def gold(self):
        return [e.tags for e in self.eval_examples]

    def describe(self, example):
        return {"source": example.source, "label": example.tags}
