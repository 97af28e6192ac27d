"""`ElectraPretrainer`: generator + discriminator trained by replaced token detection."""

import keras
import keras_hub
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.layers.discriminator_head import DiscriminatorHead
from electra_tf.layers.embeddings import ElectraEmbeddings
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.pretraining import objectives
from electra_tf.pretraining.masking import mask_tokens, noise_width, split_noise


class ElectraPretrainer(keras.Model):
    """The ELECTRA pretraining model; `model.discriminator` is the encoder to keep.

    A small MLM generator and the discriminator share one embedding block (unless
    `config.tie_embeddings == "none"`); the generator's output layer is its word-embedding
    matrix transposed plus its own bias (keras-hub's
    `MaskedLMHead`, computed only at the masked positions). Each step masks fresh positions,
    samples replacements from the generator and trains the discriminator to spot them:
    loss = mlm_weight * MLM + disc_weight * BCE over all real tokens.

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

    def __init__(self, config: ElectraConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.discriminator = ElectraEncoder.from_electra_config(config)
        generator_embeddings = self.discriminator.embeddings
        if config.tie_embeddings == "none":
            generator_embeddings = ElectraEmbeddings.from_electra_config(
                config, embedding_size=config.generator_hidden_size)
        self.generator = ElectraEncoder.from_electra_config(
            config, generator=True, embeddings=generator_embeddings)
        initializer = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
        self.generator_head = keras_hub.layers.MaskedLMHead(
            token_embedding=self.generator.embeddings.token_embedding,
            intermediate_activation="gelu", layer_norm_epsilon=config.layer_norm_epsilon,
            kernel_initializer=initializer, name="generator_predictions",
            # Under mixed precision keras-hub adds its float32 bias to bfloat16 logits and
            # fails; a float32 head works (the vocabulary matmul stays in the tied
            # embedding's precision) and keeps the MLM softmax in float32.
            dtype="float32")
        self.discriminator_head = DiscriminatorHead(
            config.hidden_size, config.initializer_range, name="discriminator_predictions",
            dtype="float32")
        self.seed_generator = keras.random.SeedGenerator(config.seed, name="masking_seed")
        self.noise_width = noise_width(config.max_seq_length, config.max_predictions_per_seq)
        self.special_token_ids = (config.pad_token_id, config.cls_token_id,
                                  config.sep_token_id, config.mask_token_id)

        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mlm_loss_tracker = keras.metrics.Mean(name="mlm_loss")
        self.disc_loss_tracker = keras.metrics.Mean(name="disc_loss")
        self.gen_accuracy = keras.metrics.Mean(name="gen_acc")
        self.disc_auc = keras.metrics.AUC(name="disc_auc")
        self.disc_accuracy = keras.metrics.Mean(name="disc_acc")
        self.replaced_fraction = keras.metrics.Mean(name="replaced")

    @property
    def metrics(self):
        return [self.loss_tracker, self.mlm_loss_tracker, self.disc_loss_tracker,
                self.gen_accuracy, self.disc_auc, self.disc_accuracy, self.replaced_fraction]

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
        generator_outputs = self.generator(
            {"input_word_ids": masked["masked_ids"], "input_mask": input_mask,
             "input_type_ids": segment_ids}, training=training)
        mlm_logits = self.generator_head(generator_outputs["sequence_output"],
                                         mask_positions=masked["positions"])
        sampled_ids = objectives.sample_tokens(mlm_logits, sample_draws, cfg.temperature)
        corrupted_ids, replaced = objectives.replace_tokens(
            input_ids, masked["positions"], sampled_ids, masked["weights"])
        discriminator_outputs = self.discriminator(
            {"input_word_ids": corrupted_ids, "input_mask": input_mask,
             "input_type_ids": segment_ids}, training=training)
        disc_logits = self.discriminator_head(discriminator_outputs["sequence_output"])
        return {"mlm_logits": mlm_logits, "mlm_labels": masked["labels"],
                "mlm_weights": masked["weights"], "disc_logits": disc_logits,
                "disc_labels": replaced, "input_mask": input_mask}

    def compute_losses(self, outputs):
        """(total, mlm, disc) scalar losses from `call`'s outputs."""
        mlm = objectives.mlm_loss(outputs["mlm_logits"], outputs["mlm_labels"],
                                  outputs["mlm_weights"])
        disc = objectives.discriminator_loss(outputs["disc_logits"], outputs["disc_labels"],
                                             outputs["input_mask"])
        total = self.config.mlm_weight * mlm + self.config.disc_weight * disc
        return total, mlm, disc

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
            total, mlm, disc = self.compute_losses(outputs)
            # Identity except under fp16's LossScaleOptimizer.
            scaled = self.optimizer.scale_loss(total * loss_scale)
        gradients = tape.gradient(scaled, variables)
        self._update_metrics(outputs, total, mlm, disc)
        return gradients

    def test_step(self, data):
        outputs = self(data, training=False)
        self._update_metrics(outputs, *self.compute_losses(outputs))
        return self._logs()

    def _update_metrics(self, outputs, total, mlm, disc):
        self.loss_tracker.update_state(total)
        self.mlm_loss_tracker.update_state(mlm)
        self.disc_loss_tracker.update_state(disc)
        predicted = tf.argmax(outputs["mlm_logits"], -1, output_type=tf.int32)
        correct = tf.cast(tf.equal(predicted, outputs["mlm_labels"]), tf.float32)
        self.gen_accuracy.update_state(correct, sample_weight=outputs["mlm_weights"])
        mask = tf.cast(outputs["input_mask"], tf.float32)
        labels = outputs["disc_labels"]
        probs = tf.sigmoid(tf.cast(outputs["disc_logits"], tf.float32))
        self.disc_auc.update_state(labels, probs, sample_weight=mask)
        disc_correct = tf.cast(tf.equal(tf.cast(probs > 0.5, tf.int32), labels), tf.float32)
        self.disc_accuracy.update_state(disc_correct, sample_weight=mask)
        self.replaced_fraction.update_state(tf.cast(labels, tf.float32), sample_weight=mask)

    def _logs(self):
        logs = {m.name: m.result() for m in self.metrics}
        if isinstance(tf.distribute.get_strategy(), tf.distribute.MultiWorkerMirroredStrategy):
            # Keras 3 reduces multi-worker logs along axis 0, which scalars lack
            # (tensorflow#72388): give them one; the reduction removes it.
            logs = {k: tf.reshape(v, [1]) for k, v in logs.items()}
        return logs

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(ElectraConfig.from_dict(config["config"]), name=config.get("name"))
