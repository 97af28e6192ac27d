"""Task models over the discriminator encoder (the generator is not needed any more)."""

import keras

from electra_tf.layers.encoder import ElectraEncoder


class _TaskModel(keras.Model):
    """Encoder + dropout + a dense head; `head_outputs` units per [CLS] or per token."""

    def __init__(self, encoder: ElectraEncoder, head_outputs: int, dropout=0.1,
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.head_outputs = head_outputs
        self.dropout = keras.layers.Dropout(dropout)
        # Heads compute in float32 under mixed precision: logits feed losses and softmaxes.
        self.head = keras.layers.Dense(
            head_outputs, name="task_head", dtype="float32",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))


class SequenceClassifier(_TaskModel):
    """Classification (`num_labels` logits) or regression (`num_labels=1`, a score).

    Inputs: TF Hub-style dict of int32 [batch, seq]. Outputs: [batch, num_labels] logits,
    or [batch] scores for regression. The head reads the `[CLS]` vector after dropout.
    """

    def call(self, inputs, training=None):
        cls = self.encoder(inputs, training=training)["pooled_output"]
        logits = self.head(self.dropout(cls, training=training))
        return keras.ops.squeeze(logits, -1) if self.head_outputs == 1 else logits


class TokenClassifier(_TaskModel):
    """Per-token tag logits [batch, seq, num_tags] for tagging (NER, POS, chunking)."""

    def call(self, inputs, training=None):
        sequence = self.encoder(inputs, training=training)["sequence_output"]
        return self.head(self.dropout(sequence, training=training))


class SpanQuestionAnswerer(_TaskModel):
    """Start/end logits over the sequence, plus an answerability logit from `[CLS]`.

    Outputs: dict of `start_logits`, `end_logits` [batch, seq] (padding pushed to -1e4) and
    `answerable_logit` [batch] (used for SQuAD 2.0's no-answer decision).
    """

    def __init__(self, encoder, dropout=0.1, initializer_range=0.02, **kwargs):
        super().__init__(encoder, 2, dropout, initializer_range, **kwargs)
        self.answerable_head = keras.layers.Dense(
            1, name="answerable_head", dtype="float32",
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))

    def call(self, inputs, training=None):
        sequence = self.dropout(self.encoder(inputs, training=training)["sequence_output"],
                                training=training)
        logits = self.head(sequence)
        padding = (1.0 - keras.ops.cast(inputs["input_mask"], logits.dtype)) * -1e4
        answerable = self.answerable_head(sequence[:, 0])
        return {"start_logits": logits[..., 0] + padding,
                "end_logits": logits[..., 1] + padding,
                "answerable_logit": keras.ops.squeeze(answerable, -1)}


def build_task_model(kind: str, encoder: ElectraEncoder, num_labels: int, dropout=0.1,
                     initializer_range=0.02) -> _TaskModel:
    """The task model of a task kind ("classification", "regression", "tagging", "qa").

    `num_labels` is ignored for regression (one score) and QA (start/end heads).
    """
    if kind == "qa":
        return SpanQuestionAnswerer(encoder, dropout, initializer_range)
    if kind == "tagging":
        return TokenClassifier(encoder, num_labels, dropout, initializer_range)
    return SequenceClassifier(encoder, 1 if kind == "regression" else num_labels, dropout,
                              initializer_range)
