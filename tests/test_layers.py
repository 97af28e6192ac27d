import collections
import json
import subprocess

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import run_command
from electra_tf.config import ElectraConfig
from electra_tf.layers import flat_dense, layer_stack, row_buckets
from electra_tf.layers.activations import fused_gelu, gelu
from electra_tf.layers.bfloat16_rounding import narrow
from electra_tf.layers.closed_form_layer_normalization import (
    ONEDNN_LAYER_NORM_MIN_ROWS, ClosedFormLayerNormalization)
from electra_tf.layers.discriminator_head import DiscriminatorHead
from electra_tf.layers.embeddings import ElectraEmbeddings
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.layers.export_tracing import export_tracing
from electra_tf.layers.flat_einsum_dense import attention_projections, feedforward_layers
from electra_tf.layers.fused_dropout import FusedDropout, drop_threshold
from electra_tf.layers.fused_layer_normalization import FusedLayerNormalization
from electra_tf.layers.inference import forms_per_call, inference_only, onednn_trial_at_load
from electra_tf.layers.masked_lm_head import tied_masked_lm_head
from electra_tf.layers.onednn_batch_matmul import batch_matmul
from electra_tf.layers.onednn_trial_at_load import OneDnnTrialAtLoad
from electra_tf.layers.query_first_attention import (SMALL_ATTENTION_MAX_SCORES,
                                                      self_attention)
from electra_tf.layers.sixteen_bit_dropout import SixteenBitDropout
from electra_tf.tf_runtime import (accelerator_visible, bfloat16_products_accumulate_in_float32,
                                   one_thread_product_bytes, onednn_enabled,
                                   products_run_on_eigen, products_run_on_onednn)


