"""The downstream probe: a linear classifier on the discriminator's frozen features, scored
beside a random encoder's, during pretraining."""

import os
import random

import numpy as np
import pytest

from conftest import DEMO, jsonl, novel_or_speech, read_jsonl
from electra_tf.callbacks import (DownstreamProbe, ProbeOptions, ProbeTask, encoder_features,
                                  feature_function, probe_accuracy, random_encoder_accuracy)
from electra_tf.config import ElectraConfig
from electra_tf.errors import TaskDataError


def test_the_probe_tells_a_pretrained_encoder_from_a_random_one(reference_run, tmp_path):
    from electra_tf import ElectraEncoder, ElectraTokenizer
    from electra_tf.run_dir import read_config

    train, dev = novel_or_speech(128, 96)
    task = ProbeTask.read(jsonl(tmp_path / "train.jsonl", train),
                          ElectraTokenizer.from_pretrained(reference_run),
                          jsonl(tmp_path / "dev.jsonl", dev))
    assert task.label_names == ["novel", "speech"]
    pretrained = probe_accuracy(feature_function(ElectraEncoder.from_pretrained(reference_run)),
                                task)
    config = read_config(reference_run)
    state = random.getstate()
    baseline = random_encoder_accuracy(config, task, seed=0)
    assert random.getstate() == state  # the caller's training draws as it would have
    other_random = random_encoder_accuracy(config, task, seed=1)
    print(f"probe: pretrained {pretrained:.3f}, random {baseline:.3f} / {other_random:.3f}")
    assert pretrained >= baseline + 0.1
    assert other_random < baseline + 0.1  # a random encoder does not beat the baseline


def test_a_pretraining_run_probes_on_schedule_and_resumes_its_history(tmp_path, shards,
                                                                      vocab_path):
    from electra_tf.runs import pretrain as pretrain_run

    task = jsonl(tmp_path / "probe.jsonl", read_jsonl(DEMO / "sentiment" / "train.jsonl")[:80])
    options = ProbeOptions(task, every=5, examples=48)
    inputs = pretrain_run.RunInputs(model_dir=str(tmp_path / "run"), data=shards[0],
                                    vocab=vocab_path)
    config = ElectraConfig.preset("tiny", train_steps=10, batch_size=8, checkpoint_every=5)
    config, pattern = pretrain_run.prepare_run(config, inputs)
    results = pretrain_run.train(config, inputs.model_dir, pattern, eval_batches=0,
                                 verbose=0, probe=options)
    probe = results["probe"]
    assert [p["step"] for p in probe["history"]] == [0, 5, 10]
    assert probe["train_examples"] == 48 and probe["eval_examples"] == 20  # a quarter held out
    assert 0 <= probe["random_accuracy"] <= 1 and 0 < probe["share_of_training"] < 1
    assert any(name.startswith("events") for name in
               os.listdir(tmp_path / "run" / "logs" / "probe"))

    config, pattern = pretrain_run.prepare_run(config.replace(train_steps=15), inputs)
    resumed = pretrain_run.train(config, inputs.model_dir, pattern, eval_batches=0,
                                 verbose=0, probe=options)["probe"]
    assert [p["step"] for p in resumed["history"]] == [0, 5, 10, 15]
    assert resumed["history"][:3] == probe["history"]  # kept, not measured again
    assert resumed["random_accuracy"] == probe["random_accuracy"]


def test_the_features_of_every_batch_shape_come_from_one_trace():
    """Each probe batch is cut to its own length; tracing per shape would cost a real
    encoder's probe seconds (ELECTRA-Small: ~1.2 s per trace)."""
    from electra_tf import ElectraEncoder

    config = ElectraConfig.preset("tiny", vocab_size=16)
    encoder = ElectraEncoder.from_electra_config(config)
    mask = np.zeros((4, 48), np.int32)
    mask[:2, :10] = mask[2:, :40] = 1  # batches of 2 cut to 16 and 48 tokens
    inputs = {"input_word_ids": mask * 5, "input_mask": mask,
              "input_type_ids": np.zeros_like(mask)}
    encoder(inputs)  # built, as the probe's encoders are
    features = feature_function(encoder)
    values = encoder_features(features, inputs, batch_size=2)
    assert values.shape == (4, 2 * config.hidden_size) and np.all(np.isfinite(values))
    assert features.experimental_get_tracing_count() == 1


def test_probe_inputs_are_checked_before_the_run_starts(tmp_path):
    with pytest.raises(TaskDataError, match="does not exist"):
        ProbeOptions(str(tmp_path / "missing.jsonl"))
    one_label = jsonl(tmp_path / "one.jsonl", [{"text": "x", "label": "a"}] * 8)
    with pytest.raises(TaskDataError, match="at least two labels"):
        ProbeOptions(one_label).read(_tokenizer(), seed=0)
    no_label = jsonl(tmp_path / "bad.jsonl", [{"text": "x"}])
    with pytest.raises(TaskDataError, match="bad.jsonl:1: a probe example needs"):
        ProbeOptions(no_label).read(_tokenizer(), seed=0)
    with pytest.raises(TaskDataError, match="interval must be >= 1"):
        DownstreamProbe(None, every=0)


def _tokenizer():
    from electra_tf import ElectraTokenizer

    return ElectraTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "x"])


def test_the_probe_is_deterministic_for_a_seed(tmp_path, vocab_path):
    from electra_tf import ElectraTokenizer
    from electra_tf.text.vocab import load_vocab, special_token_ids

    rows = read_jsonl(DEMO / "sentiment" / "train.jsonl")[:120]
    tokenizer = ElectraTokenizer(vocab_path)
    tokens = load_vocab(vocab_path)
    config = ElectraConfig.preset("tiny", vocab_size=len(tokens), **special_token_ids(tokens))
    path = jsonl(tmp_path / "task.jsonl", rows)
    first, again = (ProbeTask.read(path, tokenizer, examples=64, seed=5) for _ in range(2))
    assert first.fingerprint == again.fingerprint
    assert ProbeTask.read(path, tokenizer, examples=64, seed=6).fingerprint != first.fingerprint
    assert random_encoder_accuracy(config, first, seed=2) == random_encoder_accuracy(
        config, again, seed=2)
