"""The pretraining losses (computed in float32); `objectives/` says which one trains what."""

import tensorflow as tf

from electra_tf import traced
from electra_tf.layers.bfloat16_rounding import narrow


# The generator's cross-entropy over the vocabulary as two small XLA kernels (forward and
# backward), written by hand because TensorFlow's CPU `SparseSoftmaxCrossEntropyWithLogits`
# makes its passes over the [slots, vocab] logits one after another on one thread: with
# its gradient it took 69 ms for ELECTRA-Small's 640 slots x 30,522 entries, the largest
# single op of a pretraining step, and these kernels 35 ms (2-core AVX-512 EPYC; bfloat16
# logits 61 and 30 ms, their cast to float32 fused in). Like `fused_gelu`, only these are
# compiled: the rest of the step keeps TensorFlow's kernels.


@traced.function(jit_compile=True)
def _cross_entropy_forward(logits, labels):
    wide = tf.cast(logits, tf.float32)
    log_normalizer = tf.reduce_logsumexp(wide, -1)
    label_logits = tf.gather(wide, labels, batch_dims=labels.shape.rank)
    return log_normalizer - label_logits, log_normalizer


@traced.function(jit_compile=True)
def _cross_entropy_backward(logits, labels, log_normalizer, upstream):
    # d/dlogits [logsumexp(logits) - logits[label]] = softmax(logits) - one_hot(label)
    wide = tf.cast(logits, tf.float32)
    gradient = (tf.exp(wide - log_normalizer[..., None])
                - tf.one_hot(labels, logits.shape[-1], dtype=tf.float32))
    return narrow(gradient * upstream[..., None], logits.dtype)


def sparse_cross_entropy(labels, logits):
    """-log softmax(logits)[labels] in float32, as `tf.nn.sparse_softmax_cross_entropy_with_
    logits` (to float32 rounding); the gradient comes back in `logits`'s dtype.

    labels: int [...]; logits: float [..., vocab] -> float32 [...].
    """
    labels = tf.convert_to_tensor(labels)

    @tf.custom_gradient
    def cross_entropy(logits):
        losses, log_normalizer = _cross_entropy_forward(logits, labels)
        return losses, lambda upstream: _cross_entropy_backward(logits, labels,
                                                                log_normalizer, upstream)

    return cross_entropy(logits)


def mlm_loss(logits, labels, weights):
    """Mean cross-entropy over the used prediction slots.

    logits: [batch, n, vocab]; labels: int [batch, n]; weights: float [batch, n].
    """
    per_slot = sparse_cross_entropy(labels, logits)
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
    copy_logits = tf.cast(copy_logits, tf.float32)
    softmax_log_prob = -sparse_cross_entropy(labels, logits)  # in float32 whatever the dtype
    generate = tf.math.log_sigmoid(-copy_logits) + softmax_log_prob  # log((1-D) p_softmax)
    copy = tf.math.log_sigmoid(copy_logits)  # log D
    log_prob = tf.where(tf.equal(labels, input_ids), tf.math.reduce_logsumexp(
        tf.stack([generate, copy], -1), -1), generate)
    weights = tf.cast(weights, tf.float32)
    return -tf.reduce_sum(log_prob * weights) / (tf.reduce_sum(weights) + 1e-6)