def encoder_inputs(batch=2, seq=12, lengths=(12, 7), vocab=100, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, vocab, (batch, seq)).astype(np.int32)
    mask = np.zeros((batch, seq), np.int32)
    for row, n in enumerate(lengths):
        mask[row, :n] = 1
    types = np.zeros_like(ids)
    types[:, seq // 2:] = 1
    return {"input_word_ids": ids * mask, "input_mask": mask, "input_type_ids": types * mask}


def test_small_discriminator_has_the_official_parameter_count():
    encoder = ElectraEncoder.from_electra_config(ElectraConfig.preset("small"))
    encoder(encoder_inputs())
    # keras-hub's ElectraBackbone small (13,548,800) minus its 65,792-parameter pooler.
    assert encoder.count_params() == 13_483_008


def test_tf_hub_style_outputs_and_padding_has_no_effect():
    cfg = ElectraConfig.preset("tiny", vocab_size=100)
    encoder = ElectraEncoder.from_electra_config(cfg)
    inputs = encoder_inputs()
    out = encoder(inputs, training=False)
    assert out["sequence_output"].shape == (2, 12, 64)
    np.testing.assert_array_equal(out["pooled_output"], out["sequence_output"][:, 0])
    assert len(out["encoder_outputs"]) == cfg.num_layers
    changed = dict(inputs, input_word_ids=inputs["input_word_ids"].copy())
    changed["input_word_ids"][1, 7:] = 42  # only padding changes
    again = encoder(changed, training=False)
    np.testing.assert_allclose(again["sequence_output"][1, :7], out["sequence_output"][1, :7],
                               atol=1e-5)


def test_dropout_only_in_training():
    encoder = ElectraEncoder.from_electra_config(ElectraConfig.preset("tiny", vocab_size=100))
    inputs = encoder_inputs()
    a = encoder(inputs, training=False)["sequence_output"]
    b = encoder(inputs, training=False)["sequence_output"]
    c = encoder(inputs, training=True)["sequence_output"]
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_gelu_is_exact_erf():
    x = tf.constant([-1.0, 0.5, 2.0])
    exact = x * 0.5 * (1.0 + tf.math.erf(x / np.sqrt(2.0)))
    head = DiscriminatorHead(3)
    np.testing.assert_allclose(head.dense.activation(x), exact, rtol=1e-6)


@pytest.mark.parametrize("layer, expected", [
    (ElectraEmbeddings(100, 16, 32, name="embeddings"),
     dict(vocab_size=100, embedding_size=16, max_position_embeddings=32, type_vocab_size=2,
          dropout=0.1, initializer_range=0.02, layer_norm_epsilon=1e-12)),
    (DiscriminatorHead(16, 0.05, name="head"), dict(hidden_size=16, initializer_range=0.05)),
])
def test_layers_round_trip_their_config(layer, expected):
    config = layer.get_config()
    assert {k: config[k] for k in expected} == expected
    clone = layer.__class__.from_config(config)
    assert {k: clone.get_config()[k] for k in expected} == expected
    assert clone.name == layer.name


# bf16: within one bf16 rounding step at 1 (0.0078) of Keras (both round intermediates).
@pytest.mark.parametrize("dtype, rtol, atol", [(tf.float32, 1e-6, 1e-6),
                                               (tf.bfloat16, 1e-2, 5e-3)])
@pytest.mark.parametrize("ours", [gelu, fused_gelu])
def test_our_gelus_match_keras_gelu_and_its_gradient(ours, dtype, rtol, atol):
    x = tf.cast(tf.linspace(-6.0, 6.0, 241), dtype)
    upstream = tf.cast(tf.linspace(0.5, 1.5, 241), dtype)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        fused, plain = ours(x), keras.activations.gelu(x)
    assert fused.dtype == dtype
    as_float = lambda t: tf.cast(t, tf.float32).numpy()  # noqa: E731
    np.testing.assert_allclose(as_float(fused), as_float(plain), rtol=rtol, atol=atol)
    # Phi(x) + x phi(x): 0.5 at 0, ~1.0833 at 1 (hand-computed), ~0 far left, ~1 far right.
    grad = as_float(tape.gradient(fused, x, output_gradients=upstream))
    np.testing.assert_allclose(grad, as_float(tape.gradient(plain, x, upstream)),
                               rtol=rtol, atol=atol)
    unit = as_float(tape.gradient(fused, x))
    np.testing.assert_allclose(unit[[0, 120, 140, 240]], [0.0, 0.5, 1.0833155, 1.0],
                               rtol=rtol, atol=max(atol, 1e-5))


@pytest.mark.parametrize("rows", [16, 17, 37])
@pytest.mark.parametrize("dtype, rtol, atol", [(tf.float32, 1e-6, 1e-6),
                                               (tf.bfloat16, 1e-2, 5e-3)])
def test_the_fused_gelu_of_rows_unknown_until_run_time_is_keras_gelu(rows, dtype, rtol, atol):
    """Where a batch's rows are unknown when traced, the fused GELU's kernels run over them
    padded to a bucket (16 fills one, 17 and 37 do not): the padding is cut off both ways."""
    rng = np.random.default_rng(rows)
    x = tf.constant(rng.normal(0.0, 2.0, (rows, 8)), dtype)
    upstream = tf.constant(rng.normal(size=(rows, 8)), dtype)

    def outputs_and_gradient(gelu_of):
        @tf.function(input_signature=[tf.TensorSpec([None, 8], dtype)] * 2)
        def traced(x, upstream):
            with tf.GradientTape() as tape:
                tape.watch(x)
                y = gelu_of(x)
            return y, tape.gradient(y, x, output_gradients=upstream)
        return [tf.cast(t, tf.float32).numpy() for t in traced(x, upstream)]

    for got, expected in zip(outputs_and_gradient(fused_gelu),
                             outputs_and_gradient(keras.activations.gelu)):
        assert got.shape == (rows, 8)
        np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


def test_row_buckets_round_rows_up_by_at_most_an_eighth():
    rows = [1, 15, 16, 17, 600, 640, 641, 1024, 1025, row_buckets.ROW_BUCKETS[-1] + 1]
    got = [int(row_buckets.bucketed_rows(tf.constant(n))) for n in rows]
    assert got == [1, 15, 16, 18, 640, 640, 704, 1024, 1152, rows[-1]]
    buckets = np.asarray(row_buckets.ROW_BUCKETS)
    rows = np.arange(1, 100_000)
    chosen = buckets[np.searchsorted(buckets, rows)]  # as `bucketed_rows` picks
    assert np.all(chosen >= rows) and np.all(chosen < rows * 1.125 + 1)


def norms_alike(classes, policy):
    """(x, upstream, norms): a [3, 5, 16] input, an upstream gradient for it, and one built
    layer norm of each class with the same random scale and offset."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(3.0, 2.0, (3, 5, 16)), tf.float32)
    upstream = tf.constant(rng.normal(size=(3, 5, 16)), tf.float32)
    weights = [rng.normal(1.0, 0.5, 16), rng.normal(0.0, 0.5, 16)]
    norms = [cls(epsilon=1e-3, dtype=policy) for cls in classes]
    for norm in norms:
        norm.build(x.shape)
        norm.set_weights(weights)
    return x, upstream, norms


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_closed_form_layer_norm_is_keras_forward_with_its_gradient_in_fewer_ops(policy):
    x, upstream, (ours, keras_norm) = norms_alike(
        (ClosedFormLayerNormalization, keras.layers.LayerNormalization), policy)

    def traced(norm):
        # Batch and length unknown, as under `fit`.
        @tf.function(input_signature=[tf.TensorSpec([None, None, 16])] * 2)
        def outputs_and_gradients(x, upstream):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outputs = tf.cast(norm(x), tf.float32)
            return outputs, tape.gradient(outputs, [x, *norm.trainable_variables], upstream)

        graph = outputs_and_gradients.get_concrete_function().graph
        return outputs_and_gradients(x, upstream), len(graph.get_operations())

    np.testing.assert_array_equal(ours(x), keras_norm(x))  # the same forward ops
    (outputs, gradients), operations = traced(ours)
    (keras_outputs, keras_gradients), keras_operations = traced(keras_norm)
    # Grappler rewrites the two graphs' arithmetic differently: equal to rounding.
    np.testing.assert_allclose(outputs, keras_outputs, rtol=1e-6, atol=1e-6)
    assert operations < keras_operations / 2
    for mine, theirs in zip(gradients, keras_gradients):
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_a_layer_norm_traced_for_inference_takes_a_cheaper_order_as_exact_as_keras(policy):
    x, _, (norm,) = norms_alike((ClosedFormLayerNormalization,), policy)
    gamma, beta = (w.astype(np.float64) for w in norm.get_weights())

    def traced():
        function = tf.function(lambda x: tf.cast(norm(x), tf.float32))
        graph = function.get_concrete_function(tf.TensorSpec([None, None, 16])).graph
        return function(x).numpy(), {op.type for op in graph.get_operations()}

    keras_order, keras_ops = traced()
    with inference_only():
        inference_order, inference_ops = traced()
    assert "SquaredDifference" in keras_ops and "SquaredDifference" not in inference_ops
    x64 = x.numpy().astype(np.float64)
    mean, variance = x64.mean(-1, keepdims=True), x64.var(-1, keepdims=True)
    exact = (x64 - mean) / np.sqrt(variance + norm.epsilon) * gamma + beta
    tolerance = 1e-6 if policy == "float32" else 1e-2  # bfloat16 outputs: 8 bits
    np.testing.assert_allclose(inference_order, exact, rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(keras_order, exact, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("policy, rtol, atol", [("float32", 1e-5, 1e-5),
                                                 ("mixed_bfloat16", 2.0 ** -7, 2e-2)])
def test_fused_layer_norm_is_the_closed_form_one_with_its_gradient(policy, rtol, atol):
    x, upstream, (fused, closed_form) = norms_alike(
        (FusedLayerNormalization, ClosedFormLayerNormalization), policy)

    def outputs_and_gradients(norm):
        with tf.GradientTape() as tape:
            tape.watch(x)
            outputs = norm(x)
        return outputs, tape.gradient(outputs, [x, *norm.trainable_variables],
                                      tf.cast(upstream, outputs.dtype))

    (outputs, gradients), (expected, expected_gradients) = (
        outputs_and_gradients(norm) for norm in (fused, closed_form))
    assert outputs.dtype == expected.dtype == fused.compute_dtype
    np.testing.assert_allclose(tf.cast(outputs, tf.float32), tf.cast(expected, tf.float32),
                               rtol=rtol, atol=atol)
    for mine, theirs in zip(gradients, expected_gradients):
        np.testing.assert_allclose(tf.cast(mine, tf.float32), tf.cast(theirs, tf.float32),
                                   rtol=rtol, atol=atol * np.abs(theirs).max())
    # The statistics are computed inside the two XLA kernels, not by TensorFlow's ops.
    kernels = {op.type for op in tf.function(lambda: outputs_and_gradients(fused))
               .get_concrete_function().graph.get_operations()}
    assert kernels.isdisjoint({"Mean", "SquaredDifference", "Rsqrt"})


@pytest.mark.parametrize("policy, rtol, atol", [("float32", 1e-5, 1e-5),
                                                 ("mixed_bfloat16", 2.0 ** -7, 2e-2)])
def test_a_fused_layer_norm_of_rows_unknown_until_run_time_is_the_closed_form_one(
        policy, rtol, atol):
    """21 rows, traced as unknown: the kernels run over them padded to a bucket of 22
    (`row_buckets`), the padding cut off the outputs and the gradients, and left out of
    the scale's and shift's."""
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(3.0, 2.0, (3, 7, 16)), tf.float32)
    upstream = tf.constant(rng.normal(size=(3, 7, 16)), tf.float32)
    weights = [rng.normal(1.0, 0.5, 16), rng.normal(0.0, 0.5, 16)]
    results = []
    for cls in (FusedLayerNormalization, ClosedFormLayerNormalization):
        norm = cls(epsilon=1e-3, dtype=policy)
        norm.build(x.shape)
        norm.set_weights(weights)

        @tf.function(input_signature=[tf.TensorSpec([None, None, 16])] * 2)
        def outputs_and_gradients(x, upstream):
            with tf.GradientTape() as tape:
                tape.watch(x)
                outputs = norm(x)
            return [outputs, *tape.gradient(outputs, [x, *norm.trainable_variables],
                                            tf.cast(upstream, outputs.dtype))]

        results.append([tf.cast(t, tf.float32).numpy()
                        for t in outputs_and_gradients(x, upstream)])
    for mine, theirs in zip(*results):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=atol * np.abs(theirs).max())


@pytest.mark.parametrize("in_xla", [False, True])
def test_narrow_rounds_to_bfloat16_as_tensorflows_cast(in_xla):
    # Every kind of float32: random bit patterns, then zeros, infinities, the largest
    # finite values (which round to infinity), NaNs whose carry would reach the sign or
    # exponent, subnormals and ties on either side of an even last kept bit.
    special = [0, 0x80000000, 0x7F800000, 0xFF800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800001,
               0x7FFFFFFF, 0xFFFFFFFF, 0x7FC00000, 0x00008000, 0x00018000, 0x00000001,
               0x3F808000, 0x3F818000, 0x3F807FFF, 0x7F7F8000, 0x7F7F7FFF]
    bits = np.concatenate([np.random.default_rng(0).integers(0, 2 ** 32, 200_000),
                           special]).astype(np.uint32)
    x = tf.bitcast(tf.constant(bits), tf.float32)
    rounded = (tf.function(narrow, jit_compile=True) if in_xla else narrow)(x, tf.bfloat16)
    assert rounded.dtype == tf.bfloat16
    theirs = tf.cast(x, tf.bfloat16)
    nan = np.isnan(x.numpy())
    assert nan.sum() > 500
    np.testing.assert_array_equal(tf.bitcast(rounded, tf.uint16).numpy()[~nan],
                                  tf.bitcast(theirs, tf.uint16).numpy()[~nan])
    assert np.isnan(tf.cast(rounded, tf.float32).numpy()[nan]).all()
    np.testing.assert_array_equal(tf.bitcast(narrow(x, tf.float32), tf.uint32), bits)


TRAINING_DROPOUTS = [FusedDropout, SixteenBitDropout]


@pytest.mark.parametrize("dropout_class", TRAINING_DROPOUTS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_training_dropouts_drop_at_the_rate_scale_the_rest_and_their_gradients_follow(
        dtype, dropout_class):
    rate = 0.3
    layer = dropout_class(rate, seed=7, dtype=dtype)
    x = tf.cast(tf.random.stateless_uniform([64, 128, 128], [1, 2], 1.0, 2.0), dtype)
    with tf.GradientTape() as tape:
        tape.watch(x)
        outputs = layer(x, training=True)
    gradient = tf.cast(tape.gradient(outputs, x, tf.ones_like(x)), tf.float32)
    outputs, wide = tf.cast(outputs, tf.float32), tf.cast(x, tf.float32)
    kept = (outputs != 0).numpy()
    # 1 M draws: the dropped share is within 5 standard deviations (0.0023) of the rate.
    assert abs((1 - kept.mean()) - rate) < 0.0023
    # Kept values scaled by 1 / (1 - rate), to the dtype's rounding: in bfloat16 half a
    # step (2^-8) and, as Keras's dropout does it, the scale rounded first (0.08% off).
    np.testing.assert_allclose(outputs.numpy()[kept], wide.numpy()[kept] / (1 - rate),
                               rtol=1e-6 if dtype == "float32" else 5e-3)
    np.testing.assert_array_equal(gradient.numpy() != 0, kept)
    np.testing.assert_allclose(gradient.numpy()[kept], 1 / (1 - rate), rtol=1e-2)
    # Each call draws anew; the same seed state draws the same mask; inference is identity.
    assert not np.array_equal(kept, (tf.cast(layer(x, training=True), tf.float32) != 0))
    again = dropout_class(rate, seed=7, dtype=dtype)
    np.testing.assert_array_equal(tf.cast(again(x, training=True), tf.float32) != 0, kept)
    np.testing.assert_array_equal(layer(x, training=False), x)
    # Dropping everything is Keras's (a threshold of 2^bits fits no type of that width).
    np.testing.assert_array_equal(dropout_class(1.0, dtype=dtype)(x, training=True), 0 * x)


@pytest.mark.parametrize("dropout_class", TRAINING_DROPOUTS)
def test_training_dropouts_decide_each_value_by_its_own_bits_of_the_generators_words(
        dropout_class):
    """Each value is kept where its own 32 or 16 bits, the next of the generator's 64-bit
    words, are at least round(rate x 2^bits): `SixteenBitDropout` drops with probability
    6,554 / 65,536 at a rate of 0.1, by half the random bits."""
    bits = 32 if dropout_class is FusedDropout else 16
    assert drop_threshold(1 - 2 ** -(bits + 2), bits) is None  # rounds to 2^bits
    layer = dropout_class(0.1, seed=11)
    seed = layer.seed_generator.state.numpy()
    x = tf.ones([3, 5, 7])  # 105 values: not a whole number of 64-bit words
    kept = layer(x, training=True).numpy() != 0
    if dropout_class is FusedDropout:  # XLA's ThreeFry, with int32 seeds
        alg, seed = "threefry", np.mod(seed, 2 ** 31 - 1).astype(np.int32)
    else:  # TensorFlow's generator, as Keras's dropout
        alg = "auto_select"
    words = tf.function(lambda: tf.random.stateless_uniform(
        [-(-105 * bits // 64)], seed, minval=None, maxval=None, dtype=tf.uint64, alg=alg),
        jit_compile=alg == "threefry")()
    values = np.frombuffer(words.numpy().tobytes(), f"uint{bits}")[:105]
    np.testing.assert_array_equal(kept, (values >= round(0.1 * 2 ** bits)).reshape(x.shape))


def test_fused_dropout_draws_the_mask_of_a_static_shape_without_waiting_for_the_input():
    layer = FusedDropout(0.1, seed=3)
    drop = tf.function(lambda x: layer(x, training=True))

    def mask_waits_for_input(input_shape):
        graph = drop.get_concrete_function(tf.TensorSpec(input_shape, tf.float32)).graph
        masks = [op for op in graph.get_operations()
                 if op.type in ("PartitionedCall", "StatefulPartitionedCall")
                 and "dropout_mask" in op.get_attr("f").name]
        assert len(masks) == 1
        ancestors, pending = set(), list(masks[0].inputs)
        while pending:
            op = pending.pop().op
            if op not in ancestors:
                ancestors.add(op)
                pending.extend(op.inputs)
        return graph.inputs[0].op in ancestors

    # Pretraining's fixed batches: the mask can be drawn before the input exists.
    assert not mask_waits_for_input([4, 8])
    assert mask_waits_for_input([None, 8])  # the shape read from the input


def test_encoder_with_fused_gelu_is_the_same_function_on_the_same_weights():
    cfg = ElectraConfig.preset("tiny", vocab_size=100)
    plain = ElectraEncoder.from_electra_config(cfg)
    fused = ElectraEncoder.from_electra_config(cfg, activation="electra_tf>fused_gelu")
    inputs = encoder_inputs()
    plain(inputs)
    fused(inputs)
    fused.set_weights(plain.get_weights())
    np.testing.assert_allclose(fused(inputs)["sequence_output"],
                               plain(inputs)["sequence_output"], rtol=1e-5, atol=1e-5)
    assert ElectraEncoder.from_config(fused.get_config()).activation == "electra_tf>fused_gelu"


def test_encoder_round_trips_its_config():
    encoder = ElectraEncoder.from_electra_config(ElectraConfig.preset("tiny", vocab_size=100))
    expected = dict(name="discriminator", hidden_size=64, num_layers=2, num_heads=2,
                    intermediate_size=128, dropout=0.1, initializer_range=0.02,
                    layer_norm_epsilon=1e-12, activation="electra_tf>gelu")
    clone = ElectraEncoder.from_config(encoder.get_config())
    for model in (encoder, clone):
        config = model.get_config()
        assert {k: config[k] for k in expected} == expected
        assert config["embeddings"]["config"]["embedding_size"] == 32
        assert config["embeddings"]["config"]["vocab_size"] == 100
    assert clone(encoder_inputs())["sequence_output"].shape == (2, 12, 64)


def test_flat_projections_and_query_first_additive_attention_match_keras_values_and_gradients(
        monkeypatch):
    cfg = ElectraConfig.preset("tiny", vocab_size=100)
    # Every layer called in a training step's own graph, not one traced layer
    # (`layer_stack`), so its ops can be counted.
    monkeypatch.setattr(layer_stack, "_all_alike", lambda layers: False)
    keras.utils.set_random_seed(0)
    inputs = encoder_inputs()
    ours, theirs = (ElectraEncoder.from_electra_config(cfg) for _ in range(2))
    ours(inputs)
    theirs(inputs)
    theirs.set_weights(ours.get_weights())
    for layer in theirs.transformer_layers:  # back to Keras's own attention
        self_attention(layer).__class__ = keras.layers.MultiHeadAttention
        for projection in attention_projections(layer):
            projection.__class__ = keras.layers.EinsumDense
        for dense in feedforward_layers(layer):
            dense.__class__ = keras.layers.Dense

    # A random projection of the outputs: the sum of their squares, after the last layer
    # norm, barely depends on the weights below it, and its gradients there are rounding
    # noise (~1e-5).
    probe = tf.random.stateless_normal(
        inputs["input_word_ids"].shape + (cfg.hidden_size,), [0, 1])

    def traced(encoder, training=False):
        @tf.function
        def loss_and_gradients():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(encoder(inputs, training=training)["sequence_output"]
                                     * probe)
            return loss, tape.gradient(loss, encoder.trainable_variables)

        operations = loss_and_gradients.get_concrete_function().graph.get_operations()
        # A 3-D input times a 2-D kernel: the broadcasting matmul the flat projections avoid.
        broadcast = [op for op in operations if op.type == "BatchMatMulV2"
                     and any(t.shape.rank == 2 for t in op.inputs)]
        # Scores multiplied key first come out [batch, heads, key, query] and are swapped.
        swapped = [op for op in operations if op.type == "Transpose"
                   and (perm := tf.get_static_value(op.inputs[1])) is not None
                   and list(perm) == [0, 1, 3, 2]]
        # Float transposes run as oneDNN's (`swap_positions_and_heads` explains).
        float_transposes = [op for op in operations if op.type == "Transpose"
                            and op.inputs[0].dtype.is_floating]
        # A training step's input gradient reading a wide float32 kernel transposed, as
        # oneDNN runs slowly (`flat_dense.matmul` explains).
        wide_transposed = [op for op in operations if op.type == "MatMul"
                           and op.get_attr("transpose_b")
                           and op.inputs[1].shape[1] >= op.inputs[1].shape[0]]
        # Keras's `Dense` on a 3-D input: `tf.tensordot`, ~20 shape ops per matmul.
        tensordot = [op for op in operations if "Tensordot" in op.name]
        # The query scaling over [batch, seq, heads, size] values, forward or backward;
        # the query projection folds it into its weights where gradients are wanted.
        query_shaped = [op for op in operations if op.type == "Mul"
                        and op.outputs[0].shape == (2, 12, cfg.num_heads, 32)]
        # Keras's masked softmax selects over the [batch, heads, query, key] scores, and
        # again in the gradient; the additive mask selects only over [batch, 1, 1, key].
        selects = [op for op in operations if op.type == "SelectV2"
                   and op.outputs[0].shape.rank == 4 and op.outputs[0].shape[1] != 1]
        return (loss_and_gradients(), len(broadcast), len(swapped), len(tensordot),
                len(selects), len(float_transposes), len(query_shaped), len(wide_transposed))

    ((loss, gradients), broadcast, swapped, tensordot, selects, float_transposes,
     query_shaped, _) = traced(ours)
    ((keras_loss, keras_gradients), keras_broadcast, keras_swapped, keras_tensordot,
     keras_selects, keras_float_transposes, keras_query_shaped, _) = traced(theirs)
    assert traced(ours, training=True)[-1] == 0 and traced(theirs, training=True)[-1] > 0
    assert float_transposes == 0 and keras_float_transposes > 0
    assert selects == 0 and keras_selects > 0
    assert broadcast == 0 and keras_broadcast > 0
    assert tensordot == 0 and keras_tensordot > 0
    assert swapped == 0 and keras_swapped > 0
    assert query_shaped == 0 and keras_query_shaped > 0
    np.testing.assert_allclose(loss, keras_loss, rtol=1e-5)
    for mine, keras_gradient in zip(gradients, keras_gradients):
        keras_gradient = tf.convert_to_tensor(keras_gradient).numpy()
        # Float32 rounding of a gradient's terms, not of itself: an element of a few tenths
        # among hundreds differed by 4e-5 (one run in ten).
        np.testing.assert_allclose(tf.convert_to_tensor(mine), keras_gradient, rtol=1e-4,
                                   atol=1e-5 * max(1.0, np.abs(keras_gradient).max()))


def recorded_layer_calls(monkeypatch, encoder) -> list:
    """A list that gets the layer at each call of `encoder`'s transformer layers from now
    on (inside a traced function: one per layer traced)."""
    layer_class = type(encoder.transformer_layers[0])
    calls = []
    monkeypatch.setattr(layer_class, "call", lambda self, *args, _call=layer_class.call,
                        **kwargs: calls.append(self) or _call(self, *args, **kwargs))
    return calls


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_training_step_traces_one_transformer_layer_and_computes_the_same(policy, monkeypatch):
    cfg = ElectraConfig.preset("tiny", vocab_size=100, num_layers=3)
    inputs = encoder_inputs()
    encoder = ElectraEncoder.from_electra_config(cfg, dtype=policy)
    encoder(inputs)
    seed_variables = encoder.non_trainable_variables  # the dropouts' seed states
    seeds = [v.numpy() for v in seed_variables]
    weights = tf.constant(np.random.default_rng(1).normal(size=(2, 12, 64)), tf.float32)
    traced_calls = recorded_layer_calls(monkeypatch, encoder)

    def training_step():
        for variable, value in zip(seed_variables, seeds):
            variable.assign(value)
        traced_calls.clear()

        @tf.function
        def loss_and_gradients():
            with tf.GradientTape() as tape:
                outputs = encoder(inputs, training=True)["encoder_outputs"]
                loss = sum(tf.reduce_sum(tf.cast(x, tf.float32) * weights) for x in outputs)
            return loss, tape.gradient(loss, encoder.trainable_variables)

        loss, gradients = loss_and_gradients()
        return loss, gradients, len(traced_calls), [v.numpy() for v in seed_variables]

    loss, gradients, calls, advanced_seeds = training_step()
    encoder.transformer_layers[0].trainable = False  # layers no longer alike: one by one
    assert training_step()[2] == cfg.num_layers
    encoder.transformer_layers[0].trainable = True
    monkeypatch.setattr(layer_stack, "_all_alike", lambda layers: False)  # layer by layer
    plain_loss, plain_gradients, plain_calls, plain_advanced_seeds = training_step()
    assert (calls, plain_calls) == (1, cfg.num_layers)
    np.testing.assert_allclose(loss, plain_loss, rtol=1e-6)  # the same dropout masks too
    # Equal to rounding, the gradients' sums adding up in another order: in float32 each
    # to its own scale; in bfloat16 (units of up to 2^-7) to the scale of the largest,
    # which is that of the rounding in the backward pass.
    plain_gradients = [tf.convert_to_tensor(g).numpy() for g in plain_gradients]
    largest = max(np.abs(g).max() for g in plain_gradients)
    for mine, plain in zip(gradients, plain_gradients):
        if policy == "float32":
            rtol, atol = 1e-5, 1e-5 * np.abs(plain).max()
        else:
            rtol, atol = 2.0 ** -7, 2.0 ** -7 * largest
        np.testing.assert_allclose(tf.convert_to_tensor(mine), plain, rtol=rtol, atol=atol)
    for mine, plain, before in zip(advanced_seeds, plain_advanced_seeds, seeds):
        np.testing.assert_array_equal(mine, plain)
        assert not np.array_equal(mine, before)


def inference_function(encoder):
    """`encoder`'s sequence output traced for any batch and length."""
    spec = tf.TensorSpec([None, None], tf.int32)
    return tf.function(
        lambda ids, mask, types: encoder({"input_word_ids": ids, "input_mask": mask,
                                          "input_type_ids": types})["sequence_output"]
    ).get_concrete_function(spec, spec, spec)


def test_inference_traces_one_transformer_layer_unless_exporting(monkeypatch):
    """`predict`'s and `evaluate`'s functions trace one layer, with the outputs of the
    layers called one by one; exports call each layer (`inference_layer_by_layer`)."""
    cfg = ElectraConfig.preset("tiny", vocab_size=100, num_layers=3)
    inputs = encoder_inputs()
    encoder = perturbed_encoder(cfg, inputs)
    traced_calls = recorded_layer_calls(monkeypatch, encoder)

    def inference():
        traced_calls.clear()
        function = tf.function(lambda x: encoder(x, training=False)["encoder_outputs"])
        return [output.numpy() for output in function(inputs)], len(traced_calls)

    outputs, calls = inference()
    with layer_stack.inference_layer_by_layer():
        flat_outputs, flat_calls = inference()
    assert (calls, flat_calls) == (1, cfg.num_layers)
    for mine, flat in zip(outputs, flat_outputs):
        np.testing.assert_array_equal(mine, flat)


def frozen_encoder_session(encoder, requests):
    """Runs `encoder` as TF Serving runs an export (traced for any batch and length under
    `forms_per_call` and `inference_only`, weights frozen, in a TF1 session with
    Grappler): [(sequence output, Counter of the executed op kinds)] for each of
    `requests`."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    with export_tracing(), inference_only():
        frozen = convert_variables_to_constants_v2(inference_function(encoder))
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(frozen.graph.as_graph_def(), name="")
    answers = []
    with tf.compat.v1.Session(graph=graph) as session:
        for inputs in requests:
            feeds = dict(zip((t.name for t in frozen.inputs), inputs.values()))
            metadata = tf.compat.v1.RunMetadata()
            outputs = session.run(frozen.outputs[0].name, feeds, run_metadata=metadata,
                                  options=tf.compat.v1.RunOptions(
                                      trace_level=tf.compat.v1.RunOptions.FULL_TRACE))
            executed = collections.Counter(
                node.timeline_label.split(" = ")[1].split("(")[0]
                for device in metadata.step_stats.dev_stats for node in device.node_stats
                if " = " in node.timeline_label)
            answers.append((outputs, executed))
    return answers


def perturbed_encoder(config, inputs):
    encoder = ElectraEncoder.from_electra_config(config)
    encoder(inputs)
    rng = np.random.default_rng(0)  # nonzero biases: a zero bias is folded away
    encoder.set_weights([w + rng.normal(0, 0.02, w.shape).astype(w.dtype)
                         for w in encoder.get_weights()])
    return encoder


def test_inference_only_traces_the_encoder_without_custom_gradients_same_outputs(
        monkeypatch):
    """Same outputs to float32 rounding: the layer norms normalize in another order."""
    monkeypatch.setattr(layer_stack, "_all_alike", lambda layers: False)  # ops in one graph
    inputs = encoder_inputs()
    encoder = perturbed_encoder(ElectraConfig.preset("tiny", vocab_size=100), inputs)

    def traced():
        function = tf.function(lambda x: encoder(x, training=False)["sequence_output"])
        graph = function.get_concrete_function(
            {k: tf.TensorSpec([None, None], tf.int32) for k in inputs}).graph
        custom = [op for op in graph.get_operations() if "_gradient_op_type" in op.node_def.attr]
        return function(inputs).numpy(), len(custom)

    outputs, custom = traced()
    with inference_only():
        inference_outputs, inference_custom = traced()
    # Two layers: two normalizations and four head swaps each, plus the embeddings' one.
    assert custom == 13 and inference_custom == 0
    np.testing.assert_allclose(inference_outputs, outputs, rtol=1e-5, atol=1e-5)
    with tf.GradientTape() as tape:  # outside, the hand-written gradients still serve
        loss = tf.reduce_sum(encoder(inputs, training=True)["sequence_output"])
    assert all(g is not None for g in tape.gradient(loss, encoder.trainable_variables))


def test_inference_graph_fuses_the_feedforward_gelu_into_its_matmul():
    """The GELU applied to the flat product lets oneDNN's fused matmul compute it: no `Erf`
    runs; applied after the reshape back to 3-D, one `Erf` per layer ran. Where TensorFlow
    runs Eigen's kernels (AVX2-only CPUs), its fused matmul takes the bias only."""
    inputs = encoder_inputs()
    encoder = perturbed_encoder(ElectraConfig.preset("tiny", vocab_size=100), inputs)
    [(outputs, executed)] = frozen_encoder_session(encoder, [inputs])
    assert any("FusedMatMul" in kind for kind in executed)
    if onednn_enabled():
        assert "Erf" not in executed
    np.testing.assert_allclose(outputs, encoder(inputs)["sequence_output"], atol=1e-5)


def matmuls(executed, fused):
    """The products, fused with what follows them or not, among `executed` op kinds."""
    return sum(n for kind, n in executed.items()
               if kind.endswith("MatMul") and ("Fused" in kind) == fused)


def sequence_output_gradients(encoder):
    """A `tf.function` of the inputs: the gradients of `encoder`'s summed sequence output
    in training."""
    @tf.function
    def gradients(inputs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(encoder(inputs, training=True)["sequence_output"])
        return tape.gradient(loss, encoder.trainable_variables)

    return gradients


def test_inference_splits_the_large_products_of_short_requests_only(monkeypatch):
    """Outside training, products of at most `SPLIT_MAX_ROWS` rows with a kernel of at
    least `SPLIT_MIN_KERNEL_SIZE` values run as two half-products (`split_matmul`), those
    with an activation (the feed-forward's GELU) of at most `SPLIT_MAX_ROWS_ACTIVATED`;
    an export's graph picks the form per request; other graphs for unknown rows and
    training steps never split."""
    # The feed-forward layer in halves, where TensorFlow would compute it on one thread:
    # its own test.
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 0)
    config = ElectraConfig.preset("tiny", vocab_size=100, hidden_size=256, num_heads=4,
                                  intermediate_size=512, num_layers=1)
    # The 4 attention products and the 2 feed-forward ones are large enough; the
    # embeddings' projection (32 x 256) is not.
    split_products = 6
    short = encoder_inputs()  # 24 rows
    middle = encoder_inputs(batch=2, seq=50, lengths=(50, 20))  # 100 rows
    long = encoder_inputs(batch=6, seq=50, lengths=(50, 20, 9, 50, 33, 1))  # 300 rows
    assert 2 * 12 <= flat_dense.SPLIT_MAX_ROWS_ACTIVATED < 2 * 50
    assert 2 * 50 <= flat_dense.SPLIT_MAX_ROWS < 6 * 50
    encoder = perturbed_encoder(config, short)
    (short_outputs, short_ops), (middle_outputs, middle_ops), (long_outputs, long_ops) = (
        frozen_encoder_session(encoder, [short, middle, long]))

    assert matmuls(short_ops, fused=False) == 2 * split_products
    assert matmuls(short_ops, fused=True) == 1  # the embeddings' projection
    # The feed-forward's first product, with its GELU, unsplit from 33 rows.
    assert matmuls(middle_ops, fused=False) == 2 * (split_products - 1)
    assert matmuls(middle_ops, fused=True) == 2
    assert matmuls(long_ops, fused=False) == 0
    assert matmuls(long_ops, fused=True) == split_products + 1
    for inputs, outputs in ((short, short_outputs), (middle, middle_outputs),
                            (long, long_outputs)):
        # Eager, with the rows known: the same form, chosen in Python.
        np.testing.assert_allclose(outputs, encoder(inputs)["sequence_output"], atol=1e-5)

    monkeypatch.setattr(layer_stack, "_all_alike", lambda layers: False)  # ops in one graph

    training_step = sequence_output_gradients(encoder)

    def kinds(function):
        return collections.Counter(op.type for op in function.graph.get_operations())

    with forms_per_call():
        step = kinds(training_step.get_concrete_function(
            {name: tf.TensorSpec([None, None], tf.int32) for name in short}))
    assert not step["If"] and not step["StatelessIf"]
    # Forward, input and kernel gradients, and where oneDNN multiplies the bias gradients
    # (`flat_dense.bias_gradient`).
    products = 4 if products_run_on_onednn() else 3
    assert step["MatMul"] == products * (split_products + 1)
    plain = kinds(inference_function(encoder))  # outside `forms_per_call`
    assert not plain["If"] and not plain["StatelessIf"]
    assert plain["MatMul"] == split_products + 1


def test_inference_runs_the_feedforward_layer_in_halves_where_its_products_take_one_thread(
        monkeypatch):
    """Outside training, a float32 feed-forward layer of more than
    `SPLIT_MAX_ROWS_ACTIVATED` rows and at most `feedforward_halves_max_rows` (those whose
    products TensorFlow would compute on one thread) runs as two chains of half products
    (`feedforward_in_halves`); an export picks per request, the eager encoder in Python,
    both with the outputs of the layers in turn. Training steps never take the halves."""
    config = ElectraConfig.preset("tiny", vocab_size=100, hidden_size=256, num_heads=4,
                                  intermediate_size=512, num_layers=1)
    short = encoder_inputs()  # 24 rows
    middle = encoder_inputs(batch=2, seq=50, lengths=(50, 20))  # 100 rows
    long = encoder_inputs(batch=6, seq=50, lengths=(50, 20, 9, 50, 33, 1))  # 300 rows
    encoder = perturbed_encoder(config, short)
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 0)
    in_turn = [encoder(inputs)["sequence_output"] for inputs in (short, middle, long)]
    # Its products take 4 x (rows x 512 + 256 x (rows + 512)) bytes: on one thread up to
    # 19 rows (no halves), then up to 255 (halves up to SPLIT_MAX_ROWS = 256), then 767.
    for one_thread_rows, halves_rows in ((19, 19), (255, 256), (767, 767)):
        monkeypatch.setattr(flat_dense, "one_thread_product_bytes",
                            lambda rows=one_thread_rows: 4 * (768 * (rows + 1) + 131072))
        assert flat_dense.feedforward_halves_max_rows(256, 512) == halves_rows
    assert flat_dense.SPLIT_MAX_ROWS == 256
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 4 * 640 * 512)
    assert 2 * 12 <= flat_dense.SPLIT_MAX_ROWS_ACTIVATED < 2 * 50
    executed = frozen_encoder_session(encoder, [short, middle, long])

    (short_outputs, short_ops), (middle_outputs, middle_ops), (long_outputs, long_ops) = (
        executed)
    # 24 rows: every product split in two, the embeddings' projection (32 x 256) fused.
    assert (matmuls(short_ops, False), matmuls(short_ops, True)) == (12, 1)
    # 100 rows: the 4 projections split; each half of the feed-forward layer's first
    # kernel fused with its bias and GELU, each half of the second a product of its own.
    assert (matmuls(middle_ops, False), matmuls(middle_ops, True)) == (10, 3)
    assert middle_ops["Split"] >= 2
    # 300 rows: the feed-forward layer in turn; the 4 projections, on one thread up to 511
    # rows here, split (`split_max_rows`: its own test).
    assert (matmuls(long_ops, False), matmuls(long_ops, True)) == (8, 3)
    for inputs, outputs, expected in zip((short, middle, long), (
            short_outputs, middle_outputs, long_outputs), in_turn):
        np.testing.assert_allclose(outputs, expected, atol=1e-5)
        np.testing.assert_allclose(encoder(inputs)["sequence_output"], expected, atol=1e-5)

    monkeypatch.setattr(layer_stack, "_all_alike", lambda layers: False)  # ops in one graph
    step = sequence_output_gradients(encoder).get_concrete_function(middle).graph
    # Unsplit: forward, input and kernel gradients, and where oneDNN multiplies the bias
    # gradients.
    products = 4 if products_run_on_onednn() else 3
    assert collections.Counter(op.type for op in step.get_operations())["MatMul"] == products * 7


