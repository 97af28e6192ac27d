"""The paper's objectives and generator ablations, on hand-made batches.

Each test feeds one sequence whose masking noise is chosen by hand, so the positions
chosen for prediction (and which of them show `[MASK]`) are known; it then checks which
positions each objective's loss counts and what its targets are, recomputing the loss
with numpy from the model's own logits.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.pretraining.pretrainer import ElectraPretrainer

SPECIAL = dict(pad_token_id=0, unk_token_id=1, cls_token_id=2, sep_token_id=3, mask_token_id=4)
SEQ, REAL, VOCAB = 64, 40, 200
CHOSEN = [5, 9, 14, 20, 27, 33]  # round(40 real tokens x 0.15) = 6 predictions
KEPT = 33  # its keep draw is >= 0.85: shown to the generator unmasked


def tiny(**overrides):
    return ElectraConfig.preset("tiny", vocab_size=VOCAB, **SPECIAL, **overrides)


def hand_made_batch(model):
    ids = np.zeros((1, SEQ), np.int32)
    ids[0, :REAL] = np.arange(REAL) % 150 + 10
    ids[0, 0], ids[0, REAL - 1] = 2, 3  # [CLS] ... [SEP]
    n = model.config.max_predictions_per_seq
    noise = np.full((1, model.noise_width), 0.1, np.float32)
    noise[0, :SEQ] = 0.0
    noise[0, CHOSEN] = np.linspace(0.9, 0.8, len(CHOSEN))  # the top scores, in slot order
    noise[0, SEQ + CHOSEN.index(KEPT)] = 0.95
    noise[0, SEQ + n:] = np.linspace(0.05, 0.95, n)  # the generator's sample draws
    mask = (ids != 0).astype(np.int32)
    return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": np.zeros_like(ids),
            "noise": noise}


def forward(objective, **overrides):
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(tiny(objective=objective, **overrides))
    model.build_all()
    batch = hand_made_batch(model)
    outputs = {k: v.numpy() if hasattr(v, "numpy") else v
               for k, v in model(batch, training=False).items()}
    losses = {k: float(v) for k, v in model.compute_losses(outputs).items()}
    return model, batch, outputs, losses


def bce(logits, labels):
    return np.maximum(logits, 0) - logits * labels + np.log1p(np.exp(-np.abs(logits)))


def log_softmax(logits):
    shifted = logits - logits.max(-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def cross_entropy(logits, labels):
    return -np.take_along_axis(log_softmax(logits), labels[..., None], -1)[..., 0]


def chosen_indicator():
    indicator = np.zeros(SEQ, np.int32)
    indicator[CHOSEN] = 1
    return indicator


def test_hand_made_noise_chooses_the_intended_positions():
    _, batch, outputs, _ = forward("mlm")
    weights = outputs["mlm_weights"][0]
    assert weights.sum() == len(CHOSEN)
    labels = outputs["mlm_labels"][0][:len(CHOSEN)]
    assert labels.tolist() == batch["input_word_ids"][0][CHOSEN].tolist()


def test_electra_scores_every_real_token_against_replaced_labels():
    model, batch, outputs, losses = forward("electra")
    ids, real = batch["input_word_ids"][0], batch["input_mask"][0]
    corrupted, replaced = outputs["encoder_ids"][0], outputs["replaced"][0]
    changed = corrupted != ids
    assert set(np.flatnonzero(changed)) <= set(CHOSEN)  # samples land at chosen positions
    np.testing.assert_array_equal(replaced, changed.astype(int))  # same sample = original
    np.testing.assert_array_equal(outputs["disc_weights"][0], real)
    expected = bce(outputs["disc_logits"][0], replaced)[real == 1].mean()
    np.testing.assert_allclose(losses["disc_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(losses["loss"], losses["mlm_loss"] + 50 * expected, rtol=1e-5)


def test_electra_15_scores_only_the_chosen_positions():
    _, _, outputs, losses = forward("electra_15")
    np.testing.assert_array_equal(outputs["disc_weights"][0], chosen_indicator())
    expected = bce(outputs["disc_logits"][0], outputs["replaced"][0])[CHOSEN].mean()
    np.testing.assert_allclose(losses["disc_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(losses["loss"], losses["mlm_loss"] + 50 * expected, rtol=1e-5)


def test_mlm_is_bert_on_the_kept_encoder_with_no_generator():
    model, batch, outputs, losses = forward("mlm")
    assert model.generator is None and model.head_names == ["mlm_head"]
    assert set(losses) == {"loss", "main_loss"}
    ids, seen = batch["input_word_ids"][0], outputs["encoder_ids"][0]
    masked = [p for p in CHOSEN if p != KEPT]
    assert (seen[masked] == SPECIAL["mask_token_id"]).all()
    assert seen[KEPT] == ids[KEPT]
    others = np.setdiff1d(np.arange(SEQ), masked)
    np.testing.assert_array_equal(seen[others], ids[others])
    # Output layer tied to the encoder's word embeddings.
    assert model.mlm_head.token_embedding is model.discriminator.embeddings.token_embedding
    used_slots = outputs["main_logits"][0][:len(CHOSEN)]  # slots follow the scores' order
    expected = cross_entropy(used_slots, ids[CHOSEN]).mean()
    np.testing.assert_allclose(losses["main_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(losses["loss"], expected, rtol=1e-5)


def test_replace_mlm_predicts_the_originals_from_generator_samples():
    _, batch, outputs, losses = forward("replace_mlm")
    ids, seen = batch["input_word_ids"][0], outputs["encoder_ids"][0]
    assert SPECIAL["mask_token_id"] not in seen[CHOSEN]  # samples, not [MASK]
    assert (seen[CHOSEN] != ids[CHOSEN]).any()
    others = np.setdiff1d(np.arange(SEQ), CHOSEN)
    np.testing.assert_array_equal(seen[others], ids[others])
    used_slots = outputs["main_logits"][0][:len(CHOSEN)]  # slots follow the scores' order
    expected = cross_entropy(used_slots, ids[CHOSEN]).mean()
    np.testing.assert_allclose(losses["main_loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(losses["loss"], losses["mlm_loss"] + expected, rtol=1e-5)


def test_all_tokens_mlm_predicts_every_real_token_with_a_copy_gate():
    _, batch, outputs, losses = forward("all_tokens_mlm")
    ids, seen, real = batch["input_word_ids"][0], outputs["encoder_ids"][0], batch["input_mask"][0]
    logits, gate = outputs["main_logits"][0], 1 / (1 + np.exp(-outputs["copy_logits"][0]))
    assert logits.shape == (SEQ, VOCAB)
    softmax = np.exp(log_softmax(logits))[np.arange(SEQ), ids]
    probability = (1 - gate) * softmax + gate * (seen == ids)
    expected = -np.log(probability)[real == 1].mean()
    np.testing.assert_allclose(losses["main_loss"], expected, rtol=1e-4)
    np.testing.assert_allclose(losses["loss"], losses["mlm_loss"] + expected, rtol=1e-5)


def test_uniform_generator_learns_nothing_and_samples_the_whole_vocab():
    model = ElectraPretrainer(tiny(generator="uniform"))
    model.build_all()
    assert model.generator is None and model.generator_head is None
    batch = hand_made_batch(model)
    # Many copies of the sequence with fresh sample draws: the samples cover the vocab.
    draws = np.random.default_rng(0).random((256, model.noise_width)).astype(np.float32)
    masking = SEQ + model.config.max_predictions_per_seq  # scores and keep draws
    draws[:, :masking] = batch["noise"][0, :masking]
    many = {k: np.repeat(v, 256, 0) for k, v in batch.items() if k != "noise"}
    outputs = model({**many, "noise": draws}, training=False)
    samples = outputs["encoder_ids"].numpy()[:, CHOSEN].ravel()
    assert len(np.unique(samples)) > 0.9 * VOCAB
    assert set(model.compute_losses(outputs)) == {"loss", "disc_loss"}


def test_tie_embeddings_token_shares_the_word_matrix_only():
    model = ElectraPretrainer(tiny(tie_embeddings="token"))
    model.build_all()
    gen, disc = model.generator.embeddings, model.discriminator.embeddings
    assert gen is not disc and gen.token_embedding is disc.token_embedding
    assert gen.position_embedding is not disc.position_embedding
    assert gen.layer_norm is not disc.layer_norm
    assert model.generator_head.token_embedding is disc.token_embedding
    ids = [id(v) for v in model.trainable_variables]
    assert len(ids) == len(set(ids))  # the shared matrix is one variable
    # The word matrix gets gradient from both towers' losses.
    batch = hand_made_batch(model)
    with tf.GradientTape(persistent=True) as tape:
        losses = model.compute_losses(model(batch, training=True))
    words = disc.token_embedding.embeddings
    assert tape.gradient(losses["mlm_loss"], words) is not None
    assert tape.gradient(losses["disc_loss"], words) is not None
    assert tape.gradient(losses["mlm_loss"], disc.position_embedding.position_embeddings) is None


@pytest.mark.parametrize("overrides, message", [
    (dict(objective="bert"), "objective="),
    (dict(generator="gaussian"), "generator="),
    (dict(objective="mlm", generator="uniform"), "has no generator"),
    (dict(tie_embeddings="some"), "tie_embeddings="),
])
def test_bad_ablation_settings_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        ElectraPretrainer(tiny(**overrides))


def test_gdes_trains_the_shared_matrix_by_mlm_and_its_delta_by_rtd_only():
    """DeBERTa-v3's gradient-disentangled embedding sharing: the discriminator reads
    stop_gradient(E) + delta; MLM trains E, the discriminator's loss only delta."""
    keras.utils.set_random_seed(3)
    model = ElectraPretrainer(tiny(tie_embeddings="gdes"))
    model.build_all()
    gen, disc = model.generator.embeddings, model.discriminator.embeddings
    assert gen.token_embedding is disc.token_embedding and gen is not disc
    words, delta = disc.token_embedding.embeddings, disc.token_delta
    batch = hand_made_batch(model)
    with tf.GradientTape(persistent=True) as tape:
        losses = model.compute_losses(model(batch, training=True))
    assert np.abs(tape.gradient(losses["mlm_loss"], words)).sum() > 0
    assert tape.gradient(losses["mlm_loss"], delta) is None
    assert tape.gradient(losses["disc_loss"], words) is None
    assert np.abs(tape.gradient(losses["disc_loss"], delta)).sum() > 0

    # At step 0 (delta = 0) the discriminator is the "token" model of the same seed.
    keras.utils.set_random_seed(3)
    token = ElectraPretrainer(tiny(tie_embeddings="token"))
    token.build_all()
    inputs = {k: v for k, v in batch.items() if k != "noise"}
    np.testing.assert_array_equal(model.discriminator(inputs)["sequence_output"],
                                  token.discriminator(inputs)["sequence_output"])


