"""Where and how a run executes: `tf.distribute` strategy, mixed precision, XLA; applies
the options of `training.runtime_options.RuntimeOptions`.

These options never change what a checkpoint holds, so a run may resume under other ones
(e.g. pretrain on a TPU, continue on a GPU box).

Batch semantics under every strategy: `batch_size` is the GLOBAL batch of one optimizer
step. Each of the `num_replicas_in_sync` replicas computes `batch_size / replicas`
examples; gradients are averaged over the global batch, so the learning rate does not
depend on the number of devices.
"""

import contextlib
import functools
import json
import os
import sys
from typing import Optional

import keras
import tensorflow as tf

from electra_tf.errors import ConfigError
from electra_tf.layers.activations import fused_gelu, gelu
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.layers.fused_dropout import FusedDropout, swap_dropouts
from electra_tf.layers.fused_layer_normalization import use_fused_layer_norms
from electra_tf.layers.sixteen_bit_dropout import SixteenBitDropout
from electra_tf.tf_runtime import accelerator_visible, bfloat16_products_accumulate_in_float32
from electra_tf.training.runtime_options import PRECISIONS, RuntimeOptions


def create_strategy(options: RuntimeOptions) -> tf.distribute.Strategy:
    """The `tf.distribute.Strategy` named by `options.strategy`.

    Must run before any other TensorFlow op (multi-worker and TPU set up the runtime).
    """
    name = options.validated().strategy
    if name == "auto":
        name = _auto_strategy(options.tpu)
    if name == "tpu":
        try:
            resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=options.tpu or "")
            tf.config.experimental_connect_to_cluster(resolver)
            tf.tpu.experimental.initialize_tpu_system(resolver)
        except (ValueError, tf.errors.OpError) as e:
            raise ConfigError(f"--strategy tpu: cannot reach TPU {options.tpu or '(local)'}: "
                              f"{str(e).rstrip('.')}. Pass --tpu NAME (or grpc://host:port)."
                              ) from e
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ConfigError("--strategy multi_worker reads the cluster from the TF_CONFIG "
                              "environment variable (see README: Distributed training); "
                              "it is not set.")
        return tf.distribute.MultiWorkerMirroredStrategy()
    gpus = tf.config.list_logical_devices("GPU")
    if name == "gpu":
        if not gpus:
            raise ConfigError("--strategy gpu: TensorFlow sees no GPU on this machine; use "
                              "--strategy cpu (or auto).")
        return tf.distribute.OneDeviceStrategy(gpus[0].name)
    if name == "mirrored":
        devices = [d.name for d in gpus] or [d.name for d in tf.config.list_logical_devices(
            "CPU")]
        return tf.distribute.MirroredStrategy(devices)
    if name == "cpu" and not gpus:
        # TensorFlow's default strategy, as `model.fit` from Python without a strategy: on
        # 2-core AVX2 EPYCs `fit` under OneDeviceStrategy("/cpu:0") ran steps 1.5-1.8x
        # slower, its ops' outputs landing on fresh pages (7-24x the page faults, which
        # its distributed dataset iterator brings: docs/distributed.md,
        # bench/fit_strategy.py). With a GPU present, only OneDeviceStrategy keeps the run
        # off it.
        return tf.distribute.get_strategy()
    return tf.distribute.OneDeviceStrategy("/cpu:0" if name == "cpu" else gpus[0].name)


