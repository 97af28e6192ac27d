"""--tfds_name reads a prepared TFDS dataset from --data_dir, with no network."""

import json
import os
import tempfile
from unittest import mock

import pytest

import tensorflow_datasets as tfds  # noqa: E402  (a pinned requirement: never skipped)
import tensorflow as tf  # noqa: E402

from conftest import DEMO  # noqa: E402
from electra_tf.finetuning import tasks  # noqa: E402
from electra_tf.finetuning.config import FinetuneConfig  # noqa: E402
from electra_tf.runs.finetune import finetune  # noqa: E402
from electra_tf.errors import TaskDataError
from electra_tf.finetuning.tfds_data import read_tfds  # noqa: E402


def prepare_glue(data_dir, config, splits):
    """Writes a prepared TFDS dataset the way `tfds build` leaves it: records serialized
    with the builder's own features, plus its split metadata and dataset_info.json."""
    # The builder of a dataset not yet prepared leaves an empty temporary directory.
    with mock.patch.object(tempfile, "tempdir", str(data_dir)):
        builder = tfds.builder(f"glue/{config}", data_dir=str(data_dir))
    os.makedirs(builder.data_dir, exist_ok=True)
    infos = []
    for split, rows in splits.items():
        template = tfds.core.ShardedFileTemplate(
            data_dir=builder.data_dir, dataset_name=builder.name, split=split,
            filetype_suffix="tfrecord")
        path = os.fspath(template.sharded_filepath(shard_index=0, num_shards=1))
        with tf.io.TFRecordWriter(path) as writer:
            for row in rows:
                writer.write(builder.info.features.serialize_example(row))
        infos.append(tfds.core.SplitInfo(name=split, shard_lengths=[len(rows)],
                                         num_bytes=os.path.getsize(path),
                                         filename_template=template))
    builder.info.set_splits(tfds.core.SplitDict(infos))
    builder.info.write_to_directory(builder.data_dir)


def sst2_rows(path, n):
    rows = [json.loads(line) for line in open(path, encoding="utf-8")][:n]
    return [{"idx": i, "sentence": r["text"], "label": int(r["label"])}
            for i, r in enumerate(rows)]


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds")
    unlabelled = [dict(row, label=-1) for row in sst2_rows(DEMO / "sentiment" / "dev.jsonl",
                                                          8)]
    prepare_glue(data_dir, "sst2", {
        "train": sst2_rows(DEMO / "sentiment" / "train.jsonl", 64),
        "validation": sst2_rows(DEMO / "sentiment" / "dev.jsonl", 32),
        "test": unlabelled})  # GLUE test splits carry label -1
    prepare_glue(data_dir, "rte", {"validation": [
        {"idx": 0, "sentence1": "A cat sat.", "sentence2": "An animal sat.", "label": 0},
        {"idx": 1, "sentence1": "A cat sat.", "sentence2": "Nobody sat.", "label": 1},
        {"idx": 2, "sentence1": "Test.", "sentence2": "Unlabeled.", "label": -1}]})
    return str(data_dir)


def test_reads_glue_splits_with_glue_label_strings(tfds_dir):
    train = read_tfds(tasks.get_task("sst2"), "glue/sst2", "train", tfds_dir)
    assert len(train) == 64 and {e.label for e in train} == {"0", "1"}
    first = json.loads(open(DEMO / "sentiment" / "train.jsonl").readline())
    assert (train[0].text, train[0].label, train[0].text_pair) == (first["text"],
                                                                   first["label"], None)
    rte = read_tfds(tasks.get_task("rte"), "glue/rte", "validation", tfds_dir)
    assert [(e.text_pair, e.label) for e in rte] == [
        ("An animal sat.", "entailment"), ("Nobody sat.", "not_entailment"),
        ("Unlabeled.", None)]


def test_dataset_not_prepared_in_data_dir_is_a_clear_error(tmp_path, monkeypatch):
    """Without asking TFDS's builder, which would fetch the dataset's metadata from the
    network and leave an empty temporary directory."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    with pytest.raises(TaskDataError, match="not prepared in"):
        read_tfds(tasks.get_task("qnli"), "glue/qnli", "train", str(tmp_path))
    with pytest.raises(TaskDataError, match="glu not found"):
        read_tfds(tasks.get_task("qnli"), "glu/qnli", "train", str(tmp_path))
    assert not list(temporary.iterdir())


def test_finetune_from_tfds(tfds_dir, pretrained_dir, tmp_path):
    cfg = FinetuneConfig(task="sst2", tfds_name="glue/sst2", data_dir=tfds_dir,
                             max_seq_length=32, batch_size=16, epochs=1)
    results = finetune(cfg, pretrained_dir, None, None, str(tmp_path / "out"))
    predictions = [json.loads(line) for line in open(tmp_path / "out" / "predictions.jsonl")]
    assert results["task"] == "sst2" and len(predictions) == 32
    dev = sst2_rows(DEMO / "sentiment" / "dev.jsonl", 32)
    assert [p["label"] for p in predictions] == [str(r["label"]) for r in dev]
    assert {p["prediction"] for p in predictions} <= {"0", "1"}
    accuracy = sum(p["prediction"] == p["label"] for p in predictions) / 32
    assert results["summary"]["accuracy"]["median"] == accuracy


def test_an_unlabelled_test_split_is_predicted_not_scored(tfds_dir, pretrained_dir, tmp_path):
    cfg = FinetuneConfig(task="sst2", tfds_name="glue/sst2", data_dir=tfds_dir,
                         eval_split="test", max_seq_length=16, batch_size=16, epochs=1)
    results = finetune(cfg, pretrained_dir, None, None, str(tmp_path / "out"))
    assert results["summary"] == {} and results["trials"][0]["scores"] == {}
    predictions = [json.loads(line) for line in open(tmp_path / "out" / "predictions.jsonl")]
    assert len(predictions) == 8 and all(p["label"] is None for p in predictions)
    assert {p["prediction"] for p in predictions} <= {"0", "1"}
    with pytest.raises(TaskDataError, match=r"glue/sst2:test\[0\]: no label"):
        finetune(FinetuneConfig(task="sst2", tfds_name="glue/sst2", data_dir=tfds_dir,
                                train_split="test"), pretrained_dir, None, None,
                 str(tmp_path / "x"))
