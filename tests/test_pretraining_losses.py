import keras
import numpy as np
import tensorflow as tf

from electra_tf.pretraining import losses, masking, sampling


def uniform(n, seed):
    return keras.random.uniform([1, n], seed=seed)


def test_sample_follows_the_softmax_and_passes_no_gradient():
    probs = np.array([0.7, 0.2, 0.1, 0.0], np.float32)
    logits = tf.Variable(np.log(probs + 1e-12)[None, None, :].repeat(4000, axis=1))
    with tf.GradientTape() as tape:
        sample = sampling.sample_tokens(logits, uniform(4000, 0))
        loss = tf.reduce_sum(tf.cast(sample, tf.float32))
    assert tape.gradient(loss, logits) is None
    frequencies = np.bincount(sample.numpy().ravel(), minlength=4) / 4000
    np.testing.assert_allclose(frequencies, probs, atol=0.03)


def test_temperature_sharpens_sampling():
    logits = tf.constant(np.log([[[0.6, 0.4]]] * 1).repeat(4000, axis=1), tf.float32)
    cold = sampling.sample_tokens(logits, uniform(4000, 1), temperature=0.1)
    assert (cold.numpy() == 0).mean() > 0.95


def test_sample_inverts_the_cdf_and_never_picks_impossible_ids():
    logits = tf.constant(np.log([[[0.5, 0.0, 0.25, 0.25]]] * 1).repeat(5, axis=1), tf.float32)
    draws = tf.constant([[0.0, 0.49, 0.5, 0.74, 0.9999999]])
    assert sampling.sample_tokens(logits, draws).numpy().tolist() == [[0, 0, 2, 2, 3]]


def test_replaced_only_where_the_sample_differs():
    ids = tf.constant([[2, 10, 11, 12, 3, 0]])
    positions = tf.constant([[1, 2, 0]])
    sampled = tf.constant([[10, 99, 55]])  # same as original at 1; differs at 2; slot unused
    weights = tf.constant([[1.0, 1.0, 0.0]])
    corrupted, labels = sampling.replace_tokens(ids, positions, sampled, weights)
    assert corrupted.numpy().tolist() == [[2, 10, 99, 12, 3, 0]]
    assert labels.numpy().tolist() == [[0, 0, 1, 0, 0, 0]]


def test_discriminator_loss_averages_over_real_tokens_only():
    logits = tf.constant([[0.0, 2.0, -1.0, 50.0]])
    labels = tf.constant([[0, 1, 0, 0]])
    mask = tf.constant([[1, 1, 1, 0]])
    def bce(z, y):
        return max(z, 0) - z * y + np.log1p(np.exp(-abs(z)))
    expected = (bce(0.0, 0) + bce(2.0, 1) + bce(-1.0, 0)) / 3
    np.testing.assert_allclose(losses.discriminator_loss(logits, labels, mask), expected,
                               rtol=1e-5)


def test_mlm_loss_averages_over_used_slots():
    logits = tf.constant([[[2.0, 0.0], [0.0, 0.0], [9.0, -9.0]]])
    labels = tf.constant([[0, 1, 1]])
    weights = tf.constant([[1.0, 1.0, 0.0]])
    expected = (np.log1p(np.exp(-2.0)) + np.log(2.0)) / 2
    np.testing.assert_allclose(losses.mlm_loss(logits, labels, weights), expected,
                               rtol=1e-5)


def test_chosen_positions_mask_marks_used_slots_only():
    positions = tf.constant([[3, 1, 0], [2, 0, 0]])
    weights = tf.constant([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])  # unused slots point at 0
    mask = masking.chosen_positions_mask(positions, weights, 5)
    assert mask.numpy().tolist() == [[0, 1, 0, 1, 0], [0, 0, 1, 0, 0]]


def test_copy_mlm_loss_mixes_copying_the_input_and_the_softmax():
    logits = tf.constant([[[1.0, 0.0, -1.0], [0.5, 0.5, 2.0], [0.0, 0.0, 0.0]]])
    copy_logits = tf.constant([[0.3, -1.2, 4.0]])
    input_ids = tf.constant([[0, 1, 2]])  # what the model read
    labels = tf.constant([[0, 2, 1]])  # the originals: token 0 was kept, token 1 replaced
    weights = tf.constant([[1.0, 1.0, 0.0]])  # the third is padding
    softmax = np.exp(logits.numpy()[0]) / np.exp(logits.numpy()[0]).sum(-1, keepdims=True)
    gate = 1 / (1 + np.exp(-copy_logits.numpy()[0]))
    kept = gate[0] * 1.0 + (1 - gate[0]) * softmax[0, 0]  # copying is right here
    replaced = (1 - gate[1]) * softmax[1, 2]  # copying the input would be wrong
    expected = -(np.log(kept) + np.log(replaced)) / 2
    loss = losses.copy_mlm_loss(logits, copy_logits, input_ids, labels, weights)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)


def test_copy_mlm_loss_is_stable_for_confident_gates():
    logits = tf.constant([[[50.0, -50.0]]])
    for copy_logit, label in ((80.0, 0), (-80.0, 1), (80.0, 1)):
        loss = losses.copy_mlm_loss(logits, tf.constant([[copy_logit]]), tf.constant([[0]]),
                                        tf.constant([[label]]), tf.constant([[1.0]]))
        assert np.isfinite(loss.numpy())


def test_sample_inverts_the_cdf_across_blocks_as_a_float64_inversion_does():
    # BERT's vocabulary size (a ragged last block), whole blocks and scattered entries with
    # zero probability. A float32 scan of the whole vocabulary missed 4.7% of these slots.
    rng = np.random.default_rng(0)
    logits = rng.normal(0.0, 3.0, (2, 400, 30522)).astype(np.float32)
    logits[:, :, 128:384] = -np.inf
    logits[:, :, rng.random(30522) < 0.3] = -np.inf
    draws = rng.random((2, 400)).astype(np.float32)
    sampled = sampling.sample_tokens(tf.constant(logits), tf.constant(draws)).numpy()
    weights = np.exp(logits.astype(np.float64) - logits.max(-1, keepdims=True))
    cdf = np.cumsum(weights, -1)
    expected = (cdf <= (draws * cdf[..., -1])[..., None]).sum(-1)
    assert (sampled == expected).mean() > 0.999
    assert np.all(weights[np.arange(2)[:, None], np.arange(400)[None], sampled] > 0)


def test_sparse_cross_entropy_is_tensorflows_in_value_and_gradient_in_both_precisions():
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 4, (2, 5, 1000)).astype(np.float32)
    labels = tf.constant(rng.integers(0, 1000, (2, 5)), tf.int32)
    upstream = tf.constant(rng.uniform(0, 1, (2, 5)), tf.float32)
    for dtype, tolerance in ((tf.float32, 1e-6), (tf.bfloat16, 1e-2)):
        values = tf.Variable(tf.cast(logits, dtype))
        results = []
        for cross_entropy in (losses.sparse_cross_entropy, lambda labels, logits: (
                tf.nn.sparse_softmax_cross_entropy_with_logits(
                    labels=labels, logits=tf.cast(logits, tf.float32)))):
            with tf.GradientTape() as tape:
                per_slot = cross_entropy(labels, values)
                loss = tf.reduce_sum(per_slot * upstream)
            gradient = tape.gradient(loss, values)
            assert per_slot.dtype == tf.float32 and gradient.dtype == dtype
            results.append((per_slot.numpy(), tf.cast(gradient, tf.float32).numpy()))
        (ours, our_gradient), (theirs, their_gradient) = results
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(our_gradient, their_gradient, atol=tolerance)