def test_inference_splits_products_without_activation_up_to_the_rows_on_one_thread(
        monkeypatch):
    """Outside training, a float32 product with no activation splits up to
    `SPLIT_MAX_ROWS` rows, or up to the rows TensorFlow computes it on one thread where
    more (`split_max_rows`): an export's attention projections split per request up to
    there, with the eager encoder's outputs."""
    config = ElectraConfig.preset("tiny", vocab_size=100, hidden_size=256, num_heads=4,
                                  intermediate_size=512, num_layers=1)
    # 4 x (rows x 512 + 256 x 256) bytes: the projections on one thread up to 511 rows;
    # the feed-forward products ([rows, 256] x [256, 512]) up to 255, in halves up to 256.
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 4 * 640 * 512)
    kernel = tf.zeros([256, 256])
    assert flat_dense.split_max_rows(kernel) == 511
    assert flat_dense.split_max_rows(tf.cast(kernel, tf.bfloat16)) == flat_dense.SPLIT_MAX_ROWS
    # On one thread up to 255 rows: fewer than SPLIT_MAX_ROWS.
    assert flat_dense.split_max_rows(tf.zeros([512, 256])) == flat_dense.SPLIT_MAX_ROWS
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 0)
    assert flat_dense.split_max_rows(kernel) == flat_dense.SPLIT_MAX_ROWS == 256
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 4 * 640 * 512)
    middle = encoder_inputs(batch=6, seq=80, lengths=(80, 20, 9, 80, 33, 1))  # 480 rows
    long = encoder_inputs(batch=8, seq=80, lengths=(80, 20, 9, 80, 33, 1, 80, 2))  # 640
    encoder = perturbed_encoder(config, middle)
    (middle_outputs, middle_ops), (long_outputs, long_ops) = frozen_encoder_session(
        encoder, [middle, long])
    # The embeddings' projection and the feed-forward layer's two products, fused, at
    # either size; the 4 projections split in two at 480 rows, whole at 640.
    assert (matmuls(middle_ops, False), matmuls(middle_ops, True)) == (8, 3)
    assert (matmuls(long_ops, False), matmuls(long_ops, True)) == (0, 7)
    for inputs, outputs in ((middle, middle_outputs), (long, long_outputs)):
        np.testing.assert_allclose(outputs, encoder(inputs)["sequence_output"], atol=1e-5)


