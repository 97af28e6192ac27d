"""Task models: the discriminator encoder plus a task head (the generator is not needed).

Each model records its head's settings (`head_config`), so a fine-tuned run directory can
rebuild it around an encoder (`build_task_model`) and restore its checkpoint.
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


class SequenceClassifier(_TaskModel):
    """Classification (`head_outputs` logits) or regression (`head_outputs=1`, a score).

    Inputs: TF Hub-style dict of int32 [batch, seq]. Outputs: [batch, head_outputs] logits,
    or [batch] scores for regression. The head reads the `[CLS]` vector after dropout.
    """

    def call(self, inputs, training=None):
        cls = self.encoder(inputs, training=training)["pooled_output"]
        logits = self.head(self.dropout(cls, training=training))
        return keras.ops.squeeze(logits, -1) if self.head_outputs == 1 else logits


class TokenClassifier(_TaskModel):
    """Per-token tag logits [batch, seq, head_outputs] for tagging (NER, POS, chunking)."""

    def call(self, inputs, training=None):
        sequence = self.encoder(inputs, training=training)["sequence_output"]
        return self.head(self.dropout(sequence, training=training))


class SpanQuestionAnswerer(_TaskModel):
    """Start/end logits over the sequence, plus an answerability logit from `[CLS]`.

    Outputs: dict of `start_logits`, `end_logits` [batch, seq] (padding pushed to -1e4) and
    `answerable_logit` [batch] (used for SQuAD 2.0's no-answer decision).
    """

    def __init__(self, encoder, head_outputs=2, dropout=0.1, initializer_range=0.02,
                 **kwargs):
        super().__init__(encoder, head_outputs, dropout, initializer_range, **kwargs)
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


TASK_MODELS = {cls.__name__: cls for cls in (SequenceClassifier, TokenClassifier,
                                             SpanQuestionAnswerer)}


def build_task_model(class_name: str, encoder: ElectraEncoder, head_config: dict):
    """The task model `class_name` (a key of TASK_MODELS) around `encoder`."""
    return TASK_MODELS[class_name](encoder, **head_config)
