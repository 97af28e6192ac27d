"""What an objective decides: the kept encoder's pretraining head, its loss, its metrics,
its FLOPs, and whether it reads generator samples (paper section 3.2, Table 5).

`ElectraPretrainer` runs masking, the generator and the encoder for every objective and
asks its objective for the rest; `flops` asks it for the cost of its head, the converter
whether the official formats describe its heads. Objectives hold no state: one instance
serves every model (the heads and metrics they build belong to the model).
"""

import keras
import tensorflow as tf

from electra_tf.layers.discriminator_head import DiscriminatorHead
from electra_tf.layers.masked_lm_head import tied_masked_lm_head
from electra_tf.pretraining import flop_formulas, losses


class Objective:
    """One pretraining objective; subclasses set `name` and implement the hooks."""

    name = ""
    # The kept encoder reads the generator's samples at the chosen positions; False: it
    # reads `[MASK]`ed text itself (BERT) and there is no generator.
    reads_samples = True
    # The official TF1 and Hugging Face formats describe this objective's generator and
    # heads (replaced token detection); for the others they hold the encoder alone.
    official_layout = False
    # (metric name, label) of the kept encoder printed after a run (after the loss and
    # the generator's accuracy).
    summary_metrics = ()

    def learns_generator(self, config) -> bool:
        """Whether a generator tower exists and trains (not for a uniform generator)."""
        return self.reads_samples and config.generator == "transformer"

    def validate(self, config) -> None:
        """Raises ConfigError for settings this objective cannot use."""

    def build_heads(self, config, encoder) -> dict:
        """{attribute name: layer} of the kept encoder's pretraining heads; the model
        keeps each under its name (checkpoints record it)."""
        raise NotImplementedError

    def predict(self, model, sequence_output, outputs) -> dict:
        """The heads' outputs on the encoder's `sequence_output` [batch, seq, hidden];
        `outputs` holds the step's tensors so far (see `ElectraPretrainer.call`)."""
        raise NotImplementedError

    def encoder_loss(self, config, outputs) -> tuple:
        """(loss name, scalar loss, its weight in the total)."""
        raise NotImplementedError

    def build_metrics(self) -> dict:
        """{name: keras metric} of the kept encoder, created with the model."""
        raise NotImplementedError

    def update_metrics(self, metrics: dict, outputs, losses_by_name) -> None:
        raise NotImplementedError

    def head_flops_per_token(self, config) -> float:
        """Forward FLOPs of the kept encoder's head per token of a sequence
        (`flop_formulas`; a head run at some positions only counts their share)."""
        raise NotImplementedError


class ReplacedTokenDetection(Objective):
    """The discriminator head spots replaced tokens where `detection_weights` is 1."""

    official_layout = True
    summary_metrics = (("disc_auc", "discriminator AUC"), ("disc_acc", "discriminator accuracy"))

    def detection_weights(self, outputs):
        """int [batch, seq]: the tokens the detection loss averages over."""
        raise NotImplementedError

    def build_heads(self, config, encoder):
        return {"discriminator_head": DiscriminatorHead(
            config.hidden_size, config.initializer_range, name="discriminator_predictions",
            dtype="float32")}

    def predict(self, model, sequence_output, outputs):
        return {"disc_logits": model.discriminator_head(sequence_output),
                "disc_weights": self.detection_weights(outputs)}

    def encoder_loss(self, config, outputs):
        loss = losses.discriminator_loss(outputs["disc_logits"], outputs["replaced"],
                                         outputs["disc_weights"])
        return "disc_loss", loss, config.disc_weight

    def build_metrics(self):
        return {"disc_loss": keras.metrics.Mean(name="disc_loss"),
                "disc_auc": keras.metrics.AUC(name="disc_auc"),
                "disc_acc": keras.metrics.Mean(name="disc_acc")}

    def update_metrics(self, metrics, outputs, losses_by_name):
        metrics["disc_loss"].update_state(losses_by_name["disc_loss"])
        labels = outputs["replaced"]
        weights = tf.cast(outputs["disc_weights"], tf.float32)
        probs = tf.sigmoid(tf.cast(outputs["disc_logits"], tf.float32))
        metrics["disc_auc"].update_state(labels, probs, sample_weight=weights)
        correct = tf.cast(tf.equal(tf.cast(probs > 0.5, tf.int32), labels), tf.float32)
        metrics["disc_acc"].update_state(correct, sample_weight=weights)

    def head_flops_per_token(self, config):
        return flop_formulas.rtd_head(config.hidden_size)


class MaskedLanguageModeling(Objective):
    """The kept encoder predicts original tokens through an MLM head tied to its word
    embeddings (BERT's output layer)."""

    summary_metrics = (("main_acc", "encoder MLM accuracy"),)

    def build_heads(self, config, encoder):
        return {"mlm_head": tied_masked_lm_head(
            encoder.embeddings.token_embedding, encoder.layer_norm_epsilon,
            config.initializer_range, name="mlm_predictions")}

    def predict(self, model, sequence_output, outputs):
        return {"main_logits": model.mlm_head(sequence_output,
                                              mask_positions=outputs["mlm_positions"])}

    def encoder_loss(self, config, outputs):
        return "main_loss", losses.mlm_loss(outputs["main_logits"], outputs["mlm_labels"],
                                            outputs["mlm_weights"]), 1.0

    def build_metrics(self):
        return {"main_loss": keras.metrics.Mean(name="main_loss"),
                "main_acc": keras.metrics.Mean(name="main_acc")}

    def scored_predictions(self, outputs):
        """(logits, target ids, weights) that the accuracy metric scores."""
        return outputs["main_logits"], outputs["mlm_labels"], outputs["mlm_weights"]

    def update_metrics(self, metrics, outputs, losses_by_name):
        metrics["main_loss"].update_state(losses_by_name["main_loss"])
        metrics["main_acc"].update_state(*accuracy(*self.scored_predictions(outputs)))

    def head_flops_per_token(self, config):
        at_chosen_positions = config.max_predictions_per_seq / config.max_seq_length
        return at_chosen_positions * flop_formulas.mlm_head(
            config.embedding_size, config.hidden_size, config.vocab_size)


def accuracy(logits, labels, weights):
    """(per-slot correctness, weights) of the argmax prediction, for a `Mean` metric."""
    predicted = tf.argmax(logits, -1, output_type=tf.int32)
    return tf.cast(tf.equal(predicted, labels), tf.float32), weights
