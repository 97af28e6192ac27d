"""`ElectraPretrainer`: replaced token detection (and the paper's ablation objectives)."""

import keras
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.tf_runtime import without_autotuning
from electra_tf.layers.activations import GELU
from electra_tf.layers.embeddings import ElectraEmbeddings
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.layers.masked_lm_head import tied_masked_lm_head
from electra_tf.pretraining import objectives
from electra_tf.pretraining.losses import mlm_loss
from electra_tf.pretraining.masking import mask_tokens, noise_width, split_noise
from electra_tf.pretraining.objectives.base import accuracy
from electra_tf.pretraining.sampling import replace_tokens, sample_tokens
from electra_tf.training.graph_optimization import one_optimization_round
from electra_tf.training.optimization import build_optimizer_before_fit, fit_shuffle
from electra_tf.training.runtime import cpu_bfloat16, training_kernels
from electra_tf.training.runtime_options import RuntimeOptions


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraPretrainer(keras.Model):
    """The ELECTRA pretraining model; `model.discriminator` is the encoder to keep.

    With the default `config.objective == "electra"`: a small MLM generator and the
    discriminator share one embedding block (`config.tie_embeddings`: "all"; "token" shares
    only the word matrix; "gdes" shares it gradient-disentangled, as DeBERTa-v3: see
    `ElectraEmbeddings`; "none" nothing); the generator's output layer is its
    word-embedding matrix transposed plus its own bias (keras-hub's `MaskedLMHead`,
    computed only at the masked positions). Each step masks fresh positions, samples
    replacements from the generator and trains the discriminator to spot them:
    loss = mlm_weight * MLM + disc_weight * BCE over all real tokens.

    The paper's other objectives (`objectives/`, one file each) change what the kept
    encoder learns; whatever the objective, `model.discriminator` is that encoder. The
    model asks `model.objective` for the encoder's pretraining heads (kept as attributes
    named in `model.head_names`: `discriminator_head`, or `mlm_head` and for all-tokens
    MLM `copy_gate`), their outputs, loss and metrics; `mlm` has no generator.
    `config.generator == "uniform"` samples replacements uniformly over the vocab instead
    of from a learned generator.

    Inputs (a dataset element): dict of `input_word_ids`, `input_mask`, `input_type_ids`,
    int32 [batch, seq], and optionally `noise`, float32 [batch, noise_width] uniform draws
    that decide the masks and the generator's samples (the input pipeline adds them, see
    `masking`); without it the model draws its own from `seed_generator`.

    `config.grad_accum_steps` > 1 splits each replica's batch into that many micro-batches
    and sums their gradients into one optimizer step.

    `fit` trains with `training_kernels` (`RuntimeOptions`' three fused kernels, each on
    unless set False, as in `electra-pretrain`: the same steps and random draws as the
    command's, ELECTRA-Small's ~10% shorter than with Keras's own layers on a 2-core
    AVX-512 EPYC), and puts the layers' own back afterwards for inference and saving.

    Example:
    >>> cfg = ElectraConfig.preset("tiny")
    >>> model = ElectraPretrainer(cfg)
    >>> model.compile(optimizer=create_pretraining_optimizer(cfg, model))  # training.optimization
    >>> model.fit(dataset, steps_per_epoch=100)
    >>> encoder = model.discriminator
    """

    def __init__(self, config: ElectraConfig, activation=GELU, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.objective = objectives.of(config)
        self.activation = activation  # of both towers' feed-forward layers, see ElectraEncoder
        self.discriminator = ElectraEncoder.from_electra_config(
            config, activation=activation, embeddings=ElectraEmbeddings.from_electra_config(
                config, gradient_disentangled=config.tie_embeddings == "gdes"))
        self.generator = self.generator_head = None
        if self.objective.learns_generator(config):
            self.generator = ElectraEncoder.from_electra_config(
                config, generator=True, embeddings=self._generator_embeddings(),
                activation=activation)
            self.generator_head = tied_masked_lm_head(
                self.generator.embeddings.token_embedding, self.generator.layer_norm_epsilon,
                config.initializer_range, name="generator_predictions")
        # Each head is an attribute of its own name: checkpoints record them by it.
        self.head_names = []
        for name, head in self.objective.build_heads(config, self.discriminator).items():
            setattr(self, name, head)
            self.head_names.append(name)
        self.seed_generator = keras.random.SeedGenerator(config.seed, name="masking_seed")
        self.training_kernels = RuntimeOptions()  # unset: on, see `fit`
        self.noise_width = noise_width(config.max_seq_length, config.max_predictions_per_seq)
        self.special_token_ids = (config.pad_token_id, config.cls_token_id,
                                  config.sep_token_id, config.mask_token_id)

        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.generator_metrics = {}
        if self.generator is not None:
            self.generator_metrics = {"mlm_loss": keras.metrics.Mean(name="mlm_loss"),
                                      "gen_acc": keras.metrics.Mean(name="gen_acc")}
        self.encoder_metrics = self.objective.build_metrics()
        self.replaced_fraction = (keras.metrics.Mean(name="replaced")
                                  if self.objective.reads_samples else None)

    def _generator_embeddings(self):
        cfg, shared = self.config, self.discriminator.embeddings
        if cfg.tie_embeddings == "all":
            return shared
        if cfg.tie_embeddings in ("token", "gdes"):
            return ElectraEmbeddings.from_electra_config(
                cfg, token_embedding=shared.token_embedding)
        return ElectraEmbeddings.from_electra_config(cfg, cfg.generator_hidden_size)

    @property
    def metrics(self):
        return [self.loss_tracker, *self.generator_metrics.values(),
                *self.encoder_metrics.values(),
                *([self.replaced_fraction] if self.replaced_fraction is not None else [])]

    @classmethod
    def from_pretrained(cls, name_or_path: str, dropout=None) -> "ElectraPretrainer":
        """The whole pretraining model (generator and heads too) of a source that has them,
        restored (any source `ElectraEncoder.from_pretrained` takes), e.g. to continue
        pretraining with `fit`. `dropout` defaults to the model's."""
        # Deferred, as in ElectraEncoder.from_pretrained: converting builds this class.
        from electra_tf.models.sources import open_model

        return open_model(name_or_path).pretrainer(dropout)

    def build_all(self, seq_length=8):
        """Creates every variable by running one forward pass on a dummy batch of one
        sequence of `seq_length` tokens. Any length works (no variable depends on it); the
        pass's work grows with it: `runs.pretrain.build_model` (optimizer included) built
        ELECTRA-Base in 9.4 s with its 512 tokens, 7.4-8.0 s with 8, ELECTRA-Large in 21.2
        s and 14.6 s (2-core AVX2 EPYC).
        """
        ids = tf.zeros([1, seq_length], tf.int32)
        inputs = {"input_word_ids": ids, "input_mask": tf.ones_like(ids), "input_type_ids": ids}
        # The discriminator goes first so the shared embeddings are named under it; its
        # `build` creates its weights without a forward pass (0.3-0.4 s for ELECTRA-Small).
        self.discriminator.build({name: tuple(ids.shape) for name in inputs})
        # `call`, not `self(...)`: the eager pass builds every layer, where Keras would
        # first trace the whole model symbolically (7 s for ELECTRA-Small, 2-core EPYC).
        self.call(inputs, training=False)
        self.built = True

    def fit(self, x=None, *args, **kwargs):
        """Keras's `fit` with the training kernels (`training_kernels`, for the call), after
        `build_all` and the optimizer's variables (built while the first step is traced,
        they would make TensorFlow trace it twice), its functions optimised in
        `one_optimization_round`, datasets without `tf.data`'s autotuning
        (`without_autotuning`)."""
        if not self.built:
            self.build_all()
        build_optimizer_before_fit(self)
        kwargs["shuffle"] = fit_shuffle(x, kwargs.get("shuffle"))
        if "validation_data" in kwargs:
            kwargs["validation_data"] = without_autotuning(kwargs["validation_data"])
        # Batches of one shape: the kernels left unset (None) are on, as in the command.
        kernels = self.training_kernels.for_run(
            few_shapes=True, cpu_bfloat16=cpu_bfloat16(self.compute_dtype == "bfloat16"))
        with one_optimization_round(self.compute_dtype), training_kernels(self, kernels):
            return super().fit(without_autotuning(x), *args, **kwargs)

    def evaluate(self, x=None, *args, **kwargs):
        """Keras's `evaluate`, a dataset without `tf.data`'s autotuning
        (`without_autotuning`)."""
        return super().evaluate(without_autotuning(x), *args, **kwargs)

    def get_build_config(self):
        return {"build_all": True}  # `build_all` needs nothing but the config

    def build_from_config(self, config):
        # `keras.saving.load_model` creates the variables here before reading their values.
        self.build_all()

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Under a strategy, Keras's `fit` first reduces a batch across replicas to build
        # the model symbolically; MultiWorkerMirroredStrategy cannot reduce a dict batch.
        # `build_all` has already created every variable and `build_model` the optimizer's.
        if not self.built:
            super()._maybe_symbolic_build(iterator, data_batch)

    def call(self, inputs, training=None):
        """The full forward pass; returns every tensor the losses and metrics need."""
        cfg = self.config
        input_ids, input_mask = inputs["input_word_ids"], inputs["input_mask"]
        segment_ids = inputs["input_type_ids"]
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
        outputs = {"input_ids": input_ids, "input_mask": input_mask,
                   "mlm_positions": masked["positions"], "mlm_labels": masked["labels"],
                   "mlm_weights": masked["weights"]}
        if self.objective.reads_samples:
            mlm_logits = self._generator_logits(masked, input_mask, segment_ids, training)
            sampled_ids = sample_tokens(mlm_logits, sample_draws, cfg.temperature)
            encoder_ids, replaced = replace_tokens(input_ids, masked["positions"],
                                                   sampled_ids, masked["weights"])
            outputs.update(mlm_logits=mlm_logits, replaced=replaced)
        else:
            encoder_ids = masked["masked_ids"]
        outputs["encoder_ids"] = encoder_ids
        sequence_output = self.discriminator(
            {"input_word_ids": encoder_ids, "input_mask": input_mask,
             "input_type_ids": segment_ids}, training=training)["sequence_output"]
        outputs.update(self.objective.predict(self, sequence_output, outputs))
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
        "main_loss" (the kept encoder's, named by its objective)} as scalars, from
        `call`'s outputs."""
        losses = {}
        total = 0.0
        if self.generator is not None:
            losses["mlm_loss"] = mlm_loss(
                outputs["mlm_logits"], outputs["mlm_labels"], outputs["mlm_weights"])
            total += self.config.mlm_weight * losses["mlm_loss"]
        name, loss, weight = self.objective.encoder_loss(self.config, outputs)
        losses[name] = loss
        losses["loss"] = total + weight * loss
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
            self.generator_metrics["mlm_loss"].update_state(losses["mlm_loss"])
            self.generator_metrics["gen_acc"].update_state(*accuracy(
                outputs["mlm_logits"], outputs["mlm_labels"], outputs["mlm_weights"]))
        self.objective.update_metrics(self.encoder_metrics, outputs, losses)
        if self.replaced_fraction is not None:
            self.replaced_fraction.update_state(
                tf.cast(outputs["replaced"], tf.float32),
                sample_weight=tf.cast(outputs["input_mask"], tf.float32))

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
                   activation=config.get("activation", GELU), name=config.get("name"))

