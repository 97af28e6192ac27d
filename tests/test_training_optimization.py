import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.layers.encoder import ElectraEncoder
from electra_tf.training.optimization import (AdamWeightDecay, WarmupPolynomialDecay,
                                               create_optimizer, layerwise_lr_multipliers)


def test_schedule_multiplies_warmup_into_linear_decay():
    schedule = WarmupPolynomialDecay(1e-3, total_steps=100, warmup_steps=10)
    values = [float(schedule(s)) for s in (0, 5, 10, 50, 100, 150)]
    np.testing.assert_allclose(values, [0.0, 1e-3 * 0.95 * 0.5, 1e-3 * 0.9, 1e-3 * 0.5, 0.0,
                                        0.0], atol=1e-9)


def test_update_without_bias_correction_matches_the_official_formula():
    var = keras.Variable(np.array([1.0, -2.0], np.float32), name="kernel")
    opt = AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.01, epsilon=1e-6)
    grad = np.array([0.5, 0.25], np.float32)
    opt.apply([tf.constant(grad)], [var])
    m, v = 0.1 * grad, 0.001 * grad ** 2
    expected = np.array([1.0, -2.0]) - 0.1 * (m / (np.sqrt(v) + 1e-6) + 0.01 * np.array([1.0, -2.0]))
    np.testing.assert_allclose(var.numpy(), expected, rtol=1e-5)


def test_bias_correction_option_is_textbook_adamw():
    """Three steps against Adam's formula in float64 (m_hat / (sqrt(v_hat) + eps)), and
    loosely against Keras's AdamW, which adds eps before the bias correction and computes
    1 - 0.999**t in float32 (1.2e-5 apart after three steps)."""
    start = np.array([1.0, -2.0])
    ours_var, keras_var = (keras.Variable(start.astype(np.float32)) for _ in range(2))
    ours = AdamWeightDecay(bias_correction=True, learning_rate=0.1, weight_decay_rate=0.01,
                           epsilon=1e-6)
    reference = keras.optimizers.AdamW(learning_rate=0.1, weight_decay=0.01, epsilon=1e-6)
    w, m, v = start.copy(), 0.0, 0.0
    for t, grad in enumerate(([0.5, 0.25], [-0.3, 0.1], [0.2, -0.4]), start=1):
        grad = np.array(grad)
        ours.apply([tf.constant(grad, tf.float32)], [ours_var])
        reference.apply([tf.constant(grad, tf.float32)], [keras_var])
        m, v = 0.9 * m + 0.1 * grad, 0.999 * v + 0.001 * grad ** 2
        m_hat, v_hat = m / (1 - 0.9 ** t), v / (1 - 0.999 ** t)
        w = w - 0.1 * (m_hat / (np.sqrt(v_hat) + 1e-6) + 0.01 * w)
    np.testing.assert_allclose(ours_var.numpy(), w, rtol=1e-6)
    np.testing.assert_allclose(keras_var.numpy(), w, rtol=1e-4)


def test_layer_norm_and_biases_are_not_decayed():
    dense = keras.layers.Dense(2, bias_initializer="ones")
    norm = keras.layers.LayerNormalization()
    model = keras.Sequential([keras.Input((2,)), dense, norm])
    opt = create_optimizer(1.0, total_steps=10, warmup_steps=0,
                           variables=model.trainable_variables, weight_decay=0.5)
    before = [v.numpy().copy() for v in model.trainable_variables]
    zero = [tf.zeros_like(v) for v in model.trainable_variables]
    opt.apply(zero, model.trainable_variables)
    after = {v.path: (b, v.numpy()) for b, v in zip(before, model.trainable_variables)}
    for path, (b, a) in after.items():
        if path.endswith("kernel"):
            assert not np.allclose(a, b)  # decayed with a zero gradient
        else:
            np.testing.assert_array_equal(a, b)  # bias, gamma, beta untouched


