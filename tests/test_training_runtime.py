"""Strategy selection and its errors, and what the runtime flags change in a model."""

import os
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.layers import layer_stack
from electra_tf.layers.activations import fused_gelu
from electra_tf.layers.fused_dropout import FusedDropout
from electra_tf.layers.fused_layer_normalization import FusedLayerNormalization
from electra_tf.training import runtime
from electra_tf.training.runtime import create_strategy
from electra_tf.training.runtime_options import RuntimeOptions


@pytest.mark.parametrize("strategy", ["auto", "cpu"])
def test_one_cpu_trains_under_the_default_strategy_as_from_python(strategy):
    # Not OneDeviceStrategy("/cpu:0"): its distributed dataset made `fit` 1.5-1.8x slower
    # on AVX2 CPUs (bench/fit_strategy.py).
    assert create_strategy(RuntimeOptions(strategy=strategy)) is tf.distribute.get_strategy()


def test_mirrored_without_accelerators_mirrors_the_cpu():
    chosen = create_strategy(RuntimeOptions(strategy="mirrored"))
    assert type(chosen) is tf.distribute.MirroredStrategy
    assert all("CPU" in device for device in chosen.extended.worker_devices)


# Which allocator TensorFlow's CPU tensors come from, after importing TensorFlow before
# electra_tf (as users do): the bytes a 12,000-byte tensor adds to the CPU's memory
# statistics (the pooling allocator rounds every allocation up to 256 bytes; malloc's
# statistics leave it out, or keep none without oneDNN), then the page faults per 64 MB
# multiplication, repeated.
_ALLOCATOR_PROBE = """
import resource, tensorflow as tf, electra_tf
def in_use():
    try:
        return tf.config.experimental.get_memory_info("CPU:0")["current"]
    except ValueError:  # "Allocator stats not available"
        return 0
before = in_use()
small = tf.fill([3000], 1.0)
print(in_use() - before)
x = tf.random.uniform([4096, 4096])
for _ in range(4): y = x * 2.0
faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10): y = x * 2.0
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) // 10)
"""


@pytest.mark.parametrize("setting, pooled", [(None, True), ("false", False)])
def test_importing_electra_tf_pools_tensorflow_cpu_memory_unless_told_not_to(setting,
                                                                           pooled):
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    if setting is not None:
        environment["TF_CPU_ALLOCATOR_USE_BFC"] = setting
    in_use, faults = map(int, subprocess.run(
        [sys.executable, "-c", _ALLOCATOR_PROBE], env=environment, capture_output=True,
        text=True, check=True).stdout.split())
    assert (in_use == 12032) == pooled
    # Pooled memory is reused without faulting it in again. Under malloc each 64 MB result
    # faulted 16,384 fresh pages on the AVX2 EPYCs' kernel and none on another (6.18), so
    # that side's count is not asserted.
    if pooled:
        assert faults < 1000


_GRAPPLER_ROUNDS = """
import numpy as np, tensorflow as tf
from electra_tf.config import ElectraConfig
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.models.text_classifier import ElectraTextClassifier

@tf.function
def outside(x):
    return tf.reduce_sum(tf.identity(x) * 2.0 + 1.0)

outside(tf.ones([3]))
encoder = ElectraEncoder.from_electra_config(ElectraConfig.preset("tiny", vocab_size=100))
ids = np.full((4, 8), 7, np.int32)
inputs = {"input_word_ids": ids, "input_mask": ids * 0 + 1, "input_type_ids": ids * 0}
ElectraTextClassifier(encoder, num_classes=2).fit(inputs, np.array([0, 1, 0, 1]),
                                                  batch_size=4, verbose=0)
"""


