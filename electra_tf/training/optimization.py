"""The official pretraining/fine-tuning optimizer: AdamW + warmup + polynomial decay."""

import re

import keras
import tensorflow as tf

from electra_tf.training.finetuning_recipe import (FINETUNING_WARMUP_PROPORTION,
                                                   FINETUNING_WEIGHT_DECAY)

# Variables excluded from weight decay, matched against Keras variable paths (the official
# code excludes "LayerNorm", "layer_norm" and "bias").
NO_DECAY_PATTERN = re.compile(r"(layer_?norm|bias|gamma|beta)", re.IGNORECASE)


@keras.saving.register_keras_serializable(package="electra_tf")
class WarmupPolynomialDecay(keras.optimizers.schedules.LearningRateSchedule):
    """lr(step) = peak * (1 - step / total) ** power * min(1, step / warmup).

    The official code multiplies the warmup ramp into the decayed rate (rather than
    switching from one to the other); step 0 therefore has lr 0.
    """

    def __init__(self, peak_learning_rate, total_steps, warmup_steps, power=1.0):
        self.peak_learning_rate = peak_learning_rate
        self.total_steps = total_steps
        self.warmup_steps = warmup_steps
        self.power = power

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        progress = tf.minimum(step, float(self.total_steps)) / float(max(1, self.total_steps))
        decayed = self.peak_learning_rate * (1.0 - progress) ** self.power
        if self.warmup_steps > 0:
            decayed *= tf.minimum(1.0, step / float(self.warmup_steps))
        return decayed

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate,
                "total_steps": self.total_steps, "warmup_steps": self.warmup_steps,
                "power": self.power}


@keras.saving.register_keras_serializable(package="electra_tf")
class AdamWeightDecay(keras.optimizers.Adam):
    """Adam with decoupled weight decay, as the official ELECTRA/BERT optimizer does it.

    update = m / (sqrt(v) + eps) [+ weight_decay * w]; w -= lr * multiplier * update.
    Keras has no switch for the official variant (no bias correction) nor per-variable
    learning rates (layer-wise decay, which also scales the weight decay), hence this class.

    Args:
        weight_decay_rate: decoupled weight decay.
        bias_correction: standard Adam bias correction (the official code has none).
        lr_multipliers: {variable path: multiplier} for layer-wise learning rates.
        no_decay_paths: paths of variables excluded from weight decay.
        clip_norm: global-norm clipping of the gradients summed over all replicas.
            Keras's `global_clipnorm` clips each replica's share before the sum, so under a
            distribution strategy it would clip a different (smaller) gradient than a
            single device does with the same global batch.
    """

    def __init__(self, weight_decay_rate=0.0, bias_correction=False, lr_multipliers=None,
                 no_decay_paths=(), clip_norm=None, **kwargs):
        super().__init__(**kwargs)
        self.weight_decay_rate = weight_decay_rate
        self.bias_correction = bias_correction
        self.lr_multipliers = dict(lr_multipliers or {})
        self.no_decay_paths = set(no_decay_paths)
        self.clip_norm = clip_norm

    def build(self, var_list):
        super().build(var_list)
        if self.lr_multipliers:
            # A variable the multipliers do not name would silently train at the full rate.
            unnamed = [v.path for v in var_list if v.path not in self.lr_multipliers]
            if unnamed:
                raise ValueError(f"lr_multipliers name no rate for {len(unnamed)} "
                                 f"variable(s): {', '.join(unnamed[:5])}")
        # update_step sees backend variables (no Keras path): resolve per index up front.
        self._multiplier_by_index = [self.lr_multipliers.get(v.path, 1.0) for v in var_list]
        self._decays_by_index = [v.path not in self.no_decay_paths for v in var_list]

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # The TensorFlow backend's hook between the cross-replica sum and the update.
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self.clip_norm:
            return grads_and_vars
        grads, variables = zip(*grads_and_vars)
        norm = tf.linalg.global_norm(grads)
        # tf.clip_by_global_norm's scale (NaN if the norm is), applied without the identity
        # op it adds to each gradient: 400 of the ~8,200 ops traced for ELECTRA-Small's step.
        scale = self.clip_norm * tf.minimum(1.0 / norm, tf.constant(1.0) / self.clip_norm)
        scale += norm - norm
        return [(_scaled(gradient, scale), variable)
                for gradient, variable in zip(grads, variables)]

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        # The TensorFlow backend's per-step entry to the variables' updates: Adam's scalars
        # are made here once per step (not once per variable: ~3,600 more ops in
        # ELECTRA-Small's traced step) and reach `update_step` as its `learning_rate`.
        super()._backend_update_step(grads, trainable_variables,
                                     _StepScalars(self, learning_rate))

    def update_step(self, gradient, variable, learning_rate):
        # One fused kernel (TensorFlow's ApplyAdam, the one tf.keras's Adam used) instead
        # of Keras's elementwise ops: those were a fifth of ELECTRA-Small's traced step
        # (each traced at every start-up) and each is another pass over the weights.
        # ApplyAdam computes m += (g - m)(1 - b1); v += (g² - v)(1 - b2);
        # w -= lr_t m / (sqrt(v) + eps) with lr_t = lr sqrt(1 - b2_power) / (1 - b1_power).
        scalars = learning_rate  # see _backend_update_step
        if variable.dtype != scalars.dtype:
            raise ValueError(f"AdamWeightDecay updates float32 variables (mixed precision "
                             f"keeps them float32); {variable.name} is {variable.dtype}.")
        index = self._get_variable_index(variable)
        multiplier = self._multiplier_by_index[index]
        if self.weight_decay_rate and self._decays_by_index[index]:
            # Decoupled decay of the weight before Adam's step: w - lr (adam + wd w), as
            # Adam's step does not read w. Scaled and assigned, one pass over the weights
            # fewer than subtracting the decay: ELECTRA-Small's classifier's update took
            # 22.6 instead of 24.7 ms (19.5 without decay; 2-core Sapphire Rapids).
            variable.assign(variable * scalars.kept(multiplier))
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle, beta1_power=scalars.beta_1_power,
            beta2_power=scalars.beta_2_power, lr=scalars.rate(multiplier),
            beta1=scalars.beta_1, beta2=scalars.beta_2, epsilon=scalars.epsilon,
            grad=tf.cast(tf.convert_to_tensor(gradient), scalars.dtype))

    def get_config(self):
        config = super().get_config()
        config.update({"weight_decay_rate": self.weight_decay_rate,
                       "bias_correction": self.bias_correction,
                       "lr_multipliers": self.lr_multipliers,
                       "no_decay_paths": sorted(self.no_decay_paths),
                       "clip_norm": self.clip_norm})
        return config