def test_products_run_on_one_thread_below_the_l2_caches_size_where_onednn_multiplies():
    """`one_thread_product_bytes`: a core's L2 cache, as glibc's `getconf` reads it, times
    TensorFlow's 1.01, where oneDNN multiplies on the CPU; 0 where Eigen does or an
    accelerator."""
    if not onednn_enabled() or accelerator_visible():
        assert one_thread_product_bytes() == 0
        return
    getconf = subprocess.run(["getconf", "LEVEL2_CACHE_SIZE"], capture_output=True,
                             text=True, check=True)
    assert one_thread_product_bytes() == int(int(getconf.stdout) * 1.01) > 0


_SAVED_ENCODER_SESSION = """
import collections, json, sys
import tensorflow as tf
from electra_tf.tf_runtime import bfloat16_products_accumulate_in_float32
answers = []
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], sys.argv[1])
    signature = meta.signature_def["serving_default"]
    for request in json.load(open(sys.argv[2])):
        metadata = tf.compat.v1.RunMetadata()
        outputs = session.run(
            signature.outputs["output_0"].name,
            {signature.inputs[name].name: value for name, value in request.items()},
            options=tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE),
            run_metadata=metadata)
        executed = collections.Counter(
            node.timeline_label.split(" = ")[1].split("(")[0]
            for device in metadata.step_stats.dev_stats for node in device.node_stats
            if " = " in node.timeline_label)
        answers.append({"outputs": outputs.tolist(), "executed": executed})
print(json.dumps({"onednn": bfloat16_products_accumulate_in_float32(), "answers": answers}))
"""


