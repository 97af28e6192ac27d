"""The Beam builder (Beam's in-process FnApiRunner) against the local multi-process
builder."""

import collections
import glob
import os

import pytest

from conftest import DEMO, run_command
from electra_tf.data import build_pretraining_data as builder
from electra_tf.data.dataset import pretraining_dataset
from electra_tf.errors import ConfigError, CorpusError

ONE = "--direct_num_workers=1"


def build_with_beam(*args, **kwargs):
    """`beam_pipeline.build_with_beam`, Beam imported at the first call: every worker
    imports every test file to collect it (Beam: ~1.3 s of CPU on a 2-core AVX2 EPYC)."""
    from electra_tf.data import beam_pipeline

    return beam_pipeline.build_with_beam(*args, **kwargs)


def records(pattern):
    """The examples of the shards as a multiset (serialized bytes would depend on the
    writer's map-field order)."""
    import tensorflow as tf

    def parsed(raw):
        features = tf.train.Example.FromString(raw.numpy()).features.feature
        return tuple((key, tuple(features[key].int64_list.value)) for key in sorted(features))

    return collections.Counter(parsed(raw) for path in sorted(glob.glob(pattern))
                               for raw in tf.data.TFRecordDataset(path))


@pytest.fixture
def corpus_pattern(tmp_path):
    bad_bytes = tmp_path / "mixed.txt"
    bad_bytes.write_bytes(b"The American people are strong.\n"
                          + "Caf\u00e9 talk.\n".encode("latin-1") + b"We will build.\n")
    speeches = [str(DEMO / "corpus" / name) for name in (
        "sotu_2019_donald_j_trump_r.txt", "sotu_2021_joseph_r_biden_d.txt")]
    return ",".join(speeches + [str(bad_bytes)])


def build_with_cli(corpus_pattern, vocab_path, output_dir, num_shards):
    run_command("electra-build-data", "--runner", "FnApiRunner", "--corpus", corpus_pattern,
                "--vocab", vocab_path, "--output_dir", output_dir, "--max_seq_length", "32",
                "--seed", "7", "--num_shards", num_shards, f"--beam_pipeline_options={ONE}")
    return builder.load_manifest(str(output_dir))


def test_beam_build_writes_the_examples_of_a_one_process_per_file_local_build(
        tmp_path, corpus_pattern, vocab_path):
    manifest = build_with_cli(corpus_pattern, vocab_path, tmp_path / "beam", num_shards=3)
    local = builder.build_pretraining_data(
        corpus_pattern, str(tmp_path / "local"), builder.BuildOptions(
            vocab_path=vocab_path, max_seq_length=32, seed=7),
        num_shards=3, num_processes=3, show_progress=False)

    assert sorted(os.listdir(tmp_path / "beam")) == sorted(os.listdir(tmp_path / "local"))
    assert records(manifest["file_pattern"]) == records(local["file_pattern"])
    for key in ("num_examples", "num_tokens", "num_files", "corpus_bytes",
                "undecodable_lines", "options", "vocab_sha256"):
        assert manifest[key] == local[key], key
    assert manifest["runner"] == "FnApiRunner" and manifest["undecodable_lines"] == 1
    batch = next(iter(pretraining_dataset(manifest["file_pattern"], 4, 32, seed=1)))
    assert batch["input_word_ids"].shape == (4, 32)


def test_rebuild_with_fewer_shards_removes_the_old_ones(tmp_path, corpus_pattern, vocab_path):
    output_dir = str(tmp_path / "shards")
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32)
    build_with_beam(corpus_pattern, output_dir, options, 4, pipeline_args=ONE)
    manifest = build_with_beam(corpus_pattern, output_dir, options, 2, pipeline_args=ONE)
    assert sorted(os.listdir(output_dir)) == [
        "manifest.json", "pretrain_data.tfrecord-00000-of-00002",
        "pretrain_data.tfrecord-00001-of-00002"]
    assert sum(records(manifest["file_pattern"]).values()) == manifest["num_examples"]


def test_shards_another_tool_wrote_stop_the_build_untouched(tmp_path, corpus_pattern,
                                                           vocab_path):
    theirs = tmp_path / "shards" / "pretrain_data.tfrecord-0-of-1"  # the official builder's
    theirs.parent.mkdir()
    theirs.write_text("theirs")
    with pytest.raises(ConfigError, match="pretrain_data.tfrecord-0-of-1"):
        build_with_beam(corpus_pattern, str(theirs.parent), builder.BuildOptions(
            vocab_path=vocab_path, max_seq_length=32), 2, pipeline_args=ONE)
    assert os.listdir(theirs.parent) == [theirs.name] and theirs.read_text() == "theirs"


def test_a_pattern_matching_nothing_is_a_clear_error(tmp_path, vocab_path):
    with pytest.raises(CorpusError, match="matches no file"):
        build_with_beam(str(tmp_path / "none*.txt"), str(tmp_path / "out"),
                        builder.BuildOptions(vocab_path=vocab_path), 2, pipeline_args=ONE)
