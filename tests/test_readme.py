"""Every Python block of the README runs, on the tiny pretrained run of the tests (examples
that cannot rot).

The blocks name real models and sizes; the test swaps them for the tiny run's, one
literal at a time (SUBSTITUTIONS), and gives the names a block leaves to the reader
(`train_texts`, ...) from the demo sentiment data. Every literal swapped must occur in
the blocks, so an edited example cannot silently run at full size.
"""

import json
import re

import pytest

from conftest import DEMO, ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(encoding="utf-8"),
                    re.S)


def _sentiment(start, n):
    rows = [json.loads(line) for line in open(DEMO / "sentiment" / "train.jsonl",
                                               encoding="utf-8")][start:start + n]
    return [r["text"] for r in rows], [["neg", "pos"][int(r["label"])] for r in rows]


@pytest.fixture(scope="module")
def substitutions(pretrained_dir, shards, vocab_path, encoder_export):
    return {'"electra-small"': repr(pretrained_dir),
            'preset("small"': 'preset("tiny"',
            '"vocab.txt"': repr(vocab_path),
            '"shards/pretrain_data.tfrecord-*", 128, 128)': f"{shards[0]!r}, 8, 64)",
            "steps_per_epoch=1000": "steps_per_epoch=2",
            "sequence_length=128": "sequence_length=32",
            "epochs=3": "epochs=1",
            '"exports/electra_x/': f'"{encoder_export}/',
            '"my_task.jsonl"': repr(str(DEMO / "sentiment" / "train.jsonl"))}


def test_every_swapped_literal_occurs_in_the_blocks(substitutions):
    assert BLOCKS
    for literal in substitutions:
        assert any(literal in block for block in BLOCKS), literal


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, substitutions, tmp_path, monkeypatch):
    code = BLOCKS[index]
    for literal, replacement in substitutions.items():
        code = code.replace(literal, replacement)
    monkeypatch.chdir(tmp_path)
    train_texts, train_labels = _sentiment(0, 32)
    dev_texts, dev_labels = _sentiment(32, 16)
    namespace = {"train_texts": train_texts, "train_labels": train_labels,
                 "dev_texts": dev_texts, "dev_labels": dev_labels}
    if "electra_tf.ElectraTokenClassifier" in code:  # the block after the classifier's
        exec("import electra_tf", namespace)
    exec(compile(code, f"README.md python block {index + 1}", "exec"), namespace)
