"""The pretraining losses (computed in float32); `objectives/` says which one trains what."""

import tensorflow as tf


def mlm_loss(logits, labels, weights):
    """Mean cross-entropy over the used prediction slots.

    logits: [batch, n, vocab]; labels: int [batch, n]; weights: float [batch, n].
    """
    per_slot = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32))
    return tf.reduce_sum(per_slot * weights) / (tf.reduce_sum(weights) + 1e-6)


def discriminator_loss(logits, labels, weights):
    """Sigmoid cross-entropy averaged over the tokens where `weights` is 1.

    `electra` weighs every real (non-pad) token (`weights` = input mask); `electra_15` only
    the positions chosen for masking (`chosen_positions_mask`).
    logits: [batch, seq]; labels, weights: int or float [batch, seq].
    """
    mask = tf.cast(weights, tf.float32)
    losses = tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.float32), logits=tf.cast(logits, tf.float32))
    return tf.reduce_sum(losses * mask) / (tf.reduce_sum(mask) + 1e-6)


def copy_mlm_loss(logits, copy_logits, input_ids, labels, weights):
    """All-Tokens MLM with the paper's copy mechanism: mean negative log-likelihood of

        p(label_t) = D_t * [label_t == input_t] + (1 - D_t) * softmax(logits_t)[label_t],

    D_t = sigmoid(copy_logits_t), over the tokens where `weights` is 1.

    logits: [batch, seq, vocab]; copy_logits: [batch, seq]; input_ids (what the model
    read), labels (the original ids): int [batch, seq]; weights: [batch, seq].
    """
    logits = tf.cast(logits, tf.float32)
    copy_logits = tf.cast(copy_logits, tf.float32)
    softmax_log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels,
                                                                       logits=logits)
    generate = tf.math.log_sigmoid(-copy_logits) + softmax_log_prob  # log((1-D) p_softmax)
    copy = tf.math.log_sigmoid(copy_logits)  # log D
    log_prob = tf.where(tf.equal(labels, input_ids), tf.math.reduce_logsumexp(
        tf.stack([generate, copy], -1), -1), generate)
    weights = tf.cast(weights, tf.float32)
    return -tf.reduce_sum(log_prob * weights) / (tf.reduce_sum(weights) + 1e-6)