def _scaled(gradient, scale):
    """`gradient` x `scale`; an embedding's sparse gradient stays sparse (its norm counted
    each gathered row, as `tf.clip_by_global_norm` does)."""
    if isinstance(gradient, tf.IndexedSlices):
        return tf.IndexedSlices(gradient.values * scale, gradient.indices,
                                gradient.dense_shape)
    return gradient * scale


class _StepScalars:
    """The float32 scalars of one `AdamWeightDecay` step (variables are float32 under
    every precision policy): the rate and the factor a decayed weight keeps per
    learning-rate multiplier, and `ApplyAdam`'s constants."""

    dtype = tf.float32

    def __init__(self, optimizer: AdamWeightDecay, learning_rate):
        self.learning_rate = tf.cast(learning_rate, self.dtype)
        self.weight_decay_rate = optimizer.weight_decay_rate
        self.beta_1 = tf.constant(optimizer.beta_1, self.dtype)
        self.beta_2 = tf.constant(optimizer.beta_2, self.dtype)
        self.epsilon = tf.constant(optimizer.epsilon, self.dtype)
        if optimizer.bias_correction:
            step = tf.cast(optimizer.iterations + 1, self.dtype)
            self.beta_1_power = tf.pow(self.beta_1, step)
            self.beta_2_power = tf.pow(self.beta_2, step)
            # m_hat / (sqrt(v_hat) + eps) == lr_t / lr * m / (sqrt(v) + eps sqrt(1 - b2_power))
            self.epsilon *= tf.sqrt(1 - self.beta_2_power)
        else:  # the official update: lr_t = lr
            self.beta_1_power = self.beta_2_power = tf.constant(0.0, self.dtype)
        self._rates, self._kept = {}, {}

    def rate(self, multiplier: float):
        if multiplier not in self._rates:
            self._rates[multiplier] = self.learning_rate * multiplier
        return self._rates[multiplier]

    def kept(self, multiplier: float):
        """The factor a decayed weight keeps, 1 - lr x multiplier x weight decay."""
        if multiplier not in self._kept:
            self._kept[multiplier] = 1.0 - self.rate(multiplier) * self.weight_decay_rate
        return self._kept[multiplier]


