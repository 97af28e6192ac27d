"""A pretraining run as a user runs it: the command end to end and resumed, kill -9, SIGTERM,
one-line errors; refusals and FLOPs budgets through the library the command calls."""

import glob
import json
import os
import signal
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, TENSORFLOW_LOG_LINE, run_command, start_command, traces
from electra_tf import run_dir
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError, CorpusError, UserError, VocabError
from electra_tf.runs import pretrain as run

TINY = ["--preset", "tiny", "--batch_size", "8", "--eval_batches", "2"]


def steps_of(model_dir):
    return sorted(int(p.rsplit("-", 1)[1].split(".")[0])
                  for p in glob.glob(os.path.join(model_dir, "checkpoints", "ckpt-*.index")))


def tiny(**overrides):
    return ElectraConfig.preset("tiny", batch_size=8, **overrides)


def test_corpus_to_run_directory_and_resume(tmp_path, small_corpus, capsys):
    model_dir = str(tmp_path / "run")
    corpus = ",".join(small_corpus.split(",")[:2])
    first = run_command("python", "pretrain.py", "--corpus", corpus, "--model_dir", model_dir,
                        "--vocab_size", "800", "--checkpoint_every", "5", "--train_steps", "10",
                        "--nofused_gelu", *TINY, cwd=ROOT, env={"TF_CPP_MIN_LOG_LEVEL": None})
    assert "Run directory:" in first.stdout and "discriminator AUC" in first.stdout
    # Output to a file: a line per checkpoint interval, headed by its steps, no bar codes.
    assert "Steps 0-5 of 10" in first.stdout and "Steps 5-10 of 10" in first.stdout
    assert "Epoch 1/" not in first.stdout and "\x1b[" not in first.stdout
    # Quiet: no TensorFlow C++ start-up lines (oneDNN, GPU probing) without --verbose.
    assert not TENSORFLOW_LOG_LINE.search(first.stderr), first.stderr
    config = json.load(open(os.path.join(model_dir, "config.json")))
    vocab = open(os.path.join(model_dir, "vocab.txt")).read().split("\n")
    assert config["vocab_size"] == len([t for t in vocab if t]) <= 800
    assert config["cls_token_id"] == vocab.index("[CLS]")
    assert config["preset_name"] == "tiny"
    assert steps_of(model_dir) == [5, 10]
    assert glob.glob(os.path.join(model_dir, "logs", "train", "events.out.tfevents*"))
    results = json.load(open(os.path.join(model_dir, "pretrain_results.json")))
    assert results["step"] == 10 and set(results["eval"]) >= {"disc_auc", "gen_acc"}

    # The same command with more steps resumes (here in-process, as the command calls it,
    # and with the fused GELU: the activation holds no weights).
    config, pattern = run.prepare_run(
        ElectraConfig.preset("tiny", batch_size=8, train_steps=15, checkpoint_every=5),
        run.RunInputs(model_dir=model_dir, corpus=corpus, vocab_size=800))
    sigterm_handler = signal.getsignal(signal.SIGTERM)
    run.train(config, model_dir, pattern, eval_batches=0, verbose=0)
    # TensorFlow's preemption handler is gone: what runs next can be stopped by SIGTERM.
    assert signal.getsignal(signal.SIGTERM) is sigterm_handler
    printed = capsys.readouterr().out
    assert "at step 10" in printed
    assert "Learning a WordPiece" not in printed and "Built" not in printed
    assert steps_of(model_dir)[-1] == 15


def test_the_run_checkpoint_restores_the_discriminator_alone(pretrained_dir):
    checkpoint = run_dir.latest_checkpoint(pretrained_dir)
    config = run_dir.read_config(pretrained_dir)
    encoder = run_dir.build_encoder(config, dropout=0.0)
    run_dir.restore_discriminator(encoder, checkpoint)
    full, _ = run.build_model(config)
    run_dir.pretraining_checkpoint(full).restore(checkpoint).expect_partial()
    inputs = {"input_word_ids": np.full((1, 8), 7, np.int32),
              "input_mask": np.ones((1, 8), np.int32),
              "input_type_ids": np.zeros((1, 8), np.int32)}
    np.testing.assert_allclose(encoder(inputs)["sequence_output"],
                               full.discriminator(inputs)["sequence_output"], atol=1e-6)
    assert not any("generator" in v.path for v in encoder.weights)
    assert any("generator" in v.path for v in full.weights)


