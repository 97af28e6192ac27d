"""`qa`: extractive question answering on SQuAD-format JSON (1.1, and 2.0's no-answer)."""

import keras

from electra_tf.errors import ConfigError
from electra_tf.finetuning import metrics, squad
from electra_tf.finetuning.kinds.base import TaskData, TaskKind


class QuestionAnswering(TaskKind):
    """Start/end logits over `[CLS] question [SEP] context window [SEP]` features (doc
    stride), plus an answerability logit for SQuAD 2.0 (`task.unanswerable`)."""

    name = "qa"
    model_class = "SpanQuestionAnswerer"
    default_max_seq_length = 384

    def read_file(self, task, cfg, path):
        return squad.read_squad(path)

    def prepare(self, task, cfg, tokenizer, special_ids, train_examples, eval_examples,
                labels):
        def features(examples):
            return squad.create_features(examples, tokenizer, special_ids, cfg.max_seq_length,
                                         cfg.doc_stride, cfg.max_query_length)

        train, eval_features = features(train_examples), features(eval_examples)
        targets = {"start_logits": train.start_positions, "end_logits": train.end_positions,
                   "answerable_logit": train.answerable}
        return _QAData((train.inputs, targets, None), eval_features, eval_examples,
                       task.unanswerable, cfg.max_answer_length)

    def head_config(self, num_labels, cfg, initializer_range):
        return super().head_config(2, cfg, initializer_range)

    def loss(self, task):
        span_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        return ({"start_logits": span_loss, "end_logits": span_loss,
                 "answerable_logit": keras.losses.BinaryCrossentropy(from_logits=True)},
                # SQuAD 1.1 has no unanswerable question: its answerability head is unused.
                {"start_logits": 0.5, "end_logits": 0.5,
                 "answerable_logit": 1.0 if task.unanswerable else 0.0})

    def score(self, gold, predicted):
        return metrics.squad_scores(gold, predicted)

    def prediction_files(self, records):
        # The official SQuAD evaluation script's input files.
        return {"predictions.json": {r["id"]: r["prediction"] for r in records},
                "null_odds.json": {r["id"]: r["null_odds"] for r in records}}

    def serving_signatures(self, model, tokenizer, seq_length, special_ids, labels,
                           text_pairs):
        raise ConfigError("Serving export of QA models is not supported yet; export the "
                          "encoder with export_encoder.py and decode spans client-side.")


class _QAData(TaskData):
    def __init__(self, train, eval_features, eval_examples, unanswerable, max_answer_length):
        super().__init__(train, eval_features.inputs, eval_examples)
        self.eval_features = eval_features
        self.unanswerable, self.max_answer_length = unanswerable, max_answer_length

    def predictions(self, outputs):
        answers, null_odds = squad.decode(
            self.eval_examples, self.eval_features, outputs["start_logits"],
            outputs["end_logits"], outputs["answerable_logit"] if self.unanswerable else None,
            max_answer_length=self.max_answer_length,
            null_threshold=0.0 if self.unanswerable else None)
        records = [{"id": e.qid, "prediction": answers[e.qid], "null_odds": null_odds[e.qid]}
                   for e in self.eval_examples]
        return answers, records

    def gold(self):
        return {e.qid: e.answers for e in self.eval_examples}

    def describe(self, example):
        return {"id": example.qid, "question": example.question, "label": example.answers}