def _auto_strategy(tpu: Optional[str]) -> str:
    if tpu or os.environ.get("TPU_NAME"):
        return "tpu"
    if "TF_CONFIG" in os.environ and len(json.loads(os.environ["TF_CONFIG"]).get(
            "cluster", {}).get("worker", [])) > 1:
        return "multi_worker"
    gpus = tf.config.list_logical_devices("GPU")
    return "mirrored" if len(gpus) > 1 else ("gpu" if gpus else "cpu")


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """True on the one worker that writes checkpoints, logs and results."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().jobs:
        return True
    return resolver.task_type in ("chief", None) or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().jobs)


def worker_id(strategy: tf.distribute.Strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    return int(resolver.task_id or 0) if resolver is not None else 0


@functools.cache  # once per process, not per model built (each fine-tuning trial builds one)
def _note_slow_bfloat16() -> None:
    if accelerator_visible() or bfloat16_products_accumulate_in_float32():
        return
    # TensorFlow then multiplies bfloat16 on Eigen: ELECTRA-Small's pretraining step 1.24x
    # slower than float32's (2-core AMD EPYC, AVX2 only), with partial sums rounded to
    # bfloat16.
    print("note: TensorFlow has no fast bfloat16 matrix products on this CPU (AVX2 only, "
          "or TF_ENABLE_ONEDNN_OPTS=0): --mixed_precision bf16 trains slower than "
          "float32 here and rounds its products' partial sums; --mixed_precision none "
          "is faster.", file=sys.stderr)


@contextlib.contextmanager
def precision(mixed_precision: str):
    """Layers built inside compute in the given precision (variables stay float32).

    Keras reads the policy when a layer is created, so it is set only while models are
    built and restored afterwards (tests build several models in one process).
    """
    if mixed_precision == "bf16":
        _note_slow_bfloat16()
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(PRECISIONS[mixed_precision])
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def cpu_bfloat16(bfloat16: bool) -> bool:
    """Whether a model that computes in bfloat16 (`bfloat16`) does so on the CPU, where
    `RuntimeOptions.for_run` turns on what was measured to pay there."""
    return bfloat16 and not accelerator_visible()


def use_training_kernels(model, options: RuntimeOptions) -> list:
    """Gives a built model the training-only kernels `options` asks for: its dropouts' and
    layer norms' classes, and the GELU of encoders built with `gelu` (runs build theirs
    with `encoder_activation`'s choice). Returns what it changed, (layer, attribute, value
    before) each, for `training_kernels` to put back."""
    changed = []
    dropout_class = _dropout_class(options)
    if dropout_class is not None:
        changed += [(layer, "__class__", before)
                    for layer, before in swap_dropouts(model, dropout_class)]
    if options.fused_layer_norm:
        changed += [(layer, "__class__", before)
                    for layer, before in use_fused_layer_norms(model)]
    if options.fused_gelu:
        encoders = [layer for layer in model._flatten_layers()
                    if isinstance(layer, ElectraEncoder)]
        for layer in (inner for encoder in encoders for inner in encoder._flatten_layers()):
            if getattr(layer, "activation", None) is gelu:
                changed.append((layer, "activation", gelu))
                layer.activation = fused_gelu
    return changed


def _dropout_class(options: RuntimeOptions):
    """The class `options` give Keras's dropouts in training, or None to keep theirs."""
    if options.fused_dropout:
        if options.sixteen_bit_dropout:
            _note_sixteen_bits_unused()
        return FusedDropout
    return SixteenBitDropout if options.sixteen_bit_dropout else None


@functools.cache  # once per process, not per `fit`
def _note_sixteen_bits_unused() -> None:
    print("note: --sixteen_bit_dropout leaves the fused dropout this run trains with as it "
          "is (32 bits a value: 16 were no faster there); it applies where Keras's dropout "
          "runs (--nofused_dropout, or fine-tuning shorter than 256 positions).",
          file=sys.stderr)


def runs_training_kernels(model) -> bool:
    """Whether a built `model` runs any of the XLA training kernels that compile for every
    shape (`use_training_kernels`): the dropouts'; the GELU's and layer norms' bound theirs
    themselves (`layers.row_buckets`)."""
    return any(isinstance(layer, FusedDropout) for layer in model._flatten_layers())


@contextlib.contextmanager
def training_kernels(model, options: RuntimeOptions):
    """Within, a built `model` runs the training-only kernels `options` asks for
    (`use_training_kernels`); afterwards each layer changed is as it was, so that its
    inference, exports and `.keras` files keep the layers' own kernels (the training
    kernels compile for every new shape). Functions traced within keep the kernels they
    traced."""
    changed = use_training_kernels(model, options)
    try:
        yield
    finally:
        for layer, attribute, before in reversed(changed):
            setattr(layer, attribute, before)


def wrap_optimizer(optimizer, mixed_precision: str):
    """fp16 needs dynamic loss scaling (gradients underflow); bf16 has fp32's range."""
    if mixed_precision == "fp16":
        return keras.optimizers.LossScaleOptimizer(optimizer)
    return optimizer
