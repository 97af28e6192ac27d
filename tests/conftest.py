"""Shared fixtures: a small vocab and packed shards learned from the bundled demo corpus."""

import os
import pathlib
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import pytest  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
sys.path.insert(0, str(ROOT))

# A few speeches: enough text for a vocab and a few thousand examples, fast to process.
SMALL_CORPUS = ",".join(str(DEMO / "corpus" / name) for name in (
    "sotu_2019_donald_j_trump_r.txt", "sotu_2020_donald_j_trump_r.txt",
    "sotu_2021_joseph_r_biden_d.txt", "sotu_2016_barack_obama_d.txt",
))


def saved_model_cli(*args):
    """`saved_model_cli show ARGS` of this environment; returns its output."""
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", *args], capture_output=True, text=True,
                           env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert shown.returncode == 0, shown.stderr[-2000:]
    return shown.stdout


@pytest.fixture(scope="session")
def small_corpus():
    return SMALL_CORPUS


@pytest.fixture(scope="session")
def vocab_path(tmp_path_factory):
    from electra_tf.text import vocab

    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    tokens = vocab.learn_vocab(SMALL_CORPUS.split(","), 1500, lower_case=True,
                               strip_accents=True)
    vocab.write_vocab(tokens, str(path))
    return str(path)


@pytest.fixture(scope="session")
def shards(tmp_path_factory, vocab_path):
    """(file pattern, manifest) of examples of 64 tokens built from the small corpus."""
    from electra_tf.data import build_pretraining_data as builder

    out = tmp_path_factory.mktemp("shards")
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=64)
    manifest = builder.build_pretraining_data(SMALL_CORPUS, str(out), options, num_shards=2,
                                              show_progress=False)
    return manifest["file_pattern"], manifest


@pytest.fixture(scope="session")
def pretrained_dir(tmp_path_factory, shards, vocab_path):
    """A tiny pretraining run directory (20 steps), as finetune.py's --init_checkpoint."""
    from electra_tf.config import ElectraConfig
    from electra_tf.runs import pretrain as pretrain_run

    model_dir = str(tmp_path_factory.mktemp("pretrained"))
    config = ElectraConfig.preset("tiny", train_steps=20, batch_size=8)
    inputs = pretrain_run.RunInputs(model_dir=model_dir, data=shards[0], vocab=vocab_path)
    config, pattern = pretrain_run.prepare_run(config, inputs)
    pretrain_run.train(config, model_dir, pattern, eval_batches=1, verbose=0)
    return model_dir