def saved_encoder_sessions(encoder, requests, path, environments):
    """Saves `encoder` as an export does (traced for any batch and length with
    `export_tracing`, `inference_only` and a `OneDnnTrialAtLoad`), then runs it as TF
    Serving does (the TF1 session loader with Grappler) in a fresh process for each of
    `environments` (variables to set): [(whether oneDNN multiplied bfloat16 there, [(the
    sequence output, Counter of the executed op kinds)] for each of `requests`)]."""
    module = tf.Module()
    module.encoder_variables = [v.value for v in encoder.variables]
    module.trial = OneDnnTrialAtLoad()
    spec = tf.TensorSpec([None, None], tf.int32)
    function = tf.function(
        lambda ids, mask, types: encoder({"input_word_ids": ids, "input_mask": mask,
                                          "input_type_ids": types})["sequence_output"],
        input_signature=[spec] * 3)
    with export_tracing(), inference_only(), onednn_trial_at_load(module.trial):
        tf.saved_model.save(module, str(path / "saved"), signatures=function)
    with open(path / "requests.json", "w") as f:
        json.dump([{"ids": r["input_word_ids"].tolist(), "mask": r["input_mask"].tolist(),
                    "types": r["input_type_ids"].tolist()} for r in requests], f)
    runs = []
    for environment in environments:
        result = json.loads(run_command(
            "python", "-c", _SAVED_ENCODER_SESSION, str(path / "saved"),
            str(path / "requests.json"), env=environment).stdout.strip().splitlines()[-1])
        runs.append((result["onednn"], [(np.array(a["outputs"]), collections.Counter(
            a["executed"])) for a in result["answers"]]))
    return runs


