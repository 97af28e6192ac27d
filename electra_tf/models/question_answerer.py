"""`ElectraQuestionAnswerer`: a question and a context -> the answer's text (or none)."""

import keras
import tensorflow as tf

from electra_tf.errors import ConfigError
from electra_tf.finetuning import squad
from electra_tf.layers.activations import gelu
from electra_tf.layers.flat_dense import FlatDense
from electra_tf.layers.initializers import weight_initializer
from electra_tf.models.task import ElectraTask, at_packed_length, encoder_inputs

# The start and end logits of positions that cannot hold an answer (past the context).
OUTSIDE_LOGIT = -1000.0


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraQuestionAnswerer(ElectraTask):
    """Extractive QA as the official ELECTRA code does it (SQuAD 1.1 and 2.0).

    A question and a window of its context form `[CLS] question [SEP] window [SEP]`;
    windows start every `doc_stride` pieces, so contexts of any length are read. Heads:
    - start logits: dense(1) per token, softmax over the context tokens and `[CLS]` only;
    - end logits (`joint_prediction`): dense(512, GELU) -> dense(1) over each token
      joined with the start token's vector; trained from the gold start, predicted for
      the `beam_size` best starts (without joint prediction: an independent dense(1));
    - a no-answer logit: `[CLS]` joined with the start-probability-weighted sequence ->
      dense(512, GELU) -> dense(1), trained on "the question has no answer".
    No dropout before the heads. The answer is the best span over the windows (at most
    `max_answer_length` pieces), mapped back to the context's characters; a model that
    can answer nothing (`unanswerable`, set by `fit` on a question without answer)
    answers "" when the no-answer logit exceeds `no_answer_threshold`.

        qa = ElectraQuestionAnswerer.from_pretrained("electra-small")
        qa.fit((questions, contexts), answers, epochs=2)   # answers: text, (text, offset)
                                                           # or None for no answer
        qa.predict((["Who wrote it?"], ["It was written by Ann."]))   # ["Ann."]

    Called on packed inputs (plus `start_positions` [batch] when training with joint
    prediction) it returns `start_logits`, `end_logits` [batch, seq] (`OUTSIDE_LOGIT` past
    the batch's last real token, which the encoder does not read) and
    `no_answer_logit` [batch]; predicting with joint prediction, the beams
    `start_top_log_probs`, `start_top_index` [batch, beam], `end_top_log_probs`,
    `end_top_index` [batch, beam, beam] instead of the start and end logits.
    """

    def __init__(self, encoder, preprocessor=None, joint_prediction=True,
                 beam_size=squad.BEAM_SIZE, initializer_range=0.02,
                 doc_stride=squad.DOC_STRIDE, max_query_length=squad.MAX_QUERY_LENGTH,
                 max_answer_length=squad.MAX_ANSWER_LENGTH, unanswerable=False,
                 no_answer_threshold=squad.NO_ANSWER_THRESHOLD,
                 answerable_weight=squad.ANSWERABLE_WEIGHT, **kwargs):
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.joint_prediction, self.beam_size = joint_prediction, beam_size
        self.initializer_range = initializer_range
        self.doc_stride, self.max_query_length = doc_stride, max_query_length
        self.max_answer_length = max_answer_length
        self.unanswerable, self.no_answer_threshold = unanswerable, no_answer_threshold
        self.answerable_weight = answerable_weight

        def dense(units, name, activation=None):
            # Heads compute in float32 under mixed precision: their logits feed softmaxes.
            return FlatDense(
                units, activation=activation, name=name, dtype="float32",
                kernel_initializer=weight_initializer(initializer_range))

        self.start_head = dense(1, "start_logits")
        self.end_hidden = dense(512, "qa_hidden", gelu) if joint_prediction else None
        self.end_head = dense(1, "end_logits")
        self.no_answer_hidden = dense(512, "no_answer_hidden", gelu)
        self.no_answer_head = dense(1, "no_answer_logit")
        super().__init__(**kwargs)

    def head_input_widths(self):
        hidden = self.encoder.hidden_size
        end = ([(self.end_hidden, 2 * hidden), (self.end_head, self.end_hidden.units)]
               if self.joint_prediction else [(self.end_head, hidden)])
        return [(self.start_head, hidden), (self.no_answer_hidden, 2 * hidden),
                (self.no_answer_head, self.no_answer_hidden.units), *end]

    def call(self, inputs, training=None):
        # A beam no wider than the sequence (short inputs).
        beam = min(self.beam_size, inputs["input_mask"].shape[1] or self.beam_size)
        packed = encoder_inputs(inputs)
        # Answers lie before the padding: the encoder reads up to the batch's last real
        # token.
        cut = self.cut_padding_tail(packed, min_length=beam)
        sequence = keras.ops.cast(self.encoder(cut, training=training)["sequence_output"],
                                  "float32")
        # Answers lie in the context (segment 1) or are "no answer" ([CLS], position 0).
        answer_mask = keras.ops.cast(cut["input_mask"] * cut["input_type_ids"], "float32")
        answer_mask = keras.ops.maximum(answer_mask, keras.ops.one_hot(
            keras.ops.zeros_like(answer_mask[:, 0], "int32"), keras.ops.shape(sequence)[1]))
        outside = OUTSIDE_LOGIT * (1.0 - answer_mask)
        start_logits = keras.ops.squeeze(self.start_head(sequence), -1) + outside
        start_probs = keras.ops.softmax(start_logits)
        start_summary = keras.ops.sum(start_probs[..., None] * sequence, axis=1)
        no_answer = keras.ops.squeeze(self.no_answer_head(self.no_answer_hidden(
            keras.ops.concatenate([sequence[:, 0], start_summary], -1))), -1)

        def packed_length(logits):  # the cut positions score as outside ones
            return at_packed_length(logits, packed, OUTSIDE_LOGIT)

        if not self.joint_prediction:
            end_logits = keras.ops.squeeze(self.end_head(sequence), -1) + outside
            return {"start_logits": packed_length(start_logits),
                    "end_logits": packed_length(end_logits), "no_answer_logit": no_answer}
        if "start_positions" in inputs:  # training: the end given the gold start
            start = keras.ops.take_along_axis(
                sequence, keras.ops.cast(inputs["start_positions"], "int32")[:, None, None],
                axis=1)  # [batch, 1, hidden]
            end_logits = self._end_logits(
                keras.ops.broadcast_to(start, keras.ops.shape(sequence)), sequence)
            return {"start_logits": packed_length(start_logits),
                    "end_logits": packed_length(end_logits + outside),
                    "no_answer_logit": no_answer}
        start_top_log_probs, start_top_index = keras.ops.top_k(
            keras.ops.log_softmax(start_logits), beam)
        starts = keras.ops.take_along_axis(sequence, start_top_index[..., None],
                                           axis=1)  # [batch, beam, hidden]
        batch, length, hidden = keras.ops.shape(sequence)
        beam_shape = (batch, beam, length, hidden)
        end_logits = self._end_logits(
            keras.ops.broadcast_to(starts[:, :, None], beam_shape),
            keras.ops.broadcast_to(sequence[:, None], beam_shape)) + outside[:, None]
        end_top_log_probs, end_top_index = keras.ops.top_k(
            keras.ops.log_softmax(end_logits), beam)
        return {"start_top_log_probs": start_top_log_probs,
                "start_top_index": start_top_index,
                "end_top_log_probs": end_top_log_probs, "end_top_index": end_top_index,
                "no_answer_logit": no_answer}

    def _end_logits(self, start, sequence):
        """End logits [..., seq] of `sequence` [..., seq, hidden] joined with the start
        token's vector at every position (`start`, the same shape)."""
        joined = keras.ops.concatenate([start, sequence], -1)
        return keras.ops.squeeze(self.end_head(self.end_hidden(joined)), -1)

    def example_inputs(self, ids):
        # With the gold start: every head is built, whatever the beam size.
        return {**super().example_inputs(ids), "start_positions": ids[:, 0]}

    def task_loss(self):
        # Official: (start + end) / 2 + 0.5 x the no-answer classifier's loss, summed.
        span = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")
        return {"start_logits": span, "end_logits": span,
                "no_answer_logit": keras.losses.BinaryCrossentropy(from_logits=True,
                                                                   reduction="sum")}

    def task_loss_weights(self):
        return {"start_logits": 0.5, "end_logits": 0.5,
                "no_answer_logit": self.answerable_weight}

    def task_metrics(self):
        return None  # exact match and F1 are scored on decoded answers (`finetuning`)

    # ------------------------------------------------------------------ data
    @tf.autograph.experimental.do_not_convert  # as `ElectraTask.preprocess_samples`
    def preprocess_samples(self, x, y=None, sample_weight=None):
        # Windows are cut in Python (`features`): what reaches the dataset is packed.
        return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)

    def features(self, questions, contexts, answers=None):
        """(examples, `squad.QAFeatures`) of questions on contexts; each answer is its
        text (found in the context), (text, char offset), or None / "" for none."""
        if self.preprocessor is None:
            raise ConfigError("This model has no preprocessor, so it cannot read "
                              "questions and contexts: give it one (ElectraPreprocessor).")
        if isinstance(questions, str) or isinstance(contexts, str):
            raise ConfigError("Give lists: (questions, contexts), one question per context.")
        if len(questions) != len(contexts):
            raise ConfigError(f"{len(questions)} questions for {len(contexts)} contexts.")
        answers = [None] * len(questions) if answers is None else list(answers)
        examples = [squad.make_example(str(i), q, c, _answer_spans(a, c, i), f"Example {i}")
                    for i, (q, c, a) in enumerate(zip(questions, contexts, answers))]
        tokenizer = self.preprocessor.tokenizer
        return examples, squad.create_features(
            examples, tokenizer, tokenizer.special_ids, self.preprocessor.sequence_length,
            self.doc_stride, self.max_query_length)

    def training_arrays(self, x, y) -> tuple:
        """(inputs, targets) of `fit` for x = (questions, contexts) and answers `y`."""
        questions, contexts = x
        examples, features = self.features(questions, contexts, y)
        inputs = {**features.inputs, "start_positions": features.start_positions}
        targets = {"start_logits": features.start_positions,
                   "end_logits": features.end_positions,
                   "no_answer_logit": features.impossible}
        return inputs, targets

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        """Keras's `fit` on x = (questions, contexts) and their answers: the answer text
        (its first occurrence in the context), (text, char offset), or None for a
        question without answer (the model then learns to answer nothing)."""
        if self.preprocessor is not None and isinstance(x, tuple):
            if any(not a for a in y):
                self.unanswerable = True
            x, y = self.training_arrays(x, y)
            if isinstance(validation_data, tuple):
                validation_data = self.training_arrays(*validation_data[:2])
        return super().fit(x, y, *args, validation_data=validation_data, **kwargs)

    def predict(self, x, batch_size=None, **kwargs):
        """x = (questions, contexts) -> each question's answer text ("" for none)."""
        if self.preprocessor is None or not isinstance(x, tuple):
            return super().predict(x, batch_size=batch_size, **kwargs)
        examples, features = self.features(*x)
        outputs = super().predict(features.inputs, batch_size=batch_size, **kwargs)
        answers, _, _ = squad.decode(examples, features, outputs, self.unanswerable,
                                     self.no_answer_threshold, self.max_answer_length,
                                     self.beam_size)
        return [answers[e.qid] for e in examples]

    # ------------------------------------------------------------------ loading
    @classmethod
    def from_pretrained(cls, name_or_path: str, sequence_length=384,
                        **kwargs) -> "ElectraQuestionAnswerer":
        """`ElectraTask.from_pretrained`, with windows of `sequence_length` pieces
        (official: 512)."""
        return super().from_pretrained(name_or_path, sequence_length, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update({
            "joint_prediction": self.joint_prediction, "beam_size": self.beam_size,
            "initializer_range": self.initializer_range, "doc_stride": self.doc_stride,
            "max_query_length": self.max_query_length,
            "max_answer_length": self.max_answer_length, "unanswerable": self.unanswerable,
            "no_answer_threshold": self.no_answer_threshold,
            "answerable_weight": self.answerable_weight})
        return config


def _answer_spans(answer, context: str, index: int) -> list:
    """[(text, char offset)] of one answer as `fit` takes it; [] for none."""
    if not answer:
        return []
    if isinstance(answer, str):
        start = context.find(answer)
        if start < 0:
            raise ConfigError(f"Example {index}: answer {answer!r} does not occur in its "
                              "context; give (text, char offset) or None.")
        return [(answer, start)]
    text, start = answer
    return [(text, int(start))]