def test_fit_optimizes_its_functions_in_one_grappler_round_of_fewer_passes_others_keep_all():
    environment = {**os.environ, "TF_CPP_VMODULE": "meta_optimizer=1",
                   "TF_CPP_MIN_LOG_LEVEL": "0"}
    log = subprocess.run([sys.executable, "-c", _GRAPPLER_ROUNDS], env=environment,
                         capture_output=True, text=True, check=True).stderr
    # Each pass logs "<name>: Graph size after"; each round starts with the model pruner.
    passes = {}
    for item in log.split("Starting optimization for grappler item: ")[1:]:
        name = item.split()[0].rsplit("_", 1)[0]
        passes[name] = re.findall(r"\] (\w+)(?::|\{)", item)
    outside, fit = passes["__inference_outside"], passes["__inference_multi_step_on_iterator"]
    assert outside.count("model_pruner") == 2 and fit.count("model_pruner") == 1
    # Passes that change nothing on a CPU (layouts are for GPUs' convolutions) do not run.
    idle = {"layout", "tfg_optimizer", "loop_optimizer", "implementation_selector",
            "memory_optimizer"}
    assert idle <= set(outside) and not idle & set(fit)
    assert {"function_optimizer", "shape_optimizer"}.isdisjoint(fit)
    assert {"constant_folding", "common_subgraph_elimination", "arithmetic_optimizer",
            "remapper", "dependency_optimizer"} <= set(fit)


_EAGER_OPS = """
import tensorflow as tf
from electra_tf.config import ElectraConfig
from electra_tf.layers.encoder import ElectraEncoder

def run_as_a_function():
    # TensorFlow's error then names the one-op function it wrapped the op in.
    try:
        tf.reshape(tf.ones([3]), [2])
    except tf.errors.InvalidArgumentError as e:
        return "{{function_node __wrapped__Reshape" in str(e)

before = run_as_a_function()
ElectraEncoder.from_electra_config(ElectraConfig.preset("tiny", vocab_size=100)).build()
print(before, run_as_a_function())
"""


def test_building_an_encoder_on_a_cpu_runs_eager_ops_by_their_kernels_from_then_on():
    # Each new variable's ops then skip instantiating a function: ELECTRA-Small's
    # pretrainer and optimizer built in 4.0-4.6 s instead of 6.8-7.7 s (electra_tf/tf_runtime).
    printed = subprocess.run([sys.executable, "-c", _EAGER_OPS], capture_output=True,
                             text=True, check=True).stdout.split()
    assert printed == ["True", "False"]


@pytest.mark.parametrize("options, message", [
    (dict(strategy="gpu"), "--strategy gpu: TensorFlow sees no GPU on this machine; use "
                           "--strategy cpu"),
    (dict(strategy="tpu"), "--strategy tpu: cannot reach TPU .*Pass --tpu NAME"),
    (dict(strategy="multi_worker"), "reads the cluster from the TF_CONFIG"),
    (dict(strategy="horovod"), "--strategy='horovod'; choose one of auto, cpu"),
    (dict(mixed_precision="fp8"), "--mixed_precision='fp8'"),
])
def test_unusable_strategies_are_one_line_errors(options, message, monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ConfigError, match=message):
        create_strategy(RuntimeOptions(**options))


def test_fused_gelu_is_the_default_and_nofused_gelu_builds_keras_gelu():
    from electra_tf.runs.pretrain import build_model

    cfg = ElectraConfig.preset("tiny", vocab_size=100, max_seq_length=16)
    outputs = {}
    for fused, options in ((True, RuntimeOptions()), (False, RuntimeOptions(fused_gelu=False))):
        keras.utils.set_random_seed(0)
        model, _ = build_model(cfg, options)
        activation = model.discriminator.transformer_layers[0].activation
        assert (activation is fused_gelu) == fused
        assert (model.generator.transformer_layers[0].activation is fused_gelu) == fused
        ids = np.arange(16, dtype=np.int32)[None] + 5
        outputs[fused] = model.discriminator(
            {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids)})["sequence_output"].numpy()
    np.testing.assert_allclose(outputs[True], outputs[False], rtol=1e-5, atol=1e-5)


