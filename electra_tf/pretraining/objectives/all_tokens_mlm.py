"""`all_tokens_mlm`: every real token predicted, through the paper's copy mechanism."""

import keras
import tensorflow as tf

from electra_tf.layers.initializers import weight_initializer
from electra_tf.pretraining import flop_formulas, losses
from electra_tf.pretraining.objectives.base import MaskedLanguageModeling


class AllTokensMlm(MaskedLanguageModeling):
    """All-Tokens MLM (paper Table 5): like `replace_mlm`, but the kept encoder predicts
    every real token, p = D * [copy the input] + (1 - D) * softmax, with D a sigmoid
    gate per token ("a sigmoid layer" giving each token's probability of copying)."""

    name = "all_tokens_mlm"

    def build_heads(self, config, encoder):
        return {**super().build_heads(config, encoder),
                "copy_gate": keras.layers.Dense(
                    1, kernel_initializer=weight_initializer(config.initializer_range),
                    dtype="float32", name="copy_gate")}

    def predict(self, model, sequence_output, outputs):
        input_ids = outputs["input_ids"]
        every_position = tf.broadcast_to(tf.range(tf.shape(input_ids)[1]),
                                         tf.shape(input_ids))
        return {"main_logits": model.mlm_head(sequence_output, mask_positions=every_position),
                "copy_logits": tf.squeeze(model.copy_gate(sequence_output), -1)}

    def encoder_loss(self, config, outputs):
        return "main_loss", losses.copy_mlm_loss(
            outputs["main_logits"], outputs["copy_logits"], outputs["encoder_ids"],
            outputs["input_ids"], outputs["input_mask"]), 1.0

    def scored_predictions(self, outputs):
        # Every real token; the argmax of the softmax part.
        return (outputs["main_logits"], outputs["input_ids"],
                tf.cast(outputs["input_mask"], tf.float32))

    def head_flops_per_token(self, config):
        return (flop_formulas.mlm_head(config.embedding_size, config.hidden_size,
                                       config.vocab_size)
                + flop_formulas.copy_gate(config.hidden_size))