def test_an_exports_layer_norms_of_many_rows_run_on_onednns_kernel_where_it_multiplies(
        tmp_path):
    """An export's layer norms of at least `ONEDNN_LAYER_NORM_MIN_ROWS` rows run as
    `onednn_layer_normalization`, which Grappler makes one `_MklLayerNorm`, where the
    trial the SavedModel runs as it loads (`OneDnnTrialAtLoad`) finds oneDNN multiplying;
    fewer rows, and every request where oneDNN is off, as `normalize_centered`. Outputs as
    the eager encoder's, in both processes."""
    config = ElectraConfig.preset("tiny", vocab_size=100, num_layers=1)
    short = encoder_inputs()  # 24 rows
    long = encoder_inputs(batch=8, seq=50, lengths=(50, 20, 9, 50, 33, 1, 50, 2))  # 400
    assert 24 < ONEDNN_LAYER_NORM_MIN_ROWS <= 400
    encoder = perturbed_encoder(config, short)
    default, onednn_off = saved_encoder_sessions(
        encoder, [short, long], tmp_path, [{}, {"TF_ENABLE_ONEDNN_OPTS": "0"}])
    norms = 3  # the embeddings' and the layer's two
    for onednn, answers in (default, onednn_off):
        (short_outputs, short_ops), (long_outputs, long_ops) = answers
        assert (short_ops["_MklLayerNorm"], short_ops["Square"]) == (0, norms)
        if onednn:
            assert (long_ops["_MklLayerNorm"], long_ops["Square"]) == (norms, 0)
        else:
            assert (long_ops["_MklLayerNorm"], long_ops["Square"]) == (0, norms)
            assert not long_ops["FusedBatchNormV3"]
        for inputs, outputs in ((short, short_outputs), (long, long_outputs)):
            np.testing.assert_allclose(outputs, encoder(inputs)["sequence_output"],
                                       atol=1e-5)
    assert not onednn_off[0]
    assert default[0] == bfloat16_products_accumulate_in_float32()
    # Loaded in Python too: the trial runs as `tf.saved_model.load` restores the model.
    loaded = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    np.testing.assert_allclose(
        loaded(ids=long["input_word_ids"], mask=long["input_mask"],
               types=long["input_type_ids"])["output_0"],
        encoder(long)["sequence_output"], atol=1e-5)


def test_an_exports_products_split_up_to_the_one_thread_rows_only_where_onednn_multiplies(
        monkeypatch, tmp_path):
    """An export's products with no activation split up to the rows oneDNN computes on one
    thread on the CPU that traced it (`split_max_rows`) where the trial the SavedModel
    runs as it loads finds oneDNN multiplying, else up to `SPLIT_MAX_ROWS`, whatever runs
    the tracing process."""
    # oneDNN on one thread up to 511 rows of the attention projections, none in this
    # process (the feed-forward layer in turn, and no limit of this process's own).
    monkeypatch.setattr(flat_dense, "onednn_one_thread_bytes", lambda: 4 * 640 * 512)
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 0)
    kernel = tf.zeros([256, 256])
    assert int(flat_dense.split_max_rows(kernel, tf.constant(True))) == 511
    assert int(flat_dense.split_max_rows(kernel, tf.constant(False))) == 256
    assert flat_dense.split_max_rows(kernel) == flat_dense.SPLIT_MAX_ROWS == 256
    config = ElectraConfig.preset("tiny", vocab_size=100, hidden_size=256, num_heads=4,
                                  intermediate_size=512, num_layers=1)
    middle = encoder_inputs(batch=6, seq=80, lengths=(80, 20, 9, 80, 33, 1))  # 480 rows
    encoder = perturbed_encoder(config, middle)
    default, onednn_off = saved_encoder_sessions(
        encoder, [middle], tmp_path, [{}, {"TF_ENABLE_ONEDNN_OPTS": "0"}])
    for onednn, ((outputs, executed),) in (default, onednn_off):
        # The embeddings' projection and the feed-forward layer's two products fused; the
        # 4 projections split in two where oneDNN multiplies, else fused whole.
        expected = (8, 3) if onednn else (0, 7)
        assert (matmuls(executed, False), matmuls(executed, True)) == expected
        np.testing.assert_allclose(outputs, encoder(middle)["sequence_output"], atol=1e-5)
    assert not onednn_off[0]


def test_an_exports_attention_of_few_scores_runs_on_tensorflows_own_kernels():
    """An export's attention picks its kernels per request: of at most
    `SMALL_ATTENTION_MAX_SCORES` scores per head, `small_attention` (`BatchMatMulV3`, the
    softmax written out), else TensorFlow's `BatchMatMulV2` and softmax (oneDNN's where
    it is on); both give the outputs of the eager encoder."""
    config = ElectraConfig.preset("tiny", vocab_size=100, num_layers=1)
    short = encoder_inputs()  # 2 x 12 x 12 scores per head, one text padded
    long = encoder_inputs(batch=6, seq=50, lengths=(50, 20, 9, 50, 33, 1))  # 6 x 50 x 50
    assert 2 * 12 * 12 <= SMALL_ATTENTION_MAX_SCORES < 6 * 50 * 50
    encoder = perturbed_encoder(config, short)
    (short_outputs, short_ops), (long_outputs, long_ops) = frozen_encoder_session(
        encoder, [short, long])

    def kinds(executed, part):
        return {kind: n for kind, n in executed.items() if part in kind}

    assert kinds(short_ops, "BatchMatMul") == {"BatchMatMulV3": 2}
    assert not kinds(short_ops, "Softmax")
    assert sum(kinds(long_ops, "BatchMatMulV2").values()) == 2
    assert not kinds(long_ops, "BatchMatMulV3") and kinds(long_ops, "Softmax")
    for inputs, outputs in ((short, short_outputs), (long, long_outputs)):
        np.testing.assert_allclose(outputs, encoder(inputs)["sequence_output"], atol=1e-5)


