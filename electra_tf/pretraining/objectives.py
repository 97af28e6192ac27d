"""Losses and sampling of the replaced-token-detection objective (in float32)."""

import keras
import tensorflow as tf

from electra_tf.pretraining.masking import scatter_at_positions


def mlm_loss(logits, labels, weights):
    """Mean cross-entropy over the used prediction slots.

    logits: [batch, n, vocab]; labels: int [batch, n]; weights: float [batch, n].
    """
    per_slot = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32))
    return tf.reduce_sum(per_slot * weights) / (tf.reduce_sum(weights) + 1e-6)


def gumbel_sample(logits, temperature=1.0, seed=None):
    """Samples one id per slot from softmax(logits / temperature) by the Gumbel-max trick.

    No gradient flows through the sample (the paper trains the generator by MLM only).
    logits: [batch, n, vocab] -> int32 [batch, n].
    """
    logits = tf.stop_gradient(tf.cast(logits, tf.float32)) / temperature
    uniform = keras.random.uniform(tf.shape(logits), seed=seed)
    gumbel = -tf.math.log(-tf.math.log(uniform + 1e-9) + 1e-9)
    return tf.stop_gradient(tf.argmax(logits + gumbel, -1, output_type=tf.int32))


def replace_tokens(input_ids, positions, sampled_ids, weights):
    """Writes the generator's samples into the ORIGINAL ids (all predicted slots, including
    the 15% that the generator saw unmasked) and labels a token "replaced" only where the
    sample differs from the original.

    Returns (corrupted_ids int32 [batch, seq], labels int32 [batch, seq]).
    """
    corrupted = scatter_at_positions(input_ids, positions, sampled_ids, weights > 0)
    return corrupted, tf.cast(tf.not_equal(corrupted, input_ids), tf.int32)


def discriminator_loss(logits, labels, input_mask):
    """Sigmoid cross-entropy averaged over every real (non-pad) token.

    logits: [batch, seq]; labels, input_mask: int [batch, seq].
    """
    mask = tf.cast(input_mask, tf.float32)
    losses = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.float32), logits=tf.cast(logits, tf.float32))
    return tf.reduce_sum(losses * mask) / (tf.reduce_sum(mask) + 1e-6)
