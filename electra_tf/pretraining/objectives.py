"""Losses and sampling of the pretraining objectives (in float32).

The objectives of the paper's section 3.2 / Table 5 (`ElectraConfig.objective`):
    electra         generator MLM + discriminator BCE over every real token;
    electra_15      the same, but the BCE counts only the positions chosen for masking;
    mlm             BERT: the kept encoder predicts the masked tokens (no generator);
    replace_mlm     the chosen positions hold generator samples instead of `[MASK]`, and
                    the kept encoder predicts the original tokens there;
    all_tokens_mlm  like replace_mlm, but the kept encoder predicts every real token
                    through a copy mechanism (`copy_mlm_loss`).
"""

import tensorflow as tf

from electra_tf.pretraining.masking import scatter_at_positions


def mlm_loss(logits, labels, weights):
    """Mean cross-entropy over the used prediction slots.

    logits: [batch, n, vocab]; labels: int [batch, n]; weights: float [batch, n].
    """
    per_slot = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=labels, logits=tf.cast(logits, tf.float32))
    return tf.reduce_sum(per_slot * weights) / (tf.reduce_sum(weights) + 1e-6)


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


def chosen_positions_mask(positions, weights, seq_length):
    """int32 [batch, seq]: 1 at the positions chosen for masking (used slots only).

    positions: int [batch, n]; weights: float [batch, n] (1 for used slots).
    """
    zeros = tf.zeros([tf.shape(positions)[0], seq_length], tf.int32)
    return scatter_at_positions(zeros, positions, tf.ones_like(positions, tf.int32),
                                weights > 0)


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
