"""`tagging`: words -> one tag per word (NER, POS, chunking), from CoNLL-style files."""

import keras
import numpy as np
import tensorflow as tf

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import features, metrics, readers
from electra_tf.finetuning.kinds.base import (TaskData, TaskKind, check_known_labels,
                                              keras_loss, labelled)
from electra_tf.text.packing import TEXT, pack_words

WORDS = tf.TensorSpec([None, None], tf.string, name="words")
SPAN_PREFIXES = ("B-", "I-", "E-", "S-")


def is_span_tagging(tag_sequences) -> bool:
    """Whether the tags mark spans (IOB1, IOB2, BIOES), not one label per token (POS)."""
    return any(tag[:2] in SPAN_PREFIXES for tags in tag_sequences for tag in tags)


def to_bioes(tags) -> list:
    """The BIOES tags of the spans in `tags` (IOB1, IOB2 or BIOES)."""
    out = ["O"] * len(tags)
    for kind, start, end in metrics.iob_spans(tags):
        if start == end:
            out[start] = f"S-{kind}"
        else:
            out[start], out[end] = f"B-{kind}", f"E-{kind}"
            out[start + 1:end] = [f"I-{kind}"] * (end - start - 1)
    return out


def trained_on_bioes(labels) -> bool:
    """Whether a model's labels are BIOES span tags (they then include S- tags)."""
    return any(str(label).startswith("S-") for label in labels)


def to_iob2(tag: str) -> str:
    """The IOB2 tag of a BIOES tag (S- starts a span, E- continues one)."""
    return {"S-": "B-", "E-": "I-"}.get(tag[:2], tag[:2]) + tag[2:]


class Tagging(TaskKind):
    """A tag per word, predicted at the word's first word piece, as the official code does:
    span tags train as BIOES (`--tag_encoding bioes`) and come back as IOB2; no dropout
    before the head; the loss sums over the words.

    Served as `serving_default(words string [N, W], "" padding)` and
    `tag_text(text [N])` (split on whitespace) -> tags string [N, W] ("O" for words cut by
    the length limit, "" for padding), tag_ids int32 [N, W] (-1 for both) and
    probabilities float32 [N, W, L] over the model's labels.
    """

    name = "tagging"
    model_class = "TokenClassifier"
    default_max_seq_length = 256  # the official chunking length

    def read_file(self, task, cfg, path, training):
        return readers.read_conll(path, cfg.tag_column)

    @staticmethod
    def _bioes(examples, cfg) -> bool:
        return cfg.tag_encoding == "bioes" and is_span_tagging(e.tags for e in examples)

    def labels(self, task, train_examples, cfg):
        if task.labels:
            return list(task.labels)
        if self._bioes(train_examples, cfg):
            kinds = {kind for e in train_examples for kind, _, _ in metrics.iob_spans(e.tags)}
            return sorted({"O"} | {p + kind for kind in kinds for p in SPAN_PREFIXES})
        return sorted({t for e in train_examples for t in e.tags})

    def check_labels(self, examples, labels, cfg):
        if trained_on_bioes(labels):
            known = {label[2:] for label in labels if label != "O"}
            for example in examples:
                for kind, start, _ in metrics.iob_spans(example.tags):
                    if kind not in known:
                        raise TaskDataError(
                            f"{example.source}: span type {kind!r} (word {start + 1}) does "
                            f"not occur in the training data (types: {sorted(known)}).")
            return
        check_known_labels(examples, labels, lambda example: example.tags)

    def prepare(self, task, cfg, tokenizer, special_ids, train_examples, eval_examples,
                labels):
        encoder = features.Encoder(tokenizer, special_ids, cfg.max_seq_length)
        index = {t: i for i, t in enumerate(labels)}
        bioes = trained_on_bioes(labels)
        tag_ids = [[index[t] for t in (to_bioes(e.tags) if bioes else e.tags)]
                   for e in train_examples]
        inputs, y, _ = encoder.encode_words([e.words for e in train_examples], tag_ids)
        weights = (y != features.IGNORE).astype(np.float32)
        eval_inputs, _, eval_starts = encoder.encode_words([e.words for e in eval_examples])
        return _TaggingData((inputs, np.maximum(y, 0), weights), eval_inputs, eval_examples,
                            labels, eval_starts, bioes)

    def task_info(self, task, cfg):
        return {"tag_encoding": cfg.tag_encoding}

    def loss(self, task, cfg):
        # Sample weights select the words' first pieces: "sum" adds up every word's loss.
        return keras_loss(keras.losses.SparseCategoricalCrossentropy, cfg,
                          from_logits=True), None

    def score(self, gold, predicted):
        scores = {"accuracy": metrics.token_accuracy(gold, predicted)}
        if is_span_tagging(gold):
            scores.update({f"span_{k}": v for k, v in metrics.span_f1(gold, predicted).items()})
        return scores

    def serving_signatures(self, run, tokenizer):
        label_names = tf.constant([to_iob2(str(label)) for label in run.labels] or [""])

        def tag(words: tf.RaggedTensor):
            pieces = words.with_values(tokenizer(words.values))
            inputs, word_starts = pack_words(pieces, run.max_seq_length, run.special_ids)
            logits = run.model(inputs, training=False)
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
    def __init__(self, train, eval_inputs, eval_examples, labels, eval_starts, bioes):
        super().__init__(train, eval_inputs, eval_examples)
        self.labels, self.eval_starts, self.bioes = labels, eval_starts, bioes

    def predictions(self, outputs):
        best = np.argmax(outputs, -1)
        output_tag = to_iob2 if self.bioes else (lambda tag: tag)
        tags = [[output_tag(self.labels[best[row, s]]) if s >= 0 else "O" for s in starts]
                for row, starts in enumerate(self.eval_starts)]
        return tags, [{"prediction": t} for t in tags]

    def gold(self):
        # Scored in the predictions' format: IOB2 spans when trained on BIOES.
        return labelled([[to_iob2(t) for t in to_bioes(e.tags)] if self.bioes else e.tags
                         for e in self.eval_examples], self.eval_examples)

    def describe(self, example):
        return {"source": example.source, "label": example.tags}
