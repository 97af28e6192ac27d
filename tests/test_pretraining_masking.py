import keras
import numpy as np
import tensorflow as tf

from electra_tf.pretraining.masking import (mask_tokens, noise_width, scatter_at_positions,
                                           split_noise)

PAD, CLS, SEP, MASK = 0, 2, 3, 4


def make_batch(lengths, seq=40):
    ids = np.zeros((len(lengths), seq), np.int32)
    for row, n in enumerate(lengths):
        ids[row, :n] = np.arange(10, 10 + n)
        ids[row, 0], ids[row, n - 1] = CLS, SEP
    return tf.constant(ids), tf.constant((ids != PAD).astype(np.int32))


def run(ids, mask, seed, max_predictions=6, prob=0.15):
    noise = keras.random.uniform([ids.shape[0], noise_width(ids.shape[1], max_predictions)],
                                 seed=seed)
    scores, keep, _ = split_noise(noise, ids.shape[1], max_predictions)
    return mask_tokens(ids, mask, mask_prob=prob, max_predictions=max_predictions,
                       mask_token_id=MASK, special_token_ids=(PAD, CLS, SEP, MASK),
                       position_scores=scores, keep_draws=keep)


def test_per_sequence_count_and_never_special_or_padding():
    ids, mask = make_batch([40, 20, 7, 3])
    out = run(ids, mask, keras.random.SeedGenerator(1))
    # round(n * 0.15): 40 -> 6, 20 -> 3, 7 -> 1, 3 -> 0 -> at least 1.
    assert out["weights"].numpy().sum(-1).tolist() == [6, 3, 1, 1]
    positions, weights = out["positions"].numpy(), out["weights"].numpy()
    ids_np = ids.numpy()
    for row in range(4):
        chosen = positions[row][weights[row] > 0]
        assert len(set(chosen)) == len(chosen)  # distinct
        assert all(ids_np[row, p] not in (PAD, CLS, SEP) for p in chosen)
        assert out["labels"].numpy()[row][weights[row] > 0].tolist() == ids_np[row, chosen].tolist()
    assert np.all(out["labels"].numpy()[weights == 0] == 0)


def test_only_chosen_positions_change_and_they_become_mask_or_stay():
    ids, mask = make_batch([40] * 64)
    out = run(ids, mask, keras.random.SeedGenerator(2))
    changed = out["masked_ids"].numpy() != ids.numpy()
    chosen = np.zeros_like(changed)
    for row, (pos, w) in enumerate(zip(out["positions"].numpy(), out["weights"].numpy())):
        chosen[row, pos[w > 0]] = True
    assert not np.any(changed & ~chosen)
    assert np.all(out["masked_ids"].numpy()[changed] == MASK)
    fraction_masked = changed.sum() / chosen.sum()
    assert 0.80 < fraction_masked < 0.90  # 85% [MASK], 15% unchanged (n = 384)


def test_the_highest_scored_candidates_are_chosen_and_low_keep_draws_mask():
    ids, mask = make_batch([12])
    scores = np.zeros((1, 40), np.float32)
    scores[0, [0, 5, 7]] = [0.99, 0.9, 0.8]  # position 0 is [CLS]: never a candidate
    keep = np.array([[0.9, 0.1]], np.float32)
    out = mask_tokens(ids, mask, mask_prob=0.15, max_predictions=2, mask_token_id=MASK,
                      special_token_ids=(PAD, CLS, SEP, MASK), position_scores=scores,
                      keep_draws=keep)
    assert out["positions"].numpy().tolist() == [[5, 7]]
    # Slot 0 (draw 0.9 >= 0.85) keeps its token; slot 1 becomes [MASK].
    assert out["masked_ids"].numpy()[0, 5] == ids.numpy()[0, 5]
    assert out["masked_ids"].numpy()[0, 7] == MASK


def test_fresh_masks_every_call():
    ids, mask = make_batch([40] * 4)
    seed = keras.random.SeedGenerator(3)
    first, second = run(ids, mask, seed), run(ids, mask, seed)
    assert not np.array_equal(first["positions"].numpy(), second["positions"].numpy())


def test_scatter_ignores_unused_slots_even_on_shared_positions():
    ids = tf.constant([[5, 6, 7, 8]])
    out = scatter_at_positions(ids, tf.constant([[0, 2, 0]]), tf.constant([[9, 9, 1]]),
                               tf.constant([[True, True, False]]))
    assert out.numpy().tolist() == [[9, 6, 9, 8]]
