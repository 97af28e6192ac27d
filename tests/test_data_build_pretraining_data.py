import dataclasses
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from electra_tf.data import build_pretraining_data as builder
from electra_tf.data.dataset import pretraining_dataset
from electra_tf.data.packing import PackedExample
from electra_tf.errors import ConfigError, CorpusError
from electra_tf.text import vocab


def read_examples(pattern):
    import tensorflow as tf

    records = []
    for path in sorted(glob.glob(pattern)):
        for raw in tf.data.TFRecordDataset(path):
            example = tf.train.Example.FromString(raw.numpy())
            records.append({k: list(v.int64_list.value)
                            for k, v in example.features.feature.items()})
    return records


def test_shards_hold_fixed_length_examples_that_follow_the_format(shards, vocab_path):
    pattern, manifest = shards
    ids = vocab.special_token_ids(vocab.load_vocab(vocab_path))
    records = read_examples(pattern)
    assert len(records) == manifest["num_examples"] > 500
    assert len(glob.glob(pattern)) == 2
    for record in records[:200]:
        input_ids, mask, segments = (record["input_ids"], record["input_mask"],
                                     record["segment_ids"])
        assert len(input_ids) == len(mask) == len(segments) == 64
        n = sum(mask)
        assert mask == [1] * n + [0] * (64 - n)
        assert input_ids[0] == ids["cls_token_id"] and input_ids[n - 1] == ids["sep_token_id"]
        assert input_ids[n:] == [0] * (64 - n)
        assert input_ids[:n].count(ids["sep_token_id"]) == 1 + (1 in segments)
    full = sum(sum(r["input_mask"]) == 64 for r in records)
    assert full / len(records) > 0.8  # packing fills most examples to the max length


def test_build_is_deterministic_and_leaves_no_temporary_files(tmp_path, small_corpus,
                                                              vocab_path):
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32, seed=7)
    for name in ("a", "b"):
        builder.build_pretraining_data(small_corpus, str(tmp_path / name), options,
                                       num_shards=3, show_progress=False)
    assert read_examples(str(tmp_path / "a" / "pretrain*")) == read_examples(
        str(tmp_path / "b" / "pretrain*"))
    shards = sorted(n for n in os.listdir(tmp_path / "a") if n.startswith("pretrain"))
    assert len(shards) == 3 and all((tmp_path / "a" / n).read_bytes() == (
        tmp_path / "b" / n).read_bytes() for n in shards)
    # Byte for byte in any process: protobuf writes a map's entries (the features) in an
    # order that changes between processes (unsorted in 5 of 8 tried), ours in their names'.
    # Each record holds its example alone (the message is reused).
    for example in (PackedExample([2, 7, 3, 9], [1, 1, 1, 1], [0, 0, 1, 1]),
                    PackedExample([2, 3], [1, 1], [0, 0])):
        record = builder.serialize_example(example)
        assert record.index(b"input_ids") < record.index(b"input_mask") < record.index(
            b"segment_ids")
        features = tf.train.Example.FromString(record).features.feature
        assert {name: list(feature.int64_list.value) for name, feature in features.items()
                } == dataclasses.asdict(example)
    assert not [n for n in os.listdir(tmp_path / "a") if ".tmp" in n]


def test_a_rebuild_replaces_what_builds_of_ours_wrote_and_refuses_other_shards(
        tmp_path, small_corpus, vocab_path, monkeypatch):
    """A finished build, then one killed midway (temporaries and its record left), are
    replaced by the next build; shards another tool wrote, or a manifest not ours, stop the
    build before anything is removed."""
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32)
    out = tmp_path / "out"
    builder.build_pretraining_data(small_corpus, str(out), options, num_shards=3,
                                   show_progress=False)
    serialize, written = builder.serialize_example, []

    def killed_after_ten(example):
        written.append(example)
        if len(written) > 10:
            raise KeyboardInterrupt
        return serialize(example)

    monkeypatch.setattr(builder, "serialize_example", killed_after_ten)
    with pytest.raises(KeyboardInterrupt):
        builder.build_pretraining_data(small_corpus, str(out), options, num_shards=2,
                                       show_progress=False)
    left = sorted(os.listdir(out))
    assert left[0] == builder.BUILDING and len(left) == 3 and ".tmp-" in left[1]
    monkeypatch.undo()
    builder.build_pretraining_data(small_corpus, str(out), options, num_shards=2,
                                   show_progress=False)
    finished = sorted(os.listdir(out))
    assert finished == [builder.MANIFEST, "pretrain_data.tfrecord-00000-of-00002",
                        "pretrain_data.tfrecord-00001-of-00002"]

    for name, text, match in (("pretrain_data.tfrecord-0-of-1", "theirs", "shard file"),
                              (builder.MANIFEST, '{"name": "theirs"}', "not a record")):
        theirs = tmp_path / "theirs" / name  # the official builder's shard name, first
        theirs.parent.mkdir(exist_ok=True)
        theirs.write_text(text)
        with pytest.raises(ConfigError, match=match):
            builder.build_pretraining_data(small_corpus, str(theirs.parent), options,
                                           show_progress=False)
        assert os.listdir(theirs.parent) == [name] and theirs.read_text() == text
        theirs.unlink()
    (out / "pretrain_data.tfrecord-00000-of-00001").write_text("theirs")
    with pytest.raises(ConfigError, match="00000-of-00001"):
        builder.build_pretraining_data(small_corpus, str(out), options, show_progress=False)
    assert sorted(os.listdir(out)) == sorted(finished + ["pretrain_data.tfrecord-00000-of-00001"])


