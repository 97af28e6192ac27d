"""`ElectraPretrainer`: replaced token detection (and the paper's ablation objectives)."""

import keras
import keras_hub
import tensorflow as tf

from electra_tf.config import RTD_OBJECTIVES, ElectraConfig
from electra_tf.layers.discriminator_head import DiscriminatorHead
from electra_tf.layers.embeddings import ElectraEmbeddings
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.pretraining import objectives
from electra_tf.pretraining.masking import mask_tokens, noise_width, split_noise


class ElectraPretrainer(keras.Model):
    """The ELECTRA pretraining model; `model.discriminator` is the encoder to keep.

    With the default `config.objective == "electra"`: a small MLM generator and the
    discriminator share one embedding block (`config.tie_embeddings`: "all"; "token" shares
    only the word matrix; "none" nothing); the generator's output layer is its
    word-embedding matrix transposed plus its own bias (keras-hub's `MaskedLMHead`,
    computed only at the masked positions). Each step masks fresh positions, samples
    replacements from the generator and trains the discriminator to spot them:
    loss = mlm_weight * MLM + disc_weight * BCE over all real tokens.

    The paper's other objectives (`objectives` module docstring) change what the kept
    encoder learns; whatever the objective, `model.discriminator` is that encoder:
    `electra_15` weighs the BCE on the masked positions only; `mlm` drops the generator and
    trains the encoder as BERT through a tied `mlm_head`; `replace_mlm` and
    `all_tokens_mlm` feed it generator samples and train its `mlm_head` (plus a
    `copy_gate` for all tokens) with weight 1. `config.generator == "uniform"` samples
    replacements uniformly over the vocab instead of from a learned generator.

    Inputs (a dataset element): dict of `input_ids`, `input_mask`, `segment_ids`,
    int32 [batch, seq], and optionally `noise`, float32 [batch, noise_width] uniform draws
    that decide the masks and the generator's samples (the input pipeline adds them, see
    `masking`); without it the model draws its own from `seed_generator`.

    `config.grad_accum_steps` > 1 splits each replica's batch into that many micro-batches
    and sums their gradients into one optimizer step.

    Example:
    >>> cfg = ElectraConfig.preset("tiny")
    >>> model = ElectraPretrainer(cfg)
    >>> model.compile(optimizer=electra_tf.training.create_optimizer(cfg, model))
    >>> model.fit(dataset, steps_per_epoch=100)
    >>> encoder = model.discriminator
    """

    def __init__(self, config: ElectraConfig, activation="gelu", **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.activation = activation  # of both towers' feed-forward layers, see ElectraEncoder
        self.discriminator = ElectraEncoder.from_electra_config(config, activation=activation)
        initializer = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        self.generator = self.generator_head = None
        if config.has_learned_generator:
            self.generator = ElectraEncoder.from_electra_config(
                config, generator=True, embeddings=self._generator_embeddings(),
                activation=activation)
            self.generator_head = _tied_mlm_head(self.generator, initializer,
                                                 "generator_predictions")
        self.discriminator_head = self.mlm_head = self.copy_gate = None
        if config.objective in RTD_OBJECTIVES:
            self.discriminator_head = DiscriminatorHead(
                config.hidden_size, config.initializer_range,
                name="discriminator_predictions", dtype="float32")
        else:
            self.mlm_head = _tied_mlm_head(self.discriminator, initializer, "mlm_predictions")
        if config.objective == "all_tokens_mlm":
            # The paper's copy mechanism: "a sigmoid layer" giving each token's probability
            # of copying the input token.
            self.copy_gate = keras.layers.Dense(1, kernel_initializer=initializer,
                                                dtype="float32", name="copy_gate")
        self.seed_generator = keras.random.SeedGenerator(config.seed, name="masking_seed")
        self.noise_width = noise_width(config.max_seq_length, config.max_predictions_per_seq)
        self.special_token_ids = (config.pad_token_id, config.cls_token_id,
                                  config.sep_token_id, config.mask_token_id)

        self.loss_tracker = keras.metrics.Mean(name="loss")
        self._objective_metrics = [self.loss_tracker]
        if self.generator is not None:
            self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
            self.gen_accuracy = keras.metrics.Mean(name="gen_acc")
            self._objective_metrics += [self.mlm_loss_tracker, self.gen_accuracy]
        if self.discriminator_head is not None:
            self.disc_loss_tracker = keras.metrics.Mean(name="disc_loss")
            self.disc_auc = keras.metrics.AUC(name="disc_auc")
            self.disc_accuracy = keras.metrics.Mean(name="disc_acc")
            self._objective_metrics += [self.disc_loss_tracker, self.disc_auc, self.disc_accuracy]
        else:
            self.main_loss_tracker = keras.metrics.Mean(name="main_loss")
            self.main_accuracy = keras.metrics.Mean(name="main_acc")
            self._objective_metrics += [self.main_loss_tracker, self.main_accuracy]
        if config.objective != "mlm":
            self.replaced_fraction = keras.metrics.Mean(name="replaced")
            self._objective_metrics.append(self.replaced_fraction)

    def _generator_embeddings(self):
        cfg, shared = self.config, self.discriminator.embeddings
        if cfg.tie_embeddings == "all":
            return shared
        if cfg.tie_embeddings == "token":
            return ElectraEmbeddings.from_electra_config(
                cfg, token_embedding=shared.token_embedding)
        return ElectraEmbeddings.from_electra_config(cfg, cfg.generator_hidden_size)

    @property
    def metrics(self):
        return list(self._objective_metrics)

    def build_all(self, seq_length=None):
        """Creates every variable by running one forward pass on a dummy batch."""
        seq_length = seq_length or self.config.max_seq_length
        ids = tf.zeros([1, seq_length], tf.int32)
        # The discriminator goes first so the shared embeddings are named under it.
        self.discriminator({"input_word_ids": ids, "input_mask": tf.ones_like(ids),
                            "input_type_ids": ids})
        self({"input_ids": ids, "input_mask": tf.ones_like(ids),
              "segment_ids": tf.zeros_like(ids)}, training=False)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Under a strategy, Keras's `fit` first reduces a batch across replicas to build
        # the model symbolically; MultiWorkerMirroredStrategy cannot reduce a dict batch.
        # `build_all` has already created every variable and `build_model` the optimizer's.
        if not self.built:
            super()._maybe_symbolic_build(iterator, data_batch)

    def call(self, inputs, training=None):
        """The full forward pass; returns every tensor the losses and metrics need."""
        cfg = self.config
        input_ids, input_mask = inputs["input_ids"], inputs["input_mask"]
        segment_ids = inputs["segment_ids"]
        noise = inputs.get("noise")
        if noise is None:
            noise = keras.random.uniform([tf.shape(input_ids)[0], self.noise_width],
                                         seed=self.seed_generator)
        position_scores, keep_draws, sample_draws = split_noise(
            noise, input_ids.shape[1], cfg.max_predictions_per_seq)
        masked = mask_tokens(
            input_ids, input_mask, mask_prob=cfg.mask_prob,
            max_predictions=cfg.max_predictions_per_seq, mask_token_id=cfg.mask_token_id,
            special_token_ids=self.special_token_ids, position_scores=position_scores,
            keep_draws=keep_draws)
        positions, slot_weights = masked["positions"], masked["weights"]
        outputs = {"input_ids": input_ids, "input_mask": input_mask,
                   "mlm_labels": masked["labels"], "mlm_weights": slot_weights}
        if cfg.objective == "mlm":
            encoder_ids = masked["masked_ids"]
        else:
            mlm_logits = self._generator_logits(masked, input_mask, segment_ids, training)
            sampled_ids = objectives.sample_tokens(mlm_logits, sample_draws, cfg.temperature)
            encoder_ids, replaced = objectives.replace_tokens(
                input_ids, positions, sampled_ids, slot_weights)
            outputs.update(mlm_logits=mlm_logits, replaced=replaced)
        outputs["encoder_ids"] = encoder_ids
        sequence_output = self.discriminator(
            {"input_word_ids": encoder_ids, "input_mask": input_mask,
             "input_type_ids": segment_ids}, training=training)["sequence_output"]

        if self.discriminator_head is not None:
            outputs["disc_logits"] = self.discriminator_head(sequence_output)
            outputs["disc_weights"] = (
                input_mask if cfg.objective == "electra" else
                objectives.chosen_positions_mask(positions, slot_weights, input_ids.shape[1]))
        elif self.copy_gate is not None:
            every_position = tf.broadcast_to(tf.range(tf.shape(input_ids)[1]),
                                             tf.shape(input_ids))
            outputs["main_logits"] = self.mlm_head(sequence_output,
                                                   mask_positions=every_position)
            outputs["copy_logits"] = tf.squeeze(self.copy_gate(sequence_output), -1)
        else:
            outputs["main_logits"] = self.mlm_head(sequence_output, mask_positions=positions)
        return outputs

    def _generator_logits(self, masked, input_mask, segment_ids, training):
        """[batch, max_predictions, vocab] generator logits at the masked positions."""
        if self.generator is None:  # uniform: equal logits, nothing to learn
            cfg = self.config
            return tf.zeros([tf.shape(masked["positions"])[0], cfg.max_predictions_per_seq,
                             cfg.vocab_size])
        generator_outputs = self.generator(
            {"input_word_ids": masked["masked_ids"], "input_mask": input_mask,
             "input_type_ids": segment_ids}, training=training)
        return self.generator_head(generator_outputs["sequence_output"],
                                   mask_positions=masked["positions"])

    def compute_losses(self, outputs) -> dict:
        """{"loss": total, and its parts: "mlm_loss" (the generator's), "disc_loss" or
        "main_loss" (the kept encoder's)} as scalars, from `call`'s outputs."""
        cfg = self.config
        losses = {}
        total = 0.0
        if self.generator is not None:
            losses["mlm_loss"] = objectives.mlm_loss(
                outputs["mlm_logits"], outputs["mlm_labels"], outputs["mlm_weights"])
            total += cfg.mlm_weight * losses["mlm_loss"]
        if self.discriminator_head is not None:
            losses["disc_loss"] = objectives.discriminator_loss(
                outputs["disc_logits"], outputs["replaced"], outputs["disc_weights"])
            total += cfg.disc_weight * losses["disc_loss"]
        elif self.copy_gate is not None:
            losses["main_loss"] = objectives.copy_mlm_loss(
                outputs["main_logits"], outputs["copy_logits"], outputs["encoder_ids"],
                outputs["input_ids"], outputs["input_mask"])
            total += losses["main_loss"]
        else:
            losses["main_loss"] = objectives.mlm_loss(
                outputs["main_logits"], outputs["mlm_labels"], outputs["mlm_weights"])
            total += losses["main_loss"]
        losses["loss"] = total
        return losses

    def train_step(self, data):
        variables = self.trainable_variables
        # Keras sums gradients over replicas and this sums them over micro-batches: scale
        # each micro-batch's mean loss so the total is the mean over the global batch.
        steps = self.config.grad_accum_steps
        loss_scale = 1.0 / (tf.distribute.get_strategy().num_replicas_in_sync * steps)
        if steps == 1:
            gradients = self._micro_step(data, variables, loss_scale)
        else:
            micro_batches = {k: tf.reshape(v, [steps, -1, *v.shape[1:]])
                             for k, v in data.items()}

            def accumulate(i, sums):
                micro = {k: v[i] for k, v in micro_batches.items()}
                gradients = self._micro_step(micro, variables, loss_scale)
                return i + 1, [s if g is None else s + tf.convert_to_tensor(g)
                               for s, g in zip(sums, gradients)]

            # A while loop (not a Python one) runs the micro-batches one after another,
            # so only one micro-batch's activations are alive at a time.
            _, gradients = tf.while_loop(
                lambda i, _: i < steps, accumulate,
                (tf.constant(0), [tf.zeros_like(v) for v in variables]),
                parallel_iterations=1)
        self.optimizer.apply(gradients, variables)
        return self._logs()

    def _micro_step(self, data, variables, loss_scale):
        """Gradients of `loss_scale` x the batch's loss; updates the metrics."""
        with tf.GradientTape() as tape:
            outputs = self(data, training=True)
            losses = self.compute_losses(outputs)
            # Identity except under fp16's LossScaleOptimizer.
            scaled = self.optimizer.scale_loss(losses["loss"] * loss_scale)
        gradients = tape.gradient(scaled, variables)
        self._update_metrics(outputs, losses)
        return gradients

    def test_step(self, data):
        outputs = self(data, training=False)
        self._update_metrics(outputs, self.compute_losses(outputs))
        return self._logs()

    def _update_metrics(self, outputs, losses):
        self.loss_tracker.update_state(losses["loss"])
        if self.generator is not None:
            self.mlm_loss_tracker.update_state(losses["mlm_loss"])
            self.gen_accuracy.update_state(*_accuracy(
                outputs["mlm_logits"], outputs["mlm_labels"], outputs["mlm_weights"]))
        mask = tf.cast(outputs["input_mask"], tf.float32)
        if self.discriminator_head is not None:
            self.disc_loss_tracker.update_state(losses["disc_loss"])
            labels, weights = outputs["replaced"], tf.cast(outputs["disc_weights"], tf.float32)
            probs = tf.sigmoid(tf.cast(outputs["disc_logits"], tf.float32))
            self.disc_auc.update_state(labels, probs, sample_weight=weights)
            disc_correct = tf.cast(tf.equal(tf.cast(probs > 0.5, tf.int32), labels),
                                   tf.float32)
            self.disc_accuracy.update_state(disc_correct, sample_weight=weights)
        else:
            self.main_loss_tracker.update_state(losses["main_loss"])
            if self.copy_gate is not None:  # scored on every token; argmax of the softmax
                scored = (outputs["main_logits"], outputs["input_ids"], mask)
            else:
                scored = (outputs["main_logits"], outputs["mlm_labels"], outputs["mlm_weights"])
            self.main_accuracy.update_state(*_accuracy(*scored))
        if "replaced" in outputs:
            self.replaced_fraction.update_state(tf.cast(outputs["replaced"], tf.float32),
                                                sample_weight=mask)

    def _logs(self):
        logs = {m.name: m.result() for m in self.metrics}
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 reduces multi-worker logs along axis 0, which scalars lack
            # (tensorflow#72388): give them one; the reduction removes it.
            logs = {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs

    def get_config(self):
        return {"config": self.config.to_dict(), "activation": self.activation,
                "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(ElectraConfig.from_dict(config["config"]),
                   activation=config.get("activation", "gelu"), name=config.get("name"))


def _tied_mlm_head(encoder, initializer, name):
    """keras-hub's `MaskedLMHead` whose output layer is `encoder`'s word matrix transposed
    (plus its own bias): dense(embedding, GELU) -> LayerNorm -> logits."""
    return keras_hub.layers.MaskedLMHead(
        token_embedding=encoder.embeddings.token_embedding, intermediate_activation="gelu",
        layer_norm_epsilon=encoder.layer_norm_epsilon, kernel_initializer=initializer,
        name=name,
        # Under mixed precision keras-hub adds its float32 bias to bfloat16 logits and
        # fails; a float32 head works (the vocabulary matmul stays in the tied embedding's
        # precision) and keeps the MLM softmax in float32.
        dtype="float32")


def _accuracy(logits, labels, weights):
    """(per-slot correctness, weights) of the argmax prediction, for a `Mean` metric."""
    predicted = tf.argmax(logits, -1, output_type=tf.int32)
    return tf.cast(tf.equal(predicted, labels), tf.float32), weights
