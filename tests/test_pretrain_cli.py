"""pretrain.py as a user runs it: end to end, resume, kill -9, and one-line errors."""

import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import ROOT

TINY = ["--preset", "tiny", "--batch_size", "8", "--eval_batches", "2"]


def pretrain(*args, check=True, wait=True):
    command = [sys.executable, str(ROOT / "pretrain.py"), *args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if not wait:
        return subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        pytest.fail(f"pretrain.py failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def steps_of(model_dir):
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                  for p in glob.glob(os.path.join(model_dir, "checkpoints", "ckpt-*.index")))


def test_corpus_to_run_directory_and_resume(tmp_path, small_corpus):
    model_dir = str(tmp_path / "run")
    first = pretrain("--corpus", small_corpus, "--model_dir", model_dir, "--vocab_size", "800",
                     "--train_steps", "20", "--checkpoint_every", "10", *TINY)
    assert "Run directory:" in first.stdout and "discriminator AUC" in first.stdout
    config = json.load(open(os.path.join(model_dir, "config.json")))
    vocab = open(os.path.join(model_dir, "vocab.txt")).read().split("\n")
    assert config["vocab_size"] == len([t for t in vocab if t]) <= 800
    assert config["cls_token_id"] == vocab.index("[CLS]")
    assert steps_of(model_dir) == [10, 20]
    assert glob.glob(os.path.join(model_dir, "logs", "train", "events.out.tfevents*"))
    results = json.load(open(os.path.join(model_dir, "pretrain_results.json")))
    assert results["step"] == 20 and 0 <= results["eval"]["disc_auc"] <= 1

    second = pretrain("--corpus", small_corpus, "--model_dir", model_dir, "--vocab_size",
                      "800", "--train_steps", "30", "--checkpoint_every", "10", *TINY)
    assert "at step 20" in second.stdout
    assert "Learning a WordPiece" not in second.stdout and "Built" not in second.stdout
    assert steps_of(model_dir)[-1] == 30


def test_discriminator_restores_alone_from_a_run(tmp_path, shards, vocab_path):
    import tensorflow as tf

    from electra_tf.config import ElectraConfig
    from electra_tf.layers.encoder import ElectraEncoder
    from electra_tf.run_dir import pretraining_checkpoint, restore_discriminator
    from electra_tf.runs.pretrain import build_model

    model_dir = str(tmp_path / "run")
    pretrain("--data", shards[0], "--vocab", vocab_path, "--model_dir", model_dir,
             "--train_steps", "5", "--max_seq_length", "64", *TINY)
    config = ElectraConfig.load(os.path.join(model_dir, "config.json"))
    checkpoint_path = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    encoder = ElectraEncoder.from_electra_config(config)
    inputs = {"input_word_ids": np.full((1, 8), 7, np.int32),
              "input_mask": np.ones((1, 8), np.int32),
              "input_type_ids": np.zeros((1, 8), np.int32)}
    encoder(inputs)
    restore_discriminator(encoder, checkpoint_path)
    full, _ = build_model(config)
    pretraining_checkpoint(full).restore(checkpoint_path).expect_partial()
    np.testing.assert_allclose(encoder(inputs)["sequence_output"],
                               full.discriminator(inputs)["sequence_output"], atol=1e-6)
    assert not any("generator" in v.path for v in encoder.weights)


def test_sigkill_loses_only_steps_since_the_last_checkpoint(tmp_path, shards, vocab_path):
    model_dir = str(tmp_path / "run")
    args = ["--data", shards[0], "--vocab", vocab_path, "--model_dir", model_dir,
            "--max_seq_length", "64", "--checkpoint_every", "5", *TINY]
    process = pretrain(*args, "--train_steps", "100000", wait=False)
    deadline = time.time() + 240
    while time.time() < deadline and len(steps_of(model_dir)) < 2:
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    saved = steps_of(model_dir)
    assert saved, "no checkpoint was written before the kill"
    resumed = pretrain(*args, "--train_steps", str(saved[-1] + 5))
    assert f"at step {saved[-1]}" in resumed.stdout
    assert steps_of(model_dir)[-1] == saved[-1] + 5


def test_sigterm_saves_the_current_step_and_the_rerun_resumes_there(tmp_path, shards,
                                                                    vocab_path):
    from electra_tf.config import ElectraConfig
    from electra_tf.run_dir import pretraining_checkpoint
    from electra_tf.runs.pretrain import build_model

    model_dir = str(tmp_path / "run")
    args = ["--data", shards[0], "--vocab", vocab_path, "--model_dir", model_dir,
            "--max_seq_length", "64", "--checkpoint_every", "7", *TINY]
    process = pretrain(*args, "--train_steps", "100000", wait=False)
    deadline = time.time() + 240
    while time.time() < deadline and not steps_of(model_dir):
        time.sleep(0.2)
    time.sleep(1.0)  # a few steps past the regular checkpoint
    saved_before_signal = steps_of(model_dir)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=120)[0]
    assert process.returncode == 143, output[-3000:]
    assert "Traceback" not in output
    stopped_at = int(output.split("Stopped by SIGTERM at step ")[1].split(";")[0])
    # Saved at the step it stopped at, past every checkpoint written before the signal (it
    # may also be a multiple of checkpoint_every: then both callbacks save that one step).
    assert steps_of(model_dir)[-1] == stopped_at > saved_before_signal[-1]

    config = ElectraConfig.load(os.path.join(model_dir, "config.json"))
    model, optimizer = build_model(config)
    for step in steps_of(model_dir):  # every checkpoint restores whole, optimizer included
        pretraining_checkpoint(model, optimizer).restore(os.path.join(
            model_dir, "checkpoints", f"ckpt-{step}")).assert_existing_objects_matched()
        assert int(optimizer.iterations.numpy()) == step

    resumed = pretrain(*args, "--train_steps", str(stopped_at + 3))
    assert f"at step {stopped_at}" in resumed.stdout
    assert steps_of(model_dir)[-1] == stopped_at + 3