def start_training(shards, vocab_path, model_dir):
    # A killed process leaves TensorFlow's temporary files (autograph's generated modules):
    # in the test's directory, not the machine's.
    temporary = os.path.join(os.path.dirname(model_dir), "tmp")
    os.makedirs(temporary, exist_ok=True)
    return start_command(
        "electra-pretrain", "--data", shards[0], "--vocab", vocab_path, "--model_dir",
        model_dir, "--max_seq_length", "64", "--checkpoint_every", "7",
        "--train_steps", "100000", *TINY, env={"TMPDIR": temporary})


def recorded_step(model_dir):
    """The step of the newest checkpoint the run has recorded (TensorFlow's checkpoint state
    file lists a checkpoint after writing its files), or 0."""
    latest = run_dir.latest_checkpoint(model_dir)
    return int(latest.rsplit("-", 1)[1]) if latest else 0


def wait_for_a_checkpoint_after(model_dir, step):
    deadline = time.time() + 240
    while time.time() < deadline and recorded_step(model_dir) <= step:
        time.sleep(0.2)


def test_interrupted_runs_resume_losing_only_unsaved_steps(tmp_path, shards, vocab_path,
                                                           capsys):
    """SIGTERM saves the current step and exits 143; kill -9 loses only the steps since the
    last checkpoint; the same command resumes at the saved step each time."""
    model_dir = str(tmp_path / "run")
    process = start_training(shards, vocab_path, model_dir)
    wait_for_a_checkpoint_after(model_dir, 0)
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

    process = start_training(shards, vocab_path, model_dir)
    wait_for_a_checkpoint_after(model_dir, stopped_at)
    process.send_signal(signal.SIGKILL)
    output = process.communicate(timeout=120)[0]
    assert f"at step {stopped_at}" in output
    # Killed after a recorded checkpoint, perhaps while writing a later one: TensorFlow lists
    # a checkpoint in its state file after writing its files, and resuming starts from the
    # newest listed.
    resumable = recorded_step(model_dir)
    assert resumable > stopped_at, "no checkpoint was recorded before the kill"
    saved = steps_of(model_dir)

    config = run_dir.read_config(model_dir)
    model, optimizer = run.build_model(config)
    for step in saved:  # every checkpoint restores whole, optimizer included
        run_dir.pretraining_checkpoint(model, optimizer).restore(os.path.join(
            model_dir, "checkpoints", f"ckpt-{step}")).assert_existing_objects_matched()
        assert int(optimizer.iterations.numpy()) == step

    config, pattern = run.prepare_run(
        tiny(max_seq_length=64, train_steps=resumable + 2, checkpoint_every=7),
        run.RunInputs(model_dir=model_dir, data=shards[0], vocab=vocab_path))
    run.train(config, model_dir, pattern, eval_batches=0, verbose=0)
    assert f"at step {resumable}" in capsys.readouterr().out
    assert recorded_step(model_dir) == resumable + 2