def test_training_runs_use_fused_dropout_and_layer_norms_unless_told_not_to(monkeypatch):
    from electra_tf.runs.pretrain import build_model

    # Each transformer layer traced in the step's own graph, where the draws are counted
    # (a training step otherwise traces one layer per tower, in a function of its own).
    monkeypatch.setattr(layer_stack, "_all_alike", lambda layers: False)

    cfg = ElectraConfig.preset("tiny", vocab_size=200, max_seq_length=16, batch_size=2)
    ids = tf.constant(np.arange(16, dtype=np.int32)[None].repeat(2, 0) + 5)
    batch = {"input_word_ids": ids, "input_mask": tf.ones_like(ids),
             "input_type_ids": tf.zeros_like(ids)}
    philox_draws = {}
    for fused in (True, False):
        model, _ = build_model(cfg, RuntimeOptions(fused_dropout=fused,
                                                   fused_layer_norm=fused))
        dropouts = [layer for layer in model._flatten_layers()
                    if isinstance(layer, keras.layers.Dropout)]
        norms = [layer for layer in model._flatten_layers()
                 if isinstance(layer, keras.layers.LayerNormalization)]
        # The shared embeddings', two in each layer of both towers and the generator
        # head's: all fused, or none.
        assert len(norms) == 1 + 2 * 2 * cfg.num_layers + 1
        assert all((type(layer) is FusedLayerNormalization) == fused for layer in norms)
        # The shared embeddings' and, in each layer of both towers, the attention
        # probabilities', the attention output's and the feed-forward output's.
        assert len(dropouts) == 1 + 2 * cfg.num_layers * 3
        assert all((type(layer) is FusedDropout) == fused for layer in dropouts)
        step = tf.function(model.train_step).get_concrete_function(batch)
        philox_draws[fused] = sum(op.type == "StatelessRandomUniformV2"
                                  for op in step.graph.get_operations())
        assert np.isfinite(float(step(batch)["loss"]))  # the traced step trains
    # Keras's dropout draws with Philox once per call (the embeddings twice, once per tower);
    # what is left when fused is the masking's draws.
    assert philox_draws[False] - philox_draws[True] == 2 + 2 * cfg.num_layers * 3


@pytest.mark.parametrize("precision", ["fp16", "none"])
def test_float16_runs_without_the_remapper_on_a_cpu(precision, monkeypatch):
    """oneDNN runs a float16 `MatMul` fused with its `BiasAdd` with its reference code on
    CPUs with AVX512_FP16 (100x slower): float16 models' `fit` and `predict` turn the
    fusing pass off; other precisions keep it."""
    from tensorflow.core.protobuf import rewriter_config_pb2

    from electra_tf.layers.encoder import ElectraEncoder
    from electra_tf.models.text_classifier import ElectraTextClassifier
    from electra_tf.runs.pretrain import build_model
    from electra_tf.training.graph_optimization import call_config
    from electra_tf.training.runtime import precision as precision_scope

    cfg = ElectraConfig.preset("tiny", vocab_size=200, max_seq_length=16, batch_size=2)
    model, _ = build_model(cfg, RuntimeOptions(mixed_precision=precision))
    with precision_scope(precision):
        classifier = ElectraTextClassifier(ElectraEncoder.from_electra_config(cfg), 2)
    seen = []
    for which, name in ((model, "train_function"), (classifier, "predict_function")):
        make = getattr(which, "make_" + name)

        def watched(force=False, which=which, name=name, make=make):
            make(force)
            function = getattr(which, name)
            setattr(which, name, lambda *args: seen.append(
                call_config().graph_options.rewrite_options.remapping) or function(*args))
            return getattr(which, name)

        monkeypatch.setattr(which, "make_" + name, watched)
    ids = np.full((2, 16), 7, np.int32)
    batch = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids)}
    model.fit(tf.data.Dataset.from_tensors(
        {**batch, "noise": np.full((2, model.noise_width), 0.5, np.float32)}), verbose=0)
    classifier.predict(batch, verbose=0)
    off = rewriter_config_pb2.RewriterConfig.OFF
    kept = rewriter_config_pb2.RewriterConfig.DEFAULT
    assert seen == [off if precision == "fp16" else kept] * 2


@pytest.mark.parametrize("fast_products", [False, True])
def test_bf16_on_a_cpu_without_bfloat16_products_says_float32_is_faster(
        fast_products, monkeypatch, capsys):
    """Where TensorFlow multiplies bfloat16 on Eigen (AVX2-only CPUs), bf16 trains slower
    than float32: the runs say so when they build their models, once a process (a
    fine-tuning's trials each build one), and only there."""
    monkeypatch.setattr(runtime, "bfloat16_products_accumulate_in_float32",
                        lambda: fast_products)
    runtime._note_slow_bfloat16.cache_clear()  # as if this process had given no note yet
    for _ in range(2):
        with runtime.precision("bf16"):
            assert keras.config.dtype_policy().name == "mixed_bfloat16"
    with runtime.precision("none"):
        pass
    note = capsys.readouterr().err
    if fast_products:
        assert note == ""
    else:
        assert note.count("\n") == 1 and "--mixed_precision none is faster" in note
