"""The generator's samples and the corrupted text the kept encoder reads."""

import tensorflow as tf

from electra_tf.pretraining.masking import scatter_at_positions


# Vocabulary entries per block of the CDF's inversion (see `sample_tokens`).
_BLOCK = 128


def sample_tokens(logits, uniform, temperature=1.0):
    """Samples one id per slot from softmax(logits / temperature) by inverting its CDF.

    One uniform draw per slot (rather than the Gumbel-max trick's one per vocabulary entry)
    keeps the randomness small enough to come from the input pipeline, per example (see
    `masking`). No gradient flows through the sample (the paper trains the generator by
    MLM only).

    The CDF is inverted in two levels, blocks of `_BLOCK` entries then the entries of the
    chosen block: TensorFlow's CPU `Cumsum` over the whole vocabulary (30,522 entries for
    each of ELECTRA-Small's 640 slots at 32 x 128) was the costliest op of a pretraining
    step after the matmuls and dropout. Summing blocks is one vectorised pass; the scans
    left are over 239 block sums and 128 entries: 173 -> 33 ms for those 640 slots on a
    2-core AVX-512 EPYC. It is also more exact: its samples were a float64 inversion's in
    every slot, where float32's running sum over 30,522 entries missed 4.7% of them.

    The entries' weights are `tf.nn.softmax`'s: where oneDNN runs, one kernel for the
    maximum, the exponentials and their normalisation, where separate ops made four passes
    over the [slots, vocab] logits. Those 640 slots alone took 13.4 ms against 24-31 (2-core
    Sapphire Rapids); with oneDNN off (TensorFlow's own softmax) about level.

    logits: [batch, n, vocab]; uniform: float [batch, n] in [0, 1) -> int32 [batch, n].
    """
    vocab = logits.shape[-1]
    blocks = -(-vocab // _BLOCK)
    logits = tf.stop_gradient(tf.cast(logits, tf.float32))
    if temperature != 1.0:
        logits = logits / temperature
    # Padding entries have zero probability.
    logits = tf.pad(logits, [[0, 0], [0, 0], [0, blocks * _BLOCK - vocab]],
                    constant_values=float("-inf"))
    weights = tf.nn.softmax(logits)
    weights = tf.reshape(weights, tf.concat([tf.shape(weights)[:2], [blocks, _BLOCK]], 0))
    block_sums = tf.reduce_sum(weights, -1)
    block_cdf = tf.cumsum(block_sums, -1)
    threshold = tf.cast(uniform, tf.float32) * block_cdf[..., -1]
    # Blocks with zero probability never extend the CDF, so they are never chosen.
    block = tf.minimum(tf.reduce_sum(tf.cast(block_cdf <= threshold[..., None], tf.int32), -1),
                       blocks - 1)
    offset = threshold - tf.gather(block_cdf - block_sums, block, batch_dims=2)
    inner_cdf = tf.cumsum(tf.gather(weights, block, batch_dims=2), -1)
    entry = tf.reduce_sum(tf.cast(inner_cdf <= offset[..., None], tf.int32), -1)
    # Rounding between the block's sum and its own CDF must not pick a zero-probability
    # entry: keep to the block's first and last entries with probability.
    first = tf.reduce_sum(tf.cast(inner_cdf <= 0.0, tf.int32), -1)
    last = tf.reduce_sum(tf.cast(inner_cdf < inner_cdf[..., -1:], tf.int32), -1)
    return block * _BLOCK + tf.clip_by_value(entry, first, last)


def replace_tokens(input_ids, positions, sampled_ids, weights):
    """Writes the generator's samples into the ORIGINAL ids (all predicted slots, including
    the 15% that the generator saw unmasked) and labels a token "replaced" only where the
    sample differs from the original.

    Returns (corrupted_ids int32 [batch, seq], labels int32 [batch, seq]).
    """
    corrupted = scatter_at_positions(input_ids, positions, sampled_ids, weights > 0)
    return corrupted, tf.cast(tf.not_equal(corrupted, input_ids), tf.int32)
