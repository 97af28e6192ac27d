"""`tagging`: words -> one tag per word (NER, POS, chunking), from CoNLL-style files."""

import keras
import numpy as np

from electra_tf.errors import TaskDataError
from electra_tf.finetuning import features, metrics, readers
from electra_tf.finetuning.kinds.base import (TaskData, TaskKind, check_known_labels,
                                              keras_loss, labelled)
from electra_tf.finetuning.tags import (is_span_tagging, tag_labels, to_bioes, to_iob2,
                                        trained_on_bioes)

class Tagging(TaskKind):
    """A tag per word, predicted at the word's first word piece, as the official code does:
    span tags train as BIOES (`--tag_encoding bioes`) and come back as IOB2; no dropout
    before the head; the loss sums over the words.

    The model is an `ElectraTokenClassifier`, served as its `serving_signatures` say.
    """

    name = "tagging"
    model_class = "ElectraTokenClassifier"
    default_max_seq_length = 256  # the official chunking length

    def read_file(self, task, cfg, path, training):
        return readers.read_conll(path, cfg.tag_column)

    def labels(self, task, train_examples, cfg):
        if task.labels:
            return list(task.labels)
        return tag_labels((e.tags for e in train_examples), cfg.tag_encoding == "bioes")

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

    def head_config(self, task, labels, cfg, initializer_range, data):
        return {"num_classes": len(labels), "dropout": cfg.head_dropout,
                "initializer_range": initializer_range, "label_names": labels}


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
        return {"source": example.source, "words": example.words, "label": example.tags}
