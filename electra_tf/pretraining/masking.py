"""Dynamic masking for the generator's MLM task, in graph and fresh at every step.

The step's randomness is an input: `noise`, uniform floats per example. The input pipeline
draws them per example (`electra_tf.data.dataset`), so an example gets the same mask and
the same generator sample whether it is trained on one device, on one of several
replicas, or in one of several accumulated micro-batches; runs under different
strategies are then comparable step for step.
"""

import tensorflow as tf


def noise_width(seq_length: int, max_predictions: int) -> int:
    """Uniform draws one example needs: a score per position, then two per prediction
    slot (mask-or-keep, then the generator sample)."""
    return seq_length + 2 * max_predictions


def split_noise(noise, seq_length: int, max_predictions: int):
    """(position scores [batch, seq], keep draws [batch, n], sample draws [batch, n])."""
    n = max_predictions
    return noise[:, :seq_length], noise[:, -2 * n:-n], noise[:, -n:]


def mask_tokens(input_ids, input_mask, *, mask_prob, max_predictions, mask_token_id,
                special_token_ids, position_scores, keep_draws):
    """Chooses positions to predict and hides most of them behind `[MASK]`.

    Per sequence, `round(num_real_tokens * mask_prob)` positions (at least 1, at most
    `max_predictions`) are drawn without replacement among real, non-special tokens, as
    the official `pretrain_helpers.mask` does (it draws with replacement; distinct
    positions make the count exact). 85% of them become `[MASK]`, 15% keep their token; none
    is replaced by a random token (the generator does that).

    Args:
        input_ids: int32 [batch, seq].
        input_mask: int32 [batch, seq], 1 for real tokens.
        position_scores: float [batch, seq] uniform in [0, 1): the chosen positions are
            the candidates with the highest scores.
        keep_draws: float [batch, max_predictions] uniform: a slot keeps its token when
            its draw is >= 0.85.

    Returns: dict with
        `masked_ids`: int32 [batch, seq], the generator's input;
        `positions`: int32 [batch, max_predictions] (unused slots point at position 0);
        `labels`: int32 [batch, max_predictions], original ids (0 in unused slots);
        `weights`: float32 [batch, max_predictions], 1 for used slots.
    """
    input_ids = tf.convert_to_tensor(input_ids, tf.int32)
    candidates = tf.cast(input_mask, tf.bool)
    for token_id in special_token_ids:
        candidates &= tf.not_equal(input_ids, token_id)

    num_tokens = tf.cast(tf.reduce_sum(tf.cast(input_mask, tf.int32), -1), tf.float32)
    num_to_predict = tf.maximum(1, tf.minimum(
        max_predictions, tf.cast(tf.round(num_tokens * mask_prob), tf.int32)))
    num_to_predict = tf.minimum(
        num_to_predict, tf.reduce_sum(tf.cast(candidates, tf.int32), -1))

    # Sampling without replacement: the top-k of uniform scores over the candidates.
    scores = tf.where(candidates, tf.cast(position_scores, tf.float32), -1.0)
    # A sequence shorter than max_predictions has fewer positions to rank; the slots
    # beyond them stay unused (num_to_predict never exceeds the candidates).
    ranked = min(max_predictions, input_ids.shape[1] or max_predictions)
    _, positions = tf.math.top_k(scores, k=ranked)
    positions = tf.pad(positions, [[0, 0], [0, max_predictions - ranked]])
    used = tf.sequence_mask(num_to_predict, max_predictions)
    positions = tf.where(used, positions, 0)
    labels = tf.where(used, tf.gather(input_ids, positions, batch_dims=1), 0)

    to_mask = used & (keep_draws < 0.85)
    masked_ids = scatter_at_positions(
        input_ids, positions, tf.fill(tf.shape(positions), mask_token_id), to_mask)
    return {
        "masked_ids": tf.stop_gradient(masked_ids),
        "positions": positions,
        "labels": labels,
        "weights": tf.cast(used, tf.float32),
    }


def scatter_at_positions(ids, positions, updates, where):
    """`ids` with `updates[b, n]` written at `positions[b, n]` wherever `where[b, n]`.

    ids: int32 [batch, seq]; positions, updates: int32 [batch, n]; where: bool [batch, n].
    Positions must be distinct among the slots where `where` is true.
    """
    shape = tf.shape(ids)
    batch_index = tf.broadcast_to(tf.range(shape[0])[:, None], tf.shape(positions))
    indices = tf.stack([batch_index, positions], -1)
    # scatter_nd sums duplicates, so slots left out (which may share a position) add 0.
    written = tf.scatter_nd(indices, tf.cast(where, tf.int32), shape) > 0
    values = tf.scatter_nd(indices, tf.where(where, updates, tf.zeros_like(updates)), shape)
    return tf.where(written, values, ids)


def chosen_positions_mask(positions, weights, seq_length):
    """int32 [batch, seq]: 1 at the positions chosen for masking (used slots only).

    positions: int [batch, n]; weights: float [batch, n] (1 for used slots).
    """
    zeros = tf.zeros([tf.shape(positions)[0], seq_length], tf.int32)
    return scatter_at_positions(zeros, positions, tf.ones_like(positions, tf.int32),
                                weights > 0)