def test_parallel_build_writes_every_example(tmp_path, small_corpus, vocab_path):
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32)
    serial = builder.build_pretraining_data(small_corpus, str(tmp_path / "serial"), options,
                                            num_shards=4, show_progress=False)
    parallel = builder.build_pretraining_data(small_corpus, str(tmp_path / "parallel"),
                                              options, num_shards=4, num_processes=2,
                                              show_progress=False)
    assert parallel["num_processes"] == 2
    assert len(glob.glob(str(tmp_path / "parallel" / "pretrain*"))) == 4
    # Same sentences, different packing randomness per worker: token totals agree closely.
    assert abs(parallel["num_tokens"] - serial["num_tokens"]) / serial["num_tokens"] < 0.02


def test_text_without_line_breaks_is_sentence_split(tmp_path, vocab_path):
    corpus = tmp_path / "speech.txt"
    corpus.write_text(" ".join(f"Sentence number {i} is here." for i in range(40)) + "\n")
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=128, seed=3)
    builder.build_pretraining_data(str(corpus), str(tmp_path / "out"), options,
                                   show_progress=False)
    records = read_examples(str(tmp_path / "out" / "pretrain*"))
    # With sentences, examples get two segments; a single 400-token "sentence" could not.
    assert any(1 in r["segment_ids"] for r in records)


def test_fewer_files_than_processes_asked_are_said(tmp_path, vocab_path, capsys):
    corpus = tmp_path / "one.txt"
    corpus.write_text("We will build.\n\nThe people are strong.\n")
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32)
    manifest = builder.build_pretraining_data(str(corpus), str(tmp_path / "out"), options,
                                              num_shards=2, num_processes=2,
                                              show_progress=False)
    assert manifest["num_processes"] == 1
    assert "1 corpus file(s), so 1 of the 2 processes" in capsys.readouterr().err


def test_empty_or_missing_corpus_errors(tmp_path, vocab_path):
    options = builder.BuildOptions(vocab_path=vocab_path)
    with pytest.raises(CorpusError, match="matches no file"):
        builder.build_pretraining_data(str(tmp_path / "none*.txt"), str(tmp_path / "o"),
                                       options, show_progress=False)


def test_reader_batches_int32_features(shards):
    pattern, _ = shards
    batch = next(iter(pretraining_dataset(pattern, 8, 64, seed=1)))
    assert set(batch) == {"input_word_ids", "input_mask", "input_type_ids"}
    for value in batch.values():
        assert value.shape == (8, 64) and value.dtype.name == "int32"
    assert np.all(batch["input_word_ids"].numpy()[:, 0] == 2)
    # Without tf.data's autotuning, whose thread holds up the end of finite passes
    # (`without_autotuning`): the evaluation pipeline's and the training one's.
    for training in (False, True):
        assert not pretraining_dataset(pattern, 8, 64, training).options().autotune.enabled


def test_non_utf8_bytes_are_counted_and_the_build_goes_on(tmp_path, vocab_path, capsys):
    corpus = tmp_path / "mixed.txt"
    corpus.write_bytes(b"The American people are strong.\n" + "Caf\u00e9 talk.\n".encode("latin-1")
                       + b"We will build.\n")
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32)
    manifest = builder.build_pretraining_data(str(corpus), str(tmp_path / "out"), options,
                                              show_progress=False)
    assert manifest["undecodable_lines"] == 1 and manifest["num_examples"] >= 1
    assert "not valid UTF-8" in capsys.readouterr().err



def test_progress_counts_the_bytes_read_within_a_file(tmp_path, vocab_path):
    """One large file moves the progress bar before its end, and to exactly its size."""
    from conftest import DEMO

    corpus = tmp_path / "book.txt"
    with open(DEMO / "corpus" / "moby_dick.txt", "rb") as f:
        corpus.write_bytes(f.read(300_000).replace(b"\n", b"\r\n"))

    class Progress:
        reports = []
        put = reports.append

    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=32)
    builder._run_worker(0, 1, [str(corpus)], str(tmp_path), 1, options, Progress)
    read = [num_bytes for num_bytes, _ in Progress.reports]
    assert sum(read) == corpus.stat().st_size
    assert sum(examples for _, examples in Progress.reports) > 1000
    assert len([n for n in read if n]) > 1  # not only when the file ends