def test_a_gdes_run_gives_the_summed_word_matrix_to_everything_downstream(tmp_path, shards,
                                                                         vocab_path):
    """Export, fine-tuning and conversion restore the discriminator alone: its word matrix
    must be E + delta; the Hugging Face generator keeps E."""
    import torch
    import transformers

    from electra_tf.convert import api
    from electra_tf.convert.weights import load_run
    from electra_tf.runs import pretrain as pretrain_run
    from electra_tf import run_dir

    inputs = pretrain_run.RunInputs(model_dir=str(tmp_path / "run"), data=shards[0],
                                    vocab=vocab_path)
    config = ElectraConfig.preset("tiny", train_steps=3, batch_size=8, checkpoint_every=3,
                                  tie_embeddings="gdes")
    config, pattern = pretrain_run.prepare_run(config, inputs)
    pretrain_run.train(config, inputs.model_dir, pattern, eval_batches=0, verbose=0)
    parts, pretrained = load_run(inputs.model_dir)  # the whole pretrainer, restored
    shared = parts.generator.embeddings.token_embedding.embeddings.numpy()
    delta = parts.discriminator.embeddings.token_delta.numpy()
    assert np.abs(delta).max() > 0  # trained by the discriminator's loss

    encoder = run_dir.load_encoder(pretrained, config, dropout=0.0)
    assert not encoder.embeddings.gradient_disentangled
    np.testing.assert_allclose(encoder.embeddings.token_embedding.embeddings.numpy(),
                               shared + delta, rtol=0, atol=1e-7)
    ids = np.array([[2, 20, 21, 22, 3]], np.int32)
    batch = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids)}
    np.testing.assert_allclose(encoder(batch)["sequence_output"],
                               parts.discriminator(batch)["sequence_output"], atol=1e-5)

    api.to_huggingface(inputs.model_dir, str(tmp_path / "hf"))
    disc = transformers.ElectraForPreTraining.from_pretrained(tmp_path / "hf").eval()
    gen = transformers.ElectraForMaskedLM.from_pretrained(tmp_path / "hf" / "generator")
    np.testing.assert_allclose(
        disc.electra.embeddings.word_embeddings.weight.detach().numpy(), shared + delta,
        atol=1e-7)
    np.testing.assert_allclose(
        gen.electra.embeddings.word_embeddings.weight.detach().numpy(), shared, atol=0)
    with torch.no_grad():
        logits = disc(input_ids=torch.tensor(ids),
                      attention_mask=torch.ones(ids.shape, dtype=torch.long)).logits.numpy()
    ours = parts.discriminator_head(parts.discriminator(batch)["sequence_output"])
    np.testing.assert_allclose(logits, np.reshape(ours, logits.shape), atol=1e-4)
    with pytest.raises(ConfigError, match="cannot hold its generator's own embeddings"):
        api.to_official(inputs.model_dir, str(tmp_path / "tf1" / "model.ckpt"))