def test_an_exports_sizes_are_read_off_the_input_mask_not_off_the_layers(monkeypatch):
    """Each per-request choice of an export's encoder (its split products', its
    attentions' and its feed-forward layers' `tf.cond`s) is a size of the input mask's
    shape (`sequence_batch`): no choice waits for an embedding or a layer's output. Nor
    does any shape the products' outputs take: the one float tensor whose shape is read is
    the word embeddings' (by keras-hub's position embedding). Outputs as the eager
    encoder's."""
    # Products on one thread up to 4 MiB: the feed-forward layers choose their halves too.
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 4 << 20)
    config = ElectraConfig.preset("tiny", vocab_size=100, hidden_size=256, num_heads=4,
                                  intermediate_size=512, num_layers=2)
    inputs = encoder_inputs()
    encoder = perturbed_encoder(config, inputs)
    with export_tracing(), inference_only():
        function = inference_function(encoder)
    mask = function.graph.inputs[1].op

    def ancestors(op, seen):
        for parent in [t.op for t in op.inputs] + list(op.control_inputs):
            if parent not in seen:
                seen.add(parent)
                ancestors(parent, seen)
        return seen

    conds = [op for op in function.graph.get_operations() if op.type.endswith("If")]
    # Per layer: 4 split projections, 1 attention, 1 feed-forward layer (the forms of its
    # products fixed in each of its branches).
    assert len(conds) == 6 * config.num_layers
    for cond in conds:
        read_off = ancestors(cond.inputs[0].op, set())
        assert {op for op in read_off if op.type == "Placeholder"} == {mask}
        assert not [op for op in read_off if op.type not in (
            "Placeholder", "Shape", "StridedSlice", "Const", "Mul", "LessEqual")]
    float_shapes = [op.inputs[0].op for op in function.graph.get_operations()
                    if op.type == "Shape" and op.inputs[0].dtype.is_floating]
    assert [op.type for op in float_shapes] == ["GatherV2"]
    [(outputs, _)] = frozen_encoder_session(encoder, [inputs])
    np.testing.assert_allclose(outputs, encoder(inputs)["sequence_output"], atol=1e-5)


def test_the_pooled_output_alone_runs_the_last_layer_at_the_first_position_only(
        monkeypatch):
    """`pooled_only`: the full call's `[CLS]` vector (eager, traced for any shape as an
    export is, and its training gradients), with the last layer's feed-forward layer
    computing one position per text."""
    # One call of the layer's feed-forward layer per trace: not two forms of it.
    monkeypatch.setattr(flat_dense, "one_thread_product_bytes", lambda: 0)
    config = ElectraConfig.preset("tiny", vocab_size=100, num_layers=3, dropout=0.0)
    inputs = encoder_inputs()
    encoder = perturbed_encoder(config, inputs)
    widths = []
    last_feedforward = feedforward_layers(encoder.transformer_layers[-1])[0]
    monkeypatch.setattr(last_feedforward, "call", lambda x, _call=last_feedforward.call,
                        **kwargs: widths.append(x.shape[1]) or _call(x, **kwargs))
    expected = encoder(inputs)["pooled_output"]

    pooled = encoder(inputs, pooled_only=True)
    assert list(pooled) == ["pooled_output"]
    # To float32 rounding (the weights are drawn unseeded: values up to ~4).
    np.testing.assert_allclose(pooled["pooled_output"], expected, rtol=1e-6, atol=1e-6)
    spec = tf.TensorSpec([None, None], tf.int32)
    with export_tracing(), inference_only():
        function = tf.function(lambda ids, mask, types: encoder(
            {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types},
            pooled_only=True)["pooled_output"]).get_concrete_function(spec, spec, spec)
    np.testing.assert_allclose(function(*inputs.values()), expected, rtol=1e-6, atol=1e-6)

    weights = tf.constant(np.random.default_rng(1).normal(size=expected.shape), tf.float32)

    @tf.function
    def gradients(pooled_only):
        with tf.GradientTape() as tape:
            outputs = encoder(inputs, training=True, pooled_only=pooled_only)
            loss = tf.reduce_sum(outputs["pooled_output"] * weights)
        return tape.gradient(loss, encoder.trainable_variables)

    full_gradients = [tf.convert_to_tensor(g).numpy() for g in gradients(False)]
    # To rounding at the largest gradient's scale: some (the key bias's) are 0 but for it.
    largest = max(np.abs(g).max() for g in full_gradients)
    for mine, full in zip(gradients(True), full_gradients):
        np.testing.assert_allclose(tf.convert_to_tensor(mine), full, rtol=1e-5,
                                   atol=1e-6 * largest)
    assert widths == [12, 1, 1, 1]  # the full call; pooled eager, export, training


@pytest.mark.parametrize("policy, products_form", [
    ("mixed_bfloat16", None), ("mixed_bfloat16", False), ("float32", True),
    ("float32", False)], ids=["bfloat16 as this CPU's products", "bfloat16 from a float32 copy",
                              "float32 where oneDNN multiplies", "float32 on Eigen"])
def test_bias_gradients_are_the_rows_sums_to_the_results_rounding(
        monkeypatch, policy, products_form):
    """TensorFlow's `BiasAddGrad` sums bfloat16 rows in bfloat16: over 4,096 rows of unit
    normals it missed the sums (about 64 in size) by up to 24. Our dense layers' training
    gradient misses them by the result's rounding only, whether this CPU's bfloat16
    products accumulate in float32 or not (then the sum is taken from a float32 copy). In
    float32 it is a product with a row of ones where oneDNN multiplies, else
    `BiasAddGrad`."""
    if policy == "float32":
        monkeypatch.setattr(flat_dense, "products_run_on_onednn", lambda: products_form)
    elif products_form is not None:
        monkeypatch.setattr(flat_dense, "bfloat16_products_accumulate_in_float32",
                            lambda: products_form)
    layer = flat_dense.FlatDense(256, dtype=policy)
    x = tf.random.stateless_normal([32, 128, 16], seed=[0, 1])
    upstream = tf.cast(tf.random.stateless_normal([32, 128, 256], seed=[0, 2]),
                       layer.compute_dtype)
    layer(x)

    @tf.function
    def gradient():
        with tf.GradientTape() as tape:
            y = tf.cast(layer(x, training=True), tf.float32)
            loss = tf.reduce_sum(y * tf.cast(upstream, tf.float32))
        return tape.gradient(loss, layer.bias)

    bias_gradient = gradient().numpy()
    expected = tf.reduce_sum(tf.cast(upstream, tf.float64), [0, 1]).numpy()
    if policy == "mixed_bfloat16":  # the result's rounding
        np.testing.assert_allclose(bias_gradient, expected, rtol=2.0 ** -8, atol=0)
    else:  # float32's over 4,096 additions, at sums up to ~115 (BiasAddGrad's too)
        np.testing.assert_allclose(bias_gradient, expected, rtol=0, atol=2e-3)
        kinds = {op.type for op in gradient.get_concrete_function().graph.get_operations()}
        assert ("BiasAddGrad" in kinds) == (not products_form)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_the_tied_mlm_head_multiplies_by_the_word_matrix_in_the_compute_dtype(policy):
    """The generator's vocabulary products run in the compute dtype (Keras's `Embedding`
    does not autocast, so they were float32 products under mixed_bfloat16, 8-9% of
    ELECTRA-Small's step); the logits stay float32, within the products' rounding of
    float64 ones, and the word matrix gets its gradient."""
    keras.utils.set_random_seed(0)
    embeddings = ElectraEmbeddings(vocab_size=300, embedding_size=32, dtype=policy)
    head = tied_masked_lm_head(embeddings.token_embedding)
    sequence = tf.random.stateless_normal([2, 8, 32], seed=[2, 1])
    positions = tf.constant([[1, 3], [0, 7]])
    embeddings(tf.zeros([2, 8], tf.int32), tf.zeros([2, 8], tf.int32))
    head(sequence, mask_positions=positions)
    table = embeddings.token_embedding.embeddings

    @tf.function
    def logits_and_gradient():
        with tf.GradientTape() as tape:
            logits = head(sequence, mask_positions=positions)
            total = tf.reduce_sum(logits)
        return logits, tape.gradient(total, table.value)

    logits, gradient = logits_and_gradient()
    assert logits.dtype == tf.float32 and gradient is not None
    graph = logits_and_gradient.get_concrete_function().graph
    products = [op for op in graph.get_operations() if op.type in ("MatMul", "BatchMatMulV2")
                and op.outputs[0].shape[-1] == 300]
    assert products and {op.get_attr("T") for op in products} == {
        tf.as_dtype(embeddings.compute_dtype)}
    hidden = tf.cast(logits - head._bias, tf.float64)  # the product, before the bias
    # The head's hidden states (its layers are float32), multiplied in float64.
    x = tf.gather(sequence, positions, batch_dims=1)
    x = head._intermediate_layer_norm(head._intermediate_dense(x))
    x, table = tf.cast(x, tf.float64), tf.cast(table, tf.float64)
    expected = tf.matmul(x, table, transpose_b=True)
    # Each term's factors rounded to the compute dtype and the result once more: at most
    # three unit roundoffs of the sum of the terms' sizes (float32: its summation's).
    roundoff = 2.0 ** -24 * 32 if policy == "float32" else 2.0 ** -8
    bound = 3 * roundoff * tf.matmul(tf.abs(x), tf.abs(table), transpose_b=True)
    assert np.all(np.abs(hidden - expected) <= bound), np.max(np.abs(hidden - expected) / bound)