def test_gradients_are_clipped_to_their_global_norm():
    """A gradient of global norm 10 under clip_norm 1.0 moves Adam's moments exactly as
    its rescaling to norm 1 does without clipping (and unlike the unclipped gradient)."""
    gradients = [tf.constant([6.0, 0.0]), tf.constant([8.0])]  # global norm 10

    def moments(clip_norm, scale):
        variables = [keras.Variable(np.zeros(2, np.float32)),
                     keras.Variable(np.zeros(1, np.float32))]
        opt = create_optimizer(0.1, total_steps=10, warmup_steps=0, variables=variables,
                               clip_norm=clip_norm)
        opt.apply([g * scale for g in gradients], variables)
        return np.concatenate([m.numpy() for m in opt._momentums + opt._velocities])

    clipped, rescaled = moments(1.0, 1.0), moments(0.0, 0.1)
    np.testing.assert_allclose(clipped, rescaled, rtol=1e-6)
    np.testing.assert_allclose(clipped[:3], [0.06, 0.0, 0.08], rtol=1e-6)  # 0.1 x g / 10
    assert not np.allclose(moments(0.0, 1.0), clipped)


@pytest.mark.parametrize("clip_norm", [0.7, 100.0])
def test_clipping_equals_tensorflows_bit_for_bit_sparse_gradients_included(clip_norm):
    # Written by hand (without tf.clip_by_global_norm's identity op per gradient): the
    # same values, and an embedding's gathered rows (one repeated) counted as TensorFlow
    # counts them.
    rng = np.random.default_rng(0)
    gradients = [tf.constant(rng.normal(size=(5, 3)), tf.float32),
                 tf.IndexedSlices(tf.constant(rng.normal(size=(4, 3)), tf.float32),
                                  tf.constant([0, 2, 2, 1]), tf.constant([5, 3]))]
    variables = [tf.Variable(tf.zeros([5, 3])) for _ in gradients]
    ours = AdamWeightDecay(clip_norm=clip_norm)._all_reduce_sum_gradients(
        list(zip(gradients, variables)))
    expected, _ = tf.clip_by_global_norm(gradients, clip_norm)
    assert isinstance(ours[1][0], tf.IndexedSlices)
    assert [variable for _, variable in ours] == variables
    for (gradient, _), reference in zip(ours, expected):
        np.testing.assert_array_equal(tf.convert_to_tensor(gradient),
                                      tf.convert_to_tensor(reference))


def test_layerwise_decay_is_correct_by_default_and_official_on_request():
    encoder = ElectraEncoder.from_electra_config(ElectraConfig.preset("tiny", vocab_size=50))
    encoder({"input_word_ids": np.ones((1, 4), "int32"), "input_mask": np.ones((1, 4), "int32"),
             "input_type_ids": np.zeros((1, 4), "int32")})
    head = keras.layers.Dense(2)
    head.build((None, 64))
    variables = encoder.trainable_variables + head.trainable_variables
    word = encoder.embeddings.token_embedding.embeddings.path
    top = encoder.transformer_layers[-1].weights[0].path
    bottom = encoder.transformer_layers[0].weights[0].path
    project = encoder.embeddings_project.kernel.path
    for official, expected in ((False, (1.0, 0.8, 0.8 ** 2, 0.8 ** 3, 0.8 ** 3)),
                               (True, (1.0, 0.8 ** 2, 0.8 ** 3, 0.8 ** 4, 0.8 ** 4))):
        m = layerwise_lr_multipliers(encoder, variables, 0.8, official_bug=official)
        got = (m[head.kernel.path], m[top], m[bottom], m[word], m[project])
        np.testing.assert_allclose(got, expected)


def test_lr_multiplier_scales_the_update_and_the_decay():
    a = keras.Variable(np.array([1.0], np.float32), name="a")
    b = keras.Variable(np.array([1.0], np.float32), name="b")
    opt = AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.1,
                          lr_multipliers={a.path: 1.0, b.path: 0.5})
    opt.apply([tf.constant([1.0]), tf.constant([1.0])], [a, b])
    np.testing.assert_allclose(1.0 - b.numpy(), 0.5 * (1.0 - a.numpy()), rtol=1e-6)
    # A variable the multipliers leave out is an error, not a silent full rate.
    with pytest.raises(ValueError, match="name no rate for 1 variable"):
        AdamWeightDecay(learning_rate=0.1, lr_multipliers={b.path: 0.5}).build([a, b])