def test_a_user_error_is_one_line_and_exit_status_2(tmp_path):
    result = run_command("electra-pretrain", "--model_dir", tmp_path / "run", "--corpus",
                         "/nonexistent/*.txt", *TINY, check=False)
    assert result.returncode == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "matches no file" in errors[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("overrides, inputs, error, message", [
    ({}, dict(corpus="/nonexistent/*.txt"), CorpusError, "matches no file"),
    (dict(max_seq_length=1024), dict(corpus="{corpus}"), ConfigError,
     "max_position_embeddings"),
    ({}, dict(data="{data}"), ConfigError, "--data needs the vocab"),
    ({}, dict(corpus="{corpus}", vocab="{bad_vocab}"), VocabError, "lacks the special token"),
    ({}, {}, ConfigError, "Give the text to pretrain on"),
])
def test_bad_input_is_refused_before_training(tmp_path, small_corpus, shards, overrides,
                                              inputs, error, message):
    bad_vocab = tmp_path / "vocab.txt"
    bad_vocab.write_text("[PAD]\nhello\n")
    values = {k: v.format(corpus=small_corpus, data=shards[0], bad_vocab=bad_vocab)
              for k, v in inputs.items()}
    with pytest.raises(error, match=message) as raised:
        run.prepare_run(tiny().replace(**overrides) if overrides else tiny(),
                        run.RunInputs(model_dir=str(tmp_path / "run"), **values))
    assert isinstance(raised.value, UserError)


def test_resuming_with_other_settings_is_refused(tmp_path, shards, vocab_path, small_corpus):
    model_dir = str(tmp_path / "run")
    inputs = run.RunInputs(model_dir=model_dir, data=shards[0], vocab=vocab_path)
    run.prepare_run(tiny(max_seq_length=64), inputs)
    # Training longer (or checkpointing more often) resumes; the architecture may not change.
    run.prepare_run(tiny(max_seq_length=64, train_steps=900, checkpoint_every=3), inputs)
    with pytest.raises(ConfigError, match=r"different config \(hidden_size: run has 64, "
                                          r"requested 32\)"):
        run.prepare_run(tiny(max_seq_length=64, hidden_size=32), inputs)

    other_vocab = tmp_path / "other_vocab.txt"
    other_vocab.write_text(open(vocab_path).read() + "extra\n")
    with pytest.raises(ConfigError, match="different vocab"):
        run.prepare_run(tiny(max_seq_length=64), run.RunInputs(
            model_dir=model_dir, data=shards[0], vocab=str(other_vocab)))


def test_a_warmup_longer_than_the_run_is_warned_about(tmp_path, shards, vocab_path, capsys):
    inputs = run.RunInputs(model_dir=str(tmp_path / "run"), data=shards[0], vocab=vocab_path)
    run.prepare_run(tiny(max_seq_length=64, train_steps=5, warmup_steps=10000), inputs)
    assert ("warning: --warmup_steps=10000 >= --train_steps=5: the learning rate never "
            "leaves its warmup (it stays below 0.05% of --learning_rate)"
            ) in capsys.readouterr().err
    run.prepare_run(tiny(max_seq_length=64, train_steps=50, warmup_steps=10), run.RunInputs(
        model_dir=str(tmp_path / "other"), data=shards[0], vocab=vocab_path))
    assert "warning" not in capsys.readouterr().err


def test_shards_are_reused_and_changed_data_options_refused(tmp_path, vocab_path,
                                                            small_corpus, capsys):
    """The shards of --corpus are built once and reused on resume; options that change
    the examples (length, casing, seed) are config fields, refused on resume."""
    model_dir = str(tmp_path / "run")
    corpus = small_corpus.split(",")[0]
    inputs = run.RunInputs(model_dir=model_dir, corpus=corpus, vocab=vocab_path)
    run.prepare_run(tiny(max_seq_length=64), inputs)
    assert "Built" in capsys.readouterr().out
    manifest = json.load(open(os.path.join(model_dir, "pretrain_data", "manifest.json")))
    run.prepare_run(tiny(max_seq_length=64), inputs)
    assert "Built" not in capsys.readouterr().out  # reused
    for changed in (dict(seed=5), dict(lower_case=False, strip_accents=False),
                    dict(max_seq_length=32)):
        with pytest.raises(ConfigError, match=f"different config.*{next(iter(changed))}"):
            run.prepare_run(tiny(**{"max_seq_length": 64, **changed}), inputs)
    assert json.load(open(os.path.join(model_dir, "pretrain_data",
                                       "manifest.json"))) == manifest


class KernelTraces(keras.callbacks.Callback):
    """At the end of training, how often the layer norms' and the cross-entropy's XLA
    kernels were traced (once per input shape)."""

    @staticmethod
    def count():
        from electra_tf.layers import fused_layer_normalization
        from electra_tf.pretraining import losses

        return traces(fused_layer_normalization._forward, losses._cross_entropy_forward)

    def on_train_end(self, logs=None):
        self.traces = self.count()


def test_a_flops_budget_sets_the_steps_and_the_run_records_its_flops(tmp_path, shards,
                                                                       vocab_path, capsys):
    from electra_tf.pretraining.flops import training_flops_per_step

    model_dir = str(tmp_path / "bert")
    vocab_size = len(open(vocab_path).read().split())
    config = tiny(objective="mlm", vocab_size=vocab_size)
    per_step = training_flops_per_step(config)
    config, pattern = run.prepare_run(
        tiny(objective="mlm"), run.RunInputs(model_dir=model_dir, data=shards[0],
                                             vocab=vocab_path), train_flops=7.5 * per_step)
    after_training = KernelTraces()
    results = run.train(config, model_dir, pattern, eval_batches=1, verbose=0,
                        extra_callbacks=[after_training])
    # The evaluation's batches are shaped as training's: it calls the XLA kernels training
    # traced and compiled instead of tracing and compiling them again.
    assert KernelTraces.count() == after_training.traces
    run.print_summary(model_dir, results)
    printed = capsys.readouterr().out
    assert "encoder MLM accuracy" in printed and "discriminator AUC" not in printed
    saved = json.load(open(os.path.join(model_dir, "pretrain_results.json")))
    assert saved["step"] == config.train_steps == 7 and saved["objective"] == "mlm"
    assert saved["train_flops"] == 7 * per_step == 7 * saved["flops_per_step"]
    logged = {}
    for path in glob.glob(os.path.join(model_dir, "logs", "train", "events.out.tfevents*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "train_flops":
                    logged[event.step] = float(tf.make_ndarray(value.tensor))
    assert logged[7] == pytest.approx(7 * per_step, rel=1e-6)
    assert logged[3] == pytest.approx(3 * per_step, rel=1e-6)
    # Whatever the objective, the run's encoder is the checkpoint's `discriminator`.
    encoder = run_dir.build_encoder(run_dir.read_config(model_dir), dropout=0.0)
    run_dir.restore_discriminator(encoder, saved["checkpoint"])


def test_a_diverging_run_keeps_its_last_good_checkpoint_and_resumes_on_schedule(
        tmp_path, shards, vocab_path):
    """A NaN loss stops the run before any save and is one line naming the step; rerun with
    a lower learning rate, it resumes from the checkpoint before, and its first step takes
    the schedule's rate at that step (not the warmup's start again)."""
    import hashlib

    import keras

    from electra_tf.training import callbacks

    class FirstRate(keras.callbacks.Callback):
        rate = None

        def on_train_batch_begin(self, batch, logs=None):
            if self.rate is None:
                optimizer = self.model.optimizer
                self.rate = (int(optimizer.iterations.numpy()), float(optimizer.learning_rate))

    model_dir = str(tmp_path / "run")
    inputs = run.RunInputs(model_dir=model_dir, data=shards[0], vocab=vocab_path)
    recipe = dict(max_seq_length=64, train_steps=20, warmup_steps=10, checkpoint_every=4)

    def train(learning_rate, stop_at, *extra):
        config, pattern = run.prepare_run(tiny(learning_rate=learning_rate, **recipe), inputs)
        return run.train(config, model_dir, pattern, eval_batches=0, verbose=0,
                         extra_callbacks=[callbacks.StopAtStep(stop_at), *extra])

    train(1e-3, 4)
    saved = {p: hashlib.sha256(open(p, "rb").read()).hexdigest()
             for p in glob.glob(os.path.join(model_dir, "checkpoints", "*"))}
    with pytest.raises(callbacks.NonFiniteLoss,
                       match=r"NaN or infinite at step [56]; the last good checkpoint "
                             r".*ckpt-4 is kept\. Run the same command with a lower"):
        train(1e30, 8)  # every weight thrown to ~1e29: the next forward pass overflows
    assert {p: hashlib.sha256(open(p, "rb").read()).hexdigest()
            for p in glob.glob(os.path.join(model_dir, "checkpoints", "*"))} == saved
    first = FirstRate()
    results = train(1e-3, 6, first)
    assert results["step"] == 6 and steps_of(model_dir) == [4, 6]
    # The official schedule at step 4: linear decay over 20 steps times a 10-step warmup
    # ramp, 1e-3 x (1 - 4/20) x 4/10 (restarted, it would be 0).
    assert first.rate[0] == 4 and first.rate[1] == pytest.approx(3.2e-4)
    assert np.isfinite(results["train_history"]["loss"]).all()