@pytest.mark.parametrize("policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 2e-2)])
def test_a_gelu_layer_trains_with_its_bias_added_inside_the_gelu(policy, tolerance):
    """In training, a dense layer with the fused GELU adds its bias inside the GELU's kernel
    (no `BiasAdd` for Grappler to fuse into the product, which takes oneDNN's bfloat16
    product off AMX): the same function and gradients as in float64."""
    keras.utils.set_random_seed(0)
    layer = flat_dense.FlatDense(64, activation=fused_gelu, dtype=policy,
                                 bias_initializer="random_normal")
    x = tf.random.stateless_normal([4, 16, 32], seed=[1, 1])
    upstream = tf.random.stateless_normal([4, 16, 64], seed=[1, 2])
    layer.build(x.shape)

    def outputs_and_gradients(call, dtype):
        variables = [tf.cast(v, dtype) for v in (layer.kernel, layer.bias)]
        inputs = tf.cast(x, dtype)
        with tf.GradientTape() as tape:
            tape.watch([inputs, *variables])
            y = call(inputs, *variables)
            loss = tf.reduce_sum(tf.cast(y, tf.float64) * tf.cast(upstream, tf.float64))
        return [tf.cast(t, tf.float64).numpy()
                for t in (y, *tape.gradient(loss, [inputs, *variables]))]

    ours = outputs_and_gradients(
        lambda inputs, kernel, bias: flat_dense.flat_matmul(
            inputs, kernel, bias, contracted_axes=1, activation=fused_gelu, training=True),
        layer.compute_dtype)
    exact = outputs_and_gradients(
        lambda inputs, kernel, bias: keras.activations.gelu(
            tf.tensordot(inputs, kernel, 1) + bias, approximate=False), tf.float64)
    for name, got, expected in zip(["outputs", "x", "kernel", "bias"], ours, exact):
        scale = np.abs(expected).max()
        np.testing.assert_allclose(got, expected, atol=tolerance * scale, err_msg=name)

    @tf.function
    def training_gradients(inputs):
        with tf.GradientTape() as tape:
            y = layer(inputs, training=True)
        return tape.gradient(y, layer.trainable_variables, output_gradients=tf.cast(
            upstream, layer.compute_dtype))

    def kinds(function):
        return {op.type for op in function.get_concrete_function(x).graph.get_operations()}

    assert "BiasAdd" in kinds(tf.function(lambda inputs: layer(inputs, training=False)))
    assert "BiasAdd" not in kinds(training_gradients)


def loss_and_gradients(product, upstream, jit_compile=False):
    """A traced function of two tensors: the sum of `product(x, y) * upstream` and its
    gradients with respect to both."""
    @tf.function(jit_compile=jit_compile)
    def traced(x, y):
        with tf.GradientTape() as tape:
            tape.watch([x, y])
            loss = tf.reduce_sum(product(x, y) * upstream)
        return loss, tape.gradient(loss, [x, y])

    return traced


@pytest.mark.parametrize("adjoint_a, adjoint_b", [(False, False), (False, True), (True, False),
                                                  (True, True)])
def test_batch_products_run_on_onednns_kernel_only_where_tensorflow_would_run_eigens(
        adjoint_a, adjoint_b):
    """`onednn_batch_matmul.batch_matmul` gives `tf.matmul`'s values and gradients; on
    `_MklBatchMatMulV2` where oneDNN is off (TensorFlow's choice on AVX2-only CPUs), never
    within XLA or an export (TensorFlow's own op there)."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 3, 4, 5) if adjoint_a else (2, 3, 5, 4)), tf.float32)
    y = tf.constant(rng.normal(size=(2, 3, 6, 4) if adjoint_b else (2, 3, 4, 6)), tf.float32)
    upstream = tf.constant(rng.normal(size=(2, 3, 5, 6)), tf.float32)

    def product_and_gradients(matmul, jit_compile=False):
        traced = loss_and_gradients(lambda x, y: matmul(x, y, adjoint_a, adjoint_b), upstream,
                                    jit_compile)
        # Traced for these shapes and for any (fine-tuning's batches).
        unknown = tf.TensorSpec([None] * 4, tf.float32)
        onednn = [[op for op in traced.get_concrete_function(*specs).graph.get_operations()
                   if op.type == "_MklBatchMatMulV2"] for specs in ((x, y), (unknown, unknown))]
        assert len(onednn[0]) == len(onednn[1])
        return traced(x, y), len(onednn[0])

    def tensorflows(x, y, adjoint_a, adjoint_b):
        return tf.matmul(x, y, adjoint_a=adjoint_a, adjoint_b=adjoint_b)

    (loss, gradients), _ = product_and_gradients(tensorflows)
    (ours, our_gradients), onednn_products = product_and_gradients(batch_matmul)
    (xla, xla_gradients), xla_onednn_products = product_and_gradients(batch_matmul, True)
    with export_tracing():
        _, exported_onednn_products = product_and_gradients(batch_matmul)
    # A product and its two gradient products.
    assert onednn_products == (0 if onednn_enabled() else 3)
    assert xla_onednn_products == exported_onednn_products == 0
    for value, expected in ((ours, loss), (xla, loss)) + tuple(
            zip(our_gradients + xla_gradients, gradients + gradients)):
        np.testing.assert_allclose(value, expected, rtol=1e-5, atol=1e-5)


def test_a_training_steps_attention_products_run_on_onednns_kernel_where_oneDNN_is_off():
    """Every batch product of the attention in training, forward and backward, goes
    through `batch_matmul`; inference keeps TensorFlow's op."""
    cfg = ElectraConfig.preset("tiny", vocab_size=100, num_layers=2)
    inputs = encoder_inputs()
    encoder = ElectraEncoder.from_electra_config(cfg)
    encoder(inputs)

    def batch_products(training):
        @tf.function
        def loss_and_gradients():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(encoder(inputs, training=training)["sequence_output"])
            return tape.gradient(loss, encoder.trainable_variables)

        graph = loss_and_gradients.get_concrete_function().graph
        functions = [graph] + [f.graph for f in graph._functions.values()
                               if hasattr(f, "graph")]
        return collections.Counter(op.type for g in functions for op in g.get_operations()
                                   if "BatchMatMul" in op.type)

    onednn_off = not onednn_enabled()
    training = batch_products(True)
    assert bool(training["_MklBatchMatMulV2"]) == onednn_off
    assert bool(training["BatchMatMulV2"]) != onednn_off
    assert not batch_products(False)["_MklBatchMatMulV2"]


@pytest.mark.parametrize("kernel_shape", [(24, 40), (40, 24)])
def test_a_training_products_gradients_are_tensorflows_in_the_faster_forms(kernel_shape):
    """`flat_dense.matmul` gives `tf.matmul`'s values and gradients; a tall float32 kernel's
    gradient comes out of a wide product, transposed, where TensorFlow runs Eigen's
    products (oneDNN off), and out of TensorFlow's own tall one elsewhere."""
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(16, kernel_shape[0])), tf.float32)
    kernel = tf.constant(rng.normal(size=kernel_shape), tf.float32)
    upstream = tf.constant(rng.normal(size=(16, kernel_shape[1])), tf.float32)

    def product_and_gradients(product):
        traced = loss_and_gradients(product, upstream)
        graph = traced.get_concrete_function(x, kernel).graph
        products = [tuple(op.outputs[0].shape) for op in graph.get_operations()
                    if op.type == "MatMul"]
        return traced(x, kernel), products

    (loss, gradients), _ = product_and_gradients(tf.matmul)
    (ours, our_gradients), products = product_and_gradients(flat_dense.matmul)
    np.testing.assert_allclose(ours, loss, rtol=1e-5)
    for mine, expected in zip(our_gradients, gradients):
        np.testing.assert_allclose(mine, expected, rtol=1e-5, atol=1e-5)
    tall = kernel_shape[0] > kernel_shape[1]
    transposed_gradient = tall and products_run_on_eigen()
    assert (kernel_shape[::-1] in products) == transposed_gradient
    assert (kernel_shape in products) != transposed_gradient
