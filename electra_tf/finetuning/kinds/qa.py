"""`qa`: extractive question answering on SQuAD-format JSON (1.1, and 2.0's no-answer)."""

import keras

from electra_tf.finetuning import metrics, squad
from electra_tf.finetuning.kinds.base import TaskData, TaskKind, keras_loss


class QuestionAnswering(TaskKind):
    """Answer spans over `[CLS] question [SEP] context window [SEP]` features (doc stride),
    with the official heads (`models.ElectraQuestionAnswerer`): the end predicted
    given the start, and a no-answer classifier; SQuAD 2.0 (`task.unanswerable`) answers ""
    when a question's no-answer logit exceeds `--qa_na_threshold`."""

    name = "qa"
    model_class = "ElectraQuestionAnswerer"
    default_max_seq_length = 512

    def read_file(self, task, cfg, path, training):
        return squad.read_squad(path)

    def prepare(self, task, cfg, tokenizer, special_ids, train_examples, eval_examples,
                labels):
        def features(examples):
            return squad.create_features(examples, tokenizer, special_ids, cfg.max_seq_length,
                                         cfg.doc_stride, cfg.max_query_length)

        train, eval_features = features(train_examples), features(eval_examples)
        # The joint head predicts the end from the gold start: it is an input in training.
        inputs = {**train.inputs, "start_positions": train.start_positions}
        targets = {"start_logits": train.start_positions, "end_logits": train.end_positions,
                   "no_answer_logit": train.impossible}
        return _QAData((inputs, targets, None), eval_features, eval_examples, task, cfg)

    def head_config(self, task, labels, cfg, initializer_range, data):
        return {"joint_prediction": cfg.qa_joint_prediction, "beam_size": cfg.qa_beam_size,
                "initializer_range": initializer_range, "doc_stride": cfg.doc_stride,
                "max_query_length": cfg.max_query_length,
                "max_answer_length": cfg.max_answer_length,
                "unanswerable": task.unanswerable, "no_answer_threshold": cfg.qa_na_threshold,
                "answerable_weight": cfg.qa_answerable_weight}

    def loss(self, task, cfg):
        span_loss = keras_loss(keras.losses.SparseCategoricalCrossentropy, cfg,
                               from_logits=True)
        # Official: (start + end) / 2 + 0.5 x the no-answer classifier's loss, per example.
        return ({"start_logits": span_loss, "end_logits": span_loss,
                 "no_answer_logit": keras_loss(keras.losses.BinaryCrossentropy, cfg,
                                               from_logits=True)},
                {"start_logits": 0.5, "end_logits": 0.5,
                 "no_answer_logit": cfg.qa_answerable_weight})

    def score(self, gold, predicted):
        return metrics.squad_scores(gold, predicted)

    def prediction_files(self, data, records):
        # The official SQuAD evaluation script's inputs, as the official code writes them:
        # each question's best non-null answer, and (SQuAD 2.0) its null odds.
        files = {"predictions.json": {r["id"]: r["best_answer"] for r in records}}
        if data.unanswerable:
            files["null_odds.json"] = {r["id"]: r["null_odds"] for r in records}
        return files


class _QAData(TaskData):
    def __init__(self, train, eval_features, eval_examples, task, cfg):
        super().__init__(train, eval_features.inputs, eval_examples)
        self.eval_features, self.unanswerable, self.cfg = eval_features, task.unanswerable, cfg

    def predictions(self, outputs):
        answers, best, null_odds = squad.decode(
            self.eval_examples, self.eval_features, outputs, self.unanswerable,
            self.cfg.qa_na_threshold, self.cfg.max_answer_length, self.cfg.qa_beam_size)
        records = [{"id": e.qid, "prediction": answers[e.qid], "best_answer": best[e.qid],
                    **({"null_odds": null_odds[e.qid]} if self.unanswerable else {})}
                   for e in self.eval_examples]
        self.best_answers, self.null_odds = best, null_odds
        return answers, records

    def gold(self):
        return {e.qid: e.answers for e in self.eval_examples}

    def score(self, task, predicted):
        scores = super().score(task, predicted)
        if self.unanswerable:  # the threshold that would have scored best, as official
            scores.update(metrics.best_no_answer_threshold(self.gold(), self.best_answers,
                                                           self.null_odds))
        return scores

    def describe(self, example):
        return {"id": example.qid, "question": example.question, "label": example.answers}
