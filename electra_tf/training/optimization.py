"""The official pretraining/fine-tuning optimizer: AdamW + warmup + polynomial decay."""

import re

import keras
import tensorflow as tf

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
class AdamWeightDecay(keras.optimizers.AdamW):
    """Keras AdamW with the official code's option of no bias correction.

    The official ELECTRA/BERT `AdamWeightDecayOptimizer` applies `m / (sqrt(v) + eps)`
    without Adam's bias correction; Keras has no switch for that, hence this subclass.
    Decoupled weight decay (`w -= lr * wd * w`) is identical in both.
    """

    def __init__(self, bias_correction=False, **kwargs):
        super().__init__(**kwargs)
        self.bias_correction = bias_correction

    def update_step(self, gradient, variable, learning_rate):
        if self.bias_correction:
            return super().update_step(gradient, variable, learning_rate)
        lr = tf.cast(learning_rate, variable.dtype)
        gradient = tf.cast(gradient, variable.dtype)
        m = self._momentums[self._get_variable_index(variable)]
        v = self._velocities[self._get_variable_index(variable)]
        self.assign_add(m, (gradient - m) * (1 - self.beta_1))
        self.assign_add(v, (tf.square(gradient) - v) * (1 - self.beta_2))
        self.assign_sub(variable, lr * m / (tf.sqrt(v) + self.epsilon))

    def get_config(self):
        config = super().get_config()
        config["bias_correction"] = self.bias_correction
        return config


def create_optimizer(learning_rate, total_steps, warmup_steps, variables, weight_decay=0.01,
                     clip_norm=1.0, bias_correction=False, lr_decay_power=1.0):
    """AdamW(β=0.9/0.999, ε=1e-6) with global-norm clipping; LayerNorm and biases undecayed."""
    schedule = WarmupPolynomialDecay(learning_rate, total_steps, warmup_steps, lr_decay_power)
    optimizer = AdamWeightDecay(
        bias_correction=bias_correction, learning_rate=schedule, weight_decay=weight_decay,
        beta_1=0.9, beta_2=0.999, epsilon=1e-6, global_clipnorm=clip_norm or None)
    optimizer.exclude_from_weight_decay(
        var_list=[v for v in variables if NO_DECAY_PATTERN.search(v.path)])
    return optimizer


def create_pretraining_optimizer(config, model):
    """The optimizer for `ElectraPretrainer` from an `ElectraConfig` (builds the model)."""
    if not model.built:
        model.build_all()
    return create_optimizer(
        config.learning_rate, config.train_steps, config.warmup_steps,
        model.trainable_variables, config.weight_decay, config.clip_norm,
        config.adam_bias_correction, config.lr_decay_power)