def build_optimizer_before_fit(model) -> None:
    """Creates `model.optimizer`'s variables now, before `fit` traces the train step.

    Without a distribution strategy Keras leaves them to the step's first trace, and
    variables created while tracing make TensorFlow trace the whole step a second time:
    ELECTRA-Small's first fine-tuning `fit` took 39 s instead of 18 s on a 2-core AVX2 EPYC.
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and model.built and not optimizer.built:
        with model.distribute_strategy.scope():
            optimizer.build(model.trainable_variables)


def fit_shuffle(x, shuffle):
    """`fit`'s `shuffle` for data `x`: as given, else Keras's default, True, but for a
    `tf.data.Dataset`, which orders itself (Keras 3.15 warns that it ignores True)."""
    return not isinstance(x, tf.data.Dataset) if shuffle is None else shuffle


def create_optimizer(learning_rate, total_steps, warmup_steps, variables, weight_decay=0.01,
                     clip_norm=1.0, bias_correction=False, lr_decay_power=1.0,
                     lr_multipliers=None):
    """AdamW(β=0.9/0.999, ε=1e-6) with global-norm clipping; LayerNorm and biases undecayed."""
    schedule = WarmupPolynomialDecay(learning_rate, total_steps, warmup_steps, lr_decay_power)
    return AdamWeightDecay(
        weight_decay_rate=weight_decay, bias_correction=bias_correction,
        lr_multipliers=lr_multipliers,
        no_decay_paths=[v.path for v in variables if NO_DECAY_PATTERN.search(v.path)],
        learning_rate=schedule, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
        clip_norm=clip_norm or None)


def layerwise_lr_multipliers(encoder, variables, decay: float, official_bug=False) -> dict:
    """{variable path: decay ** depth-from-top} for fine-tuning (ELECTRA's layer-wise decay).

    The task head (every variable outside `encoder`) gets 1, the top encoder layer `decay`,
    ..., the embedding block (and its projection) `decay ** (num_layers + 1)`. The official
    code counts one level too many (its top layer gets decay ** 2, its head 1);
    `official_bug=True` reproduces that. An encoder variable outside the embeddings, the
    projection and the layers is an error, not a silent full rate.
    """
    num_layers = len(encoder.transformer_layers)
    top = num_layers + (2 if official_bug else 1)
    depth_of = {}
    parts = [(encoder.embeddings, 0)] + [(layer, i + 1)
                                         for i, layer in enumerate(encoder.transformer_layers)]
    if encoder.embeddings_project is not None:
        parts.append((encoder.embeddings_project, 0))
    for part, depth in parts:
        for v in part.weights:
            depth_of[id(v)] = depth
    encoder_variables = {id(v) for v in encoder.trainable_weights}
    unplaced = [v.path for v in encoder.trainable_weights if id(v) not in depth_of]
    if unplaced:
        raise ValueError(f"No layer-wise depth for encoder variable(s) {unplaced}.")
    return {v.path: decay ** (top - (depth_of[id(v)] if id(v) in encoder_variables else top))
            for v in variables}


def create_finetuning_optimizer(model, encoder, total_steps: int, learning_rate: float,
                                layerwise_decay: float,
                                warmup_proportion=FINETUNING_WARMUP_PROPORTION,
                                weight_decay=FINETUNING_WEIGHT_DECAY, bias_correction=False,
                                official_layerwise_decay_bug=False):
    """The official fine-tuning optimizer for a built task `model` around `encoder`: AdamW
    without bias correction, layer-wise rates, warmup over `warmup_proportion` of
    `total_steps` then linear decay to 0, gradients clipped at global norm 1.0."""
    variables = model.trainable_variables
    multipliers = layerwise_lr_multipliers(encoder, variables, layerwise_decay,
                                           official_layerwise_decay_bug)
    return create_optimizer(learning_rate, total_steps, int(warmup_proportion * total_steps),
                            variables, weight_decay, 1.0, bias_correction,
                            lr_multipliers=multipliers)


def create_pretraining_optimizer(config, model):
    """The optimizer for `ElectraPretrainer` from an `ElectraConfig` (builds the model)."""
    if not model.built:
        model.build_all()
    return create_optimizer(
        config.learning_rate, config.train_steps, config.warmup_steps,
        model.trainable_variables, config.weight_decay, config.clip_norm,
        config.adam_bias_correction, config.lr_decay_power)
