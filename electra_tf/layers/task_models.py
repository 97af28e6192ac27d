"""Tagging and QA task models: the discriminator encoder plus a task head (the text
classifier is `models.ElectraTextClassifier`).

Each model records its head's settings (`head_config`), so a fine-tuned run directory can
rebuild it around an encoder (`models.finetuned.build_task_model`) and restore it.
"""

import keras

from electra_tf.layers.encoder import ElectraEncoder


class _TaskModel(keras.Model):
    """Encoder + dropout + a dense head; `head_outputs` units per [CLS] or per token."""

    def __init__(self, encoder: ElectraEncoder, head_outputs: int, dropout=0.1,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.head_outputs = head_outputs
        self.dropout_rate = dropout
        self.initializer_range = initializer_range
        self.dropout = keras.layers.Dropout(dropout)
        # Heads compute in float32 under mixed precision: logits feed losses and softmaxes.
        self.head = keras.layers.Dense(
            head_outputs, name="task_head", dtype="float32",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

    def head_config(self) -> dict:
        """The constructor arguments besides the encoder."""
        return {"head_outputs": self.head_outputs, "dropout": self.dropout_rate,
                "initializer_range": self.initializer_range}


class TokenClassifier(_TaskModel):
    """Per-token tag logits [batch, seq, head_outputs] for tagging (NER, POS, chunking)."""

    def call(self, inputs, training=None):
        sequence = self.encoder(inputs, training=training)["sequence_output"]
        return self.head(self.dropout(sequence, training=training))


class SpanQuestionAnswerer(keras.Model):
    """Extractive QA as the official ELECTRA code does it: answer-span logits over the
    context (and `[CLS]`), and a no-answer logit.

    - Start logits: dense(1) per token, softmax over the context tokens and `[CLS]` only.
    - End logits (`joint_prediction`): dense(512, GELU) -> dense(1) over each token joined
      with the start token's vector; trained from the gold start (`start_positions` in the
      inputs); predicted for the `beam_size` best starts. Without joint prediction: an
      independent dense(1), like the start.
    - No-answer logit: `[CLS]` joined with the start-probability-weighted sequence ->
      dense(512, GELU) -> dense(1); trained on "the question has no answer" (SQuAD 2.0).
    No dropout before the heads (the encoder's own dropout applies).

    Inputs: TF Hub-style dict of int32 [batch, seq], plus `start_positions` int32 [batch]
    when training. Outputs when training (or without joint prediction): `start_logits`,
    `end_logits` [batch, seq] and `no_answer_logit` [batch]; when predicting with joint
    prediction: `start_top_log_probs`, `start_top_index` [batch, beam],
    `end_top_log_probs`, `end_top_index` [batch, beam, beam] and `no_answer_logit`.
    """

    def __init__(self, encoder: ElectraEncoder, joint_prediction=True, beam_size=20,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.joint_prediction, self.beam_size = joint_prediction, beam_size
        self.initializer_range = initializer_range

        def dense(units, name, activation=None):
            # Heads compute in float32 under mixed precision: their logits feed softmaxes.
            return keras.layers.Dense(
                units, activation=activation, name=name, dtype="float32",
                kernel_initializer=keras.initializers.TruncatedNormal(
                    stddev=initializer_range))

        self.start_head = dense(1, "start_logits")
        self.end_hidden = dense(512, "qa_hidden", "gelu") if joint_prediction else None
        self.end_head = dense(1, "end_logits")
        self.no_answer_hidden = dense(512, "no_answer_hidden", "gelu")
        self.no_answer_head = dense(1, "no_answer_logit")

    def head_config(self) -> dict:
        return {"joint_prediction": self.joint_prediction, "beam_size": self.beam_size,
                "initializer_range": self.initializer_range}

    def call(self, inputs, training=None):
        sequence = keras.ops.cast(
            self.encoder({k: inputs[k] for k in ("input_word_ids", "input_mask",
                                                 "input_type_ids")},
                         training=training)["sequence_output"], "float32")
        # Answers lie in the context (segment 1) or are "no answer" ([CLS], position 0).
        answer_mask = keras.ops.cast(inputs["input_mask"] * inputs["input_type_ids"],
                                     "float32")
        answer_mask = keras.ops.maximum(answer_mask, keras.ops.one_hot(
            keras.ops.zeros_like(answer_mask[:, 0], "int32"), keras.ops.shape(sequence)[1]))
        outside = 1000.0 * (answer_mask - 1.0)
        start_logits = keras.ops.squeeze(self.start_head(sequence), -1) + outside
        start_probs = keras.ops.softmax(start_logits)
        start_summary = keras.ops.sum(start_probs[..., None] * sequence, axis=1)
        no_answer = keras.ops.squeeze(self.no_answer_head(self.no_answer_hidden(
            keras.ops.concatenate([sequence[:, 0], start_summary], -1))), -1)
        if not self.joint_prediction:
            end_logits = keras.ops.squeeze(self.end_head(sequence), -1) + outside
            return {"start_logits": start_logits, "end_logits": end_logits,
                    "no_answer_logit": no_answer}
        if "start_positions" in inputs:  # training: the end given the gold start
            start = keras.ops.take_along_axis(
                sequence, keras.ops.cast(inputs["start_positions"], "int32")[:, None, None],
                axis=1)  # [batch, 1, hidden]
            end_logits = self._end_logits(
                keras.ops.broadcast_to(start, keras.ops.shape(sequence)), sequence)
            return {"start_logits": start_logits, "end_logits": end_logits + outside,
                    "no_answer_logit": no_answer}
        start_top_log_probs, start_top_index = keras.ops.top_k(
            keras.ops.log_softmax(start_logits), self.beam_size)
        starts = keras.ops.take_along_axis(sequence, start_top_index[..., None],
                                           axis=1)  # [batch, beam, hidden]
        batch, length, hidden = keras.ops.shape(sequence)
        beam_shape = (batch, self.beam_size, length, hidden)
        end_logits = self._end_logits(
            keras.ops.broadcast_to(starts[:, :, None], beam_shape),
            keras.ops.broadcast_to(sequence[:, None], beam_shape)) + outside[:, None]
        end_top_log_probs, end_top_index = keras.ops.top_k(
            keras.ops.log_softmax(end_logits), self.beam_size)
        return {"start_top_log_probs": start_top_log_probs,
                "start_top_index": start_top_index,
                "end_top_log_probs": end_top_log_probs, "end_top_index": end_top_index,
                "no_answer_logit": no_answer}

    def _end_logits(self, start, sequence):
        """End logits [..., seq] of `sequence` [..., seq, hidden] joined with the start
        token's vector at every position (`start`, the same shape)."""
        joined = keras.ops.concatenate([start, sequence], -1)
        return keras.ops.squeeze(self.end_head(self.end_hidden(joined)), -1)
