"""A new pretraining run started from a released or converted model (`--init_checkpoint`):
it takes the model's architecture, vocab and both towers, a fresh optimizer, any recipe;
resumes as any run; and on a real ELECTRA (`electra-small-ref`) it keeps what the model
learned, measured against Hugging Face torch on the same batches."""

import glob
import json
import os

import numpy as np
import pytest

import convert_fixtures as fx
from conftest import REFERENCE_MODEL, SMALL_CORPUS, run_app
from electra_tf import run_dir
from electra_tf.config import ElectraConfig
from electra_tf.convert import api, weights
from electra_tf.errors import ConfigError
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.runs import pretrain as run

SPEECH = SMALL_CORPUS.split(",")[0]


def steps_of(model_dir):
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                  for p in glob.glob(os.path.join(model_dir, "checkpoints", "ckpt-*.index")))


def start(model_dir, init, name="released-tiny", corpus=SPEECH, **recipe):
    recipe = {"batch_size": 4, "max_seq_length": 32, "train_steps": 1, "warmup_steps": 1,
              "checkpoint_every": 1, "learning_rate": 1e-3, **recipe}
    config, pattern = run.prepare_run(
        ElectraConfig.preset("tiny", **recipe),
        run.RunInputs(model_dir=str(model_dir), corpus=corpus, init_checkpoint=init,
                      init_name=name))
    run.train(config, str(model_dir), pattern, eval_batches=0, verbose=0)
    return config


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Tiny Hugging Face models converted twice: with the generator, and the
    discriminator alone."""
    root = tmp_path_factory.mktemp("converted")
    disc, gen = fx.save_hf(fx.random_hf_models("tiny", seed=7), root / "hf")
    api.from_huggingface(disc, str(root / "both"), gen)
    api.from_huggingface(disc, str(root / "disc"))
    return root


def test_a_run_starts_from_both_towers_of_a_model_and_resumes_as_any_run(converted, tmp_path,
                                                                      capsys):
    source, model_dir = str(converted / "both"), tmp_path / "continued"
    # The official schedule's first step has a learning rate of 0 (the warmup ramp starts
    # at 0): the first checkpoint holds the source's weights.
    config = start(model_dir, source)
    initial = run_dir.read_config(source)
    for field in ("hidden_size", "num_layers", "embedding_size", "vocab_size", "lower_case",
                  "generator_size", "tie_embeddings"):
        assert getattr(config, field) == getattr(initial, field), field
    assert config.max_seq_length == 32 and config.batch_size == 4  # the recipe is free
    assert open(model_dir / "vocab.txt").read() == open(converted / "both" / "vocab.txt").read()
    fx.assert_same_weights(source, model_dir)  # generator, head and encoder alike
    printed = capsys.readouterr()
    assert "Starting from the weights of released-tiny" in printed.out
    assert "gives no" not in printed.err  # both towers and the head came from the model
    assert json.load(open(model_dir / "init_checkpoint.json"))["init_checkpoint"] == (
        "released-tiny")

    start(model_dir, source, train_steps=3)  # the same command, resumed
    printed = capsys.readouterr().out
    assert "at step 1" in printed and "Starting from" not in printed
    assert steps_of(model_dir) == [1, 2, 3]
    before, after = (weights.read_run(p)[2] for p in (source, str(model_dir)))
    assert not np.array_equal(before["electra/encoder/layer_0/output/dense/kernel"],
                              after["electra/encoder/layer_0/output/dense/kernel"])

    with pytest.raises(ConfigError, match="holds a run started from released-tiny"):
        start(model_dir, source, name="another-model", train_steps=3)
    with pytest.raises(ConfigError, match="resume it with --init_checkpoint released-tiny"):
        config, _ = run.prepare_run(ElectraConfig.preset("tiny"), run.RunInputs(
            model_dir=str(model_dir), corpus=SPEECH))
    with pytest.raises(ConfigError, match="brings its model's vocab: drop --vocab"):
        run.prepare_run(ElectraConfig.preset("tiny"), run.RunInputs(
            model_dir=str(tmp_path / "x"), corpus=SPEECH, init_checkpoint=source,
            vocab=str(converted / "both" / "vocab.txt")))


def test_a_model_without_a_generator_gets_a_fresh_one_with_a_warning(converted, tmp_path,
                                                                    capsys):
    model_dir = tmp_path / "continued"
    config = start(model_dir, str(converted / "disc"))
    assert "gives no generator" in capsys.readouterr().err
    assert config.generator_size == ElectraConfig.preset("tiny").generator_size
    model = ElectraPretrainer.from_pretrained(str(model_dir))
    source = run_dir.open_pretrained(str(converted / "disc"))
    encoder = run_dir.load_encoder(source, source.config, 0.0)
    for ours, theirs in zip(model.discriminator.weights, encoder.weights):
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())


def test_the_command_refuses_flags_that_change_the_model_it_brings(converted, tmp_path):
    source = str(converted / "both")
    runs = run_app("electra_tf_cli.pretrain",
                   ["--init_checkpoint", source, "--corpus", SPEECH, "--model_dir",
                    tmp_path / "a", "--hidden_size", "64", "--vocab_size", "100"],
                   ["--init_checkpoint", source, "--corpus", SPEECH, "--model_dir",
                    tmp_path / "b", "--train_steps", "2", "--batch_size", "4",
                    "--max_seq_length", "32", "--warmup_steps", "1", "--eval_batches", "0"])
    assert runs[0]["code"] == 2, runs[0]
    assert "brings its model's hidden_size, vocab_size: drop --hidden_size, --vocab_size" in (
        runs[0]["stderr"])
    assert runs[1]["code"] == 0, runs[1]["stderr"][-3000:]
    assert "not evaluated (--eval_batches 0)" in runs[1]["stdout"]
    # With no --preset the recipe is the one of the model's size (this one has none of the
    # presets' sizes: small's recipe, whose checkpoint_every is 1000).
    config = run_dir.read_config(str(tmp_path / "b"))
    assert config.preset_name is None and config.checkpoint_every == 1000
    assert config.hidden_size == run_dir.read_config(source).hidden_size
    assert steps_of(tmp_path / "b") == [2]


# ----------------------------------------------------------------------------- real model
def _auc(scores, labels) -> float:
    """Area under the ROC curve: P(score of a positive > score of a negative)."""
    order = np.argsort(scores, kind="stable")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    positives = labels.astype(bool)
    n_pos, n_neg = positives.sum(), (~positives).sum()
    return (ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _eval_batches(vocab_path, directory, seed=0):
    """Masked and replaced batches of held-out text for the replaced-token-detection
    metrics, as numpy: the inputs, the masked inputs, and draws for the samples."""
    from electra_tf.data import build_pretraining_data as builder
    from electra_tf.data.dataset import pretraining_dataset
    from electra_tf.pretraining.masking import mask_tokens

    held_out = SMALL_CORPUS.split(",")[3]
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=128)
    builder.build_pretraining_data(held_out, directory, options, num_shards=1,
                                   show_progress=False)
    pattern = builder.load_manifest(directory)["file_pattern"]
    batch = next(iter(pretraining_dataset(pattern, 32, 128, training=False)))
    size = batch["input_word_ids"].shape[0]
    rng = np.random.default_rng(seed)
    masked = mask_tokens(batch["input_word_ids"], batch["input_mask"], mask_prob=0.15,
                         max_predictions=19, mask_token_id=4, special_token_ids=(0, 2, 3, 4),
                         position_scores=rng.random((size, 128)),
                         keep_draws=rng.random((size, 19)))
    return ({k: v.numpy() for k, v in batch.items()}, {k: v.numpy() for k, v in masked.items()},
            rng.random((size, 19, 16384)))


def test_continued_pretraining_of_a_real_electra_keeps_what_it_learned(reference_run, tmp_path):
    """Six steps at a small learning rate on bundled text: generator accuracy and
    discriminator AUC on held-out text stay where Hugging Face torch measures them for the
    released weights (no collapse, no reset to chance: a schedule or a restore gone wrong
    shows within the first steps)."""
    import torch
    import transformers

    model_dir = str(tmp_path / "continued")
    config, pattern = run.prepare_run(
        ElectraConfig.preset("small", batch_size=8, max_seq_length=64, train_steps=6,
                             learning_rate=2e-5, warmup_steps=2, checkpoint_every=6),
        run.RunInputs(model_dir=model_dir, corpus=",".join(SMALL_CORPUS.split(",")[:2]),
                      init_checkpoint=reference_run, init_name="electra-small-ref"))
    # Scored below against Hugging Face, not by the run's own evaluation.
    results = run.train(config, model_dir, pattern, eval_batches=0, verbose=0)
    assert results["step"] == 6 and results["eval"] == {}

    batch, masked, draws = _eval_batches(os.path.join(model_dir, "vocab.txt"),
                                         str(tmp_path / "held_out"))
    real = batch["input_mask"] > 0
    used = masked["weights"] > 0
    segments = batch["input_type_ids"]

    def torch_inputs(ids):
        return dict(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(batch["input_mask"], dtype=torch.long),
                    token_type_ids=torch.tensor(segments, dtype=torch.long))

    hf_generator = transformers.ElectraForMaskedLM.from_pretrained(
        REFERENCE_MODEL / "generator").eval()
    hf_discriminator = transformers.ElectraForPreTraining.from_pretrained(
        REFERENCE_MODEL / "discriminator").eval()
    with torch.no_grad():
        logits = hf_generator(**torch_inputs(masked["masked_ids"])).logits.numpy()
    logits = np.take_along_axis(logits, masked["positions"][..., None], axis=1)
    # The replaced sequences all are scored on: Hugging Face's generator samples.
    samples = (logits - np.log(-np.log(draws))).argmax(-1)
    corrupted = batch["input_word_ids"].copy()
    rows = np.nonzero(used)
    corrupted[rows[0], masked["positions"][rows]] = samples[rows]
    replaced = (corrupted != batch["input_word_ids"])[real]
    with torch.no_grad():
        hf_scores = hf_discriminator(**torch_inputs(corrupted)).logits.numpy()[real]
    reference = {"gen_acc": (logits.argmax(-1) == masked["labels"])[used].mean(),
                 "disc_auc": _auc(hf_scores, replaced)}

    model = ElectraPretrainer.from_pretrained(model_dir)

    def ours(ids):
        return {"input_word_ids": ids, "input_mask": batch["input_mask"],
                "input_type_ids": segments}

    generated = model.generator(ours(masked["masked_ids"]), training=False)["sequence_output"]
    our_logits = model.generator_head(generated, mask_positions=masked["positions"]).numpy()
    sequence = model.discriminator(ours(corrupted), training=False)["sequence_output"]
    our_scores = np.asarray(model.discriminator_head(sequence)).reshape(corrupted.shape)[real]
    continued = {"gen_acc": (our_logits.argmax(-1) == masked["labels"])[used].mean(),
                 "disc_auc": _auc(our_scores, replaced)}
    print("Hugging Face (released weights):", reference, "ours after 6 steps:", continued,
          "replaced:", replaced.mean())
    assert reference["disc_auc"] > 0.6 and reference["gen_acc"] > 0.1  # a model that learned
    assert continued["disc_auc"] >= reference["disc_auc"] - 0.02
    assert continued["gen_acc"] >= reference["gen_acc"] - 0.03
