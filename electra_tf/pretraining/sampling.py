"""The generator's samples and the corrupted text the kept encoder reads."""

import tensorflow as tf

from electra_tf.pretraining.masking import scatter_at_positions


def sample_tokens(logits, uniform, temperature=1.0):
    """Samples one id per slot from softmax(logits / temperature) by inverting its CDF.

    One uniform draw per slot (rather than the Gumbel-max trick's one per vocabulary entry)
    keeps the randomness small enough to come from the input pipeline, per example (see
    `masking`). No gradient flows through the sample (the paper trains the generator by
    MLM only).

    logits: [batch, n, vocab]; uniform: float [batch, n] in [0, 1) -> int32 [batch, n].
    """
    logits = tf.stop_gradient(tf.cast(logits, tf.float32)) / temperature
    weights = tf.exp(logits - tf.reduce_max(logits, -1, keepdims=True))
    cdf = tf.cumsum(weights, -1)
    threshold = tf.cast(uniform, tf.float32)[..., None] * cdf[..., -1:]
    # Entries with zero probability never extend the CDF, so they are never chosen.
    sampled = tf.reduce_sum(tf.cast(cdf <= threshold, tf.int32), -1)
    return tf.minimum(sampled, tf.shape(logits)[-1] - 1)


def replace_tokens(input_ids, positions, sampled_ids, weights):
    """Writes the generator's samples into the ORIGINAL ids (all predicted slots, including
    the 15% that the generator saw unmasked) and labels a token "replaced" only where the
    sample differs from the original.

    Returns (corrupted_ids int32 [batch, seq], labels int32 [batch, seq]).
    """
    corrupted = scatter_at_positions(input_ids, positions, sampled_ids, weights > 0)
    return corrupted, tf.cast(tf.not_equal(corrupted, input_ids), tf.int32)