@pytest.mark.parametrize("extra, message", [
    (["--corpus", "/nonexistent/*.txt"], "matches no file"),
    (["--corpus", "{corpus}", "--max_seq_length", "1024"], "max_position_embeddings"),
    (["--data", "{data}"], "--data needs the vocab"),
    (["--corpus", "{corpus}", "--vocab", "{bad_vocab}"], "lacks the special token"),
    ([], "Give the text to pretrain on"),
])
def test_bad_input_gets_a_one_line_error(tmp_path, small_corpus, shards, extra, message):
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\nhello\n")
    extra = [a.format(corpus=small_corpus, data=shards[0], bad_vocab=bad_vocab) for a in extra]
    result = pretrain("--model_dir", str(tmp_path / "run"), *extra, *TINY, check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


def test_model_dir_with_a_different_config_is_refused(tmp_path, shards, vocab_path):
    model_dir = str(tmp_path / "run")
    common = ["--data", shards[0], "--vocab", vocab_path, "--model_dir", model_dir,
              "--max_seq_length", "64", *TINY]
    pretrain(*common, "--train_steps", "2")
    result = pretrain(*common, "--train_steps", "2", "--hidden_size", "32", check=False)
    assert result.returncode == 2
    assert "different config (hidden_size: run has 64, requested 32)" in result.stderr


def test_a_flops_budget_sets_the_steps_and_the_run_records_its_flops(tmp_path, shards,
                                                                       vocab_path):
    import tensorflow as tf

    from electra_tf.config import ElectraConfig
    from electra_tf.layers.encoder import ElectraEncoder
    from electra_tf.pretraining.flops import training_flops_per_step
    from electra_tf.run_dir import restore_discriminator

    model_dir = str(tmp_path / "bert")
    vocab_size = len(open(vocab_path).read().split())
    config = ElectraConfig.preset("tiny", batch_size=8, objective="mlm", vocab_size=vocab_size)
    per_step = training_flops_per_step(config)
    result = pretrain("--data", shards[0], "--vocab", vocab_path, "--model_dir", model_dir,
                      "--objective", "mlm", "--train_flops", str(7.5 * per_step), *TINY)
    assert "encoder MLM accuracy" in result.stdout and "discriminator AUC" not in result.stdout
    results = json.load(open(os.path.join(model_dir, "pretrain_results.json")))
    assert results["step"] == 7 and results["objective"] == "mlm"
    assert results["train_flops"] == 7 * per_step == 7 * results["flops_per_step"]
    logged = {}
    for path in glob.glob(os.path.join(model_dir, "logs", "train", "events.out.tfevents*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "train_flops":
                    logged[event.step] = float(tf.make_ndarray(value.tensor))
    assert logged[7] == pytest.approx(7 * per_step, rel=1e-6)
    assert logged[3] == pytest.approx(3 * per_step, rel=1e-6)
    # Whatever the objective, the run's encoder is the checkpoint's `discriminator`.
    encoder = ElectraEncoder.from_electra_config(ElectraConfig.load(
        os.path.join(model_dir, "config.json")))
    ids = np.full((1, 8), 7, np.int32)
    encoder({"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids)})
    restore_discriminator(encoder, results["checkpoint"])
