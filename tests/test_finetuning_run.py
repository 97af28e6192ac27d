"""finetune.py's library end to end, from a tiny pretraining run."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from conftest import DEMO, ROOT
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf import run_dir
from electra_tf.finetuning.config import FinetuneConfig
from electra_tf.layers.task_models import SequenceClassifier
from electra_tf.runs.finetune import finetune
from electra_tf.training import runtime


def head(path, n, out):
    lines = open(path, encoding="utf-8").read().split("\n\n" if path.endswith(".conll")
                                                       else "\n")
    sep = "\n\n" if path.endswith(".conll") else "\n"
    out.write_text(sep.join(lines[:n]) + sep, encoding="utf-8")
    return str(out)


def test_text_classification_writes_results_predictions_and_best_checkpoint(
        pretrained_dir, tmp_path):
    train = head(str(DEMO / "sentiment" / "train.jsonl"), 160, tmp_path / "train.jsonl")
    dev = head(str(DEMO / "sentiment" / "dev.jsonl"), 64, tmp_path / "dev.jsonl")
    out = str(tmp_path / "ft")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=16,
                             epochs=2, num_trials=2)
    results = finetune(cfg, pretrained_dir, train, dev, out)
    assert [t["seed"] for t in results["trials"]] == [0, 1]
    assert 0.0 <= results["summary"]["accuracy"]["median"] <= 1.0
    assert json.load(open(os.path.join(out, "labels.json"))) == ["0", "1"]
    saved = json.load(open(os.path.join(out, "eval_results.json")))
    assert saved["main_metric"] == "accuracy" and len(saved["trials"]) == 2
    predictions = [json.loads(l) for l in open(os.path.join(out, "predictions.jsonl"))]
    assert len(predictions) == 64
    assert predictions[0]["prediction"] in ("0", "1")
    assert abs(sum(predictions[0]["probabilities"]) - 1) < 1e-3
    for trial in results["trials"]:
        assert os.path.exists(trial["checkpoint"] + ".index")
    finetune_config = json.load(open(os.path.join(out, "finetune_config.json")))
    # Small-sized encoder (hidden <= 256): the paper's lr 3e-4; layer-wise decay 0.8.
    assert finetune_config["learning_rate"] == 3e-4
    assert finetune_config["layerwise_decay"] == 0.8


def test_regression_and_tagging_run(pretrained_dir, tmp_path):
    rows = [{"text": f"score {i % 5}", "label": float(i % 5)} for i in range(48)]
    path = tmp_path / "reg.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = FinetuneConfig(task="text_regression", max_seq_length=16, batch_size=16, epochs=1)
    results = finetune(cfg, pretrained_dir, str(path), str(path), str(tmp_path / "reg"))
    assert set(results["summary"]) == {"pearson", "spearman"}

    train = head(str(DEMO / "japanese_ner" / "train.conll"), 40, tmp_path / "train.conll")
    dev = head(str(DEMO / "japanese_ner" / "dev.conll"), 16, tmp_path / "dev.conll")
    cfg = FinetuneConfig(task="tagging", max_seq_length=64, batch_size=8, epochs=1)
    results = finetune(cfg, pretrained_dir, train, dev, str(tmp_path / "ner"))
    assert {"span_f1", "span_precision", "span_recall", "accuracy"} <= set(results["summary"])
    predictions = [json.loads(l) for l in open(tmp_path / "ner" / "predictions.jsonl")]
    assert all(len(p["prediction"]) == len(p["label"]) for p in predictions)


def test_checkpoint_not_matching_its_config_is_refused(pretrained_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(pretrained_dir, broken)
    config = json.load(open(broken / "config.json"))
    config["intermediate_size"] = 96
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="does not match the encoder"):
        run_dir.load_encoder(run_dir.open_pretrained(str(broken)),
                         ElectraConfig.from_dict(config), 0.1)


def test_cli_reports_bad_input_in_one_line(pretrained_dir, tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"text": "a", "label": "x"}\n')
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"text": "b", "label": "y"}\n')
    result = subprocess.run(
        [sys.executable, str(ROOT / "finetune.py"), "--init_checkpoint", pretrained_dir,
         "--task", "text_classification", "--train_file", str(bad), "--eval_file", str(dev),
         "--model_dir", str(tmp_path / "out")],
        capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 2
    assert "error: " in result.stderr and "dev.jsonl:1: label 'y'" in result.stderr
    assert "Traceback" not in result.stderr


def test_squad_v2_end_to_end_writes_official_prediction_files(pretrained_dir, tmp_path):
    context = ("The president gave a speech to the congress about the economy. " * 3 +
               "The nation was strong and the people were free.")
    qas = [{"id": "a", "question": "Who gave a speech?",
            "answers": [{"text": "The president", "answer_start": 0}]},
           {"id": "b", "question": "What was strong?",
            "answers": [{"text": "The nation", "answer_start": context.index("The nation")}]},
           {"id": "c", "question": "What color was the sky?", "answers": [],
            "is_impossible": True}]
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [
        {"context": context, "qas": qas}]}]}))
    cfg = FinetuneConfig(task="squad_v2", max_seq_length=32, doc_stride=12, batch_size=8,
                             epochs=1)
    out = tmp_path / "qa"
    results = finetune(cfg, pretrained_dir, str(path), str(path), str(out))
    assert {"exact", "f1", "HasAns_exact", "NoAns_exact"} <= set(results["summary"])
    predictions = json.load(open(out / "predictions.json"))
    null_odds = json.load(open(out / "null_odds.json"))
    assert set(predictions) == set(null_odds) == {"a", "b", "c"}


def test_bf16_fine_tuning_keeps_float32_outputs_and_multi_worker_is_refused(
        pretrained_dir, tmp_path):
    from electra_tf.training.runtime import RuntimeOptions

    train = head(str(DEMO / "sentiment" / "train.jsonl"), 64, tmp_path / "train.jsonl")
    dev = head(str(DEMO / "sentiment" / "dev.jsonl"), 32, tmp_path / "dev.jsonl")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=16,
                             epochs=1)
    results = finetune(cfg, pretrained_dir, train, dev, str(tmp_path / "bf16"),
                           runtime=RuntimeOptions(mixed_precision="bf16"))
    assert 0.0 <= results["summary"]["accuracy"]["median"] <= 1.0

    config = ElectraConfig.load(os.path.join(pretrained_dir, "config.json"))
    with runtime.precision("bf16"):
        encoder = run_dir.load_encoder(None, config, 0.1)
        model = SequenceClassifier(encoder, 2)
    ids = np.full((2, 8), 5, np.int32)
    logits = model({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                    "input_type_ids": np.zeros_like(ids)})
    assert encoder.transformer_layers[0].compute_dtype == "bfloat16"
    assert encoder.transformer_layers[0].variable_dtype == "float32"
    assert logits.dtype == "float32"
    with pytest.raises(ConfigError, match="mirrored"):
        finetune(cfg, pretrained_dir, train, dev, str(tmp_path / "mw"),
                     runtime=RuntimeOptions(strategy="multi_worker"))
