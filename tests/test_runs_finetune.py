"""A fine-tuning run end to end, from a tiny pretraining run (the shared `finetuned` runs)."""

import contextlib
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from conftest import DEMO, head, read_jsonl, run_command, traces
from electra_tf import run_dir
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError, TaskDataError
from electra_tf.finetuning.config import FinetuneConfig
from electra_tf.models import ElectraTextClassifier
from electra_tf.runs.finetune import finetune
from electra_tf.training import runtime
from electra_tf.training.runtime_options import RuntimeOptions


def test_classification_writes_results_predictions_and_best_checkpoints(finetuned):
    out = finetuned / "cls"
    results = json.load(open(out / "eval_results.json"))
    assert results["task"] == "text_classification" and results["main_metric"] == "accuracy"
    assert [t["seed"] for t in results["trials"]] == [0, 1]
    accuracies = [t["scores"]["accuracy"] for t in results["trials"]]
    assert results["summary"]["accuracy"]["median"] == np.median(accuracies)
    assert results["best_trial"] == int(np.argmax(accuracies))
    assert json.load(open(out / "labels.json")) == ["neg", "pos"]
    task = json.load(open(out / "task.json"))
    assert task == {"task": "text_classification", "kind": "classification",
                    "text_pairs": True, "model": {
                        "class_name": "ElectraTextClassifier",
                        "head_config": {"num_classes": 2, "dropout": 0.1,
                                        "initializer_range": 0.02,
                                        "label_names": ["neg", "pos"],
                                        "text_pairs": True}}}
    # The official choice: each trial reports (and keeps) the model after its last epoch.
    assert results["selection"] == "last_epoch"
    predictions = read_jsonl(out / "predictions.jsonl")
    assert len(predictions) == 32
    assert {p["prediction"] for p in predictions} <= {"neg", "pos"}
    assert all(abs(sum(p["probabilities"]) - 1) < 1e-3 for p in predictions)
    assert predictions[0]["source"].endswith("cls_dev.jsonl:1")
    dev = read_jsonl(finetuned / "cls_dev.jsonl")  # the texts themselves, pairs too
    assert [(p["text"], p.get("text_pair")) for p in predictions] == [
        (r["text"], r.get("text_pair")) for r in dev]
    # The predictions are the best trial's: its accuracy, recomputed from them.
    correct = np.mean([p["prediction"] == p["label"] for p in predictions])
    assert correct == pytest.approx(max(accuracies))
    for k, trial in enumerate(results["trials"]):
        assert trial["checkpoint"].startswith(str(out / f"trial_{k}" / "model" / "ckpt-2"))
        assert os.path.exists(trial["checkpoint"] + ".index") and trial["epoch"] == 2
    settings = json.load(open(out / "finetune_config.json"))
    # A tiny-preset encoder takes the small-encoder recipe: lr 3e-4; layer-wise decay 0.8.
    assert settings["learning_rate"] == 3e-4 and settings["layerwise_decay"] == 0.8


def test_regression_and_tagging_runs(finetuned):
    results = json.load(open(finetuned / "reg" / "eval_results.json"))
    assert set(results["summary"]) == {"pearson", "spearman"}
    scores = [p["prediction"] for p in read_jsonl(finetuned / "reg" / "predictions.jsonl")]
    assert len(scores) == 32 and len(set(scores)) > 1

    results = json.load(open(finetuned / "ner" / "eval_results.json"))
    assert set(results["summary"]) == {"span_f1", "span_precision", "span_recall",
                                       "accuracy"}
    predictions = read_jsonl(finetuned / "ner" / "predictions.jsonl")
    assert len(predictions) == 24
    assert all(len(p["prediction"]) == len(p["label"]) == len(p["words"]) for p in predictions)
    tags = set(json.load(open(finetuned / "ner" / "labels.json")))
    assert {t for p in predictions for t in p["prediction"]} <= tags


def test_a_checkpoint_not_matching_its_config_is_refused(pretrained_dir, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(pretrained_dir, broken)
    config = json.load(open(broken / "config.json"))
    config["intermediate_size"] = 96
    (broken / "config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="does not match the encoder"):
        run_dir.load_encoder(run_dir.open_pretrained(str(broken)),
                             ElectraConfig.from_dict(config), 0.1)


def test_bad_input_is_refused_in_one_line(pretrained_dir, tmp_path):
    bad = tmp_path / "train.jsonl"
    bad.write_text('{"text": "a", "label": "x"}\n')
    dev = tmp_path / "dev.jsonl"
    dev.write_text('{"text": "b", "label": "y"}\n')
    result = run_command("electra-finetune", "--init_checkpoint", pretrained_dir, "--task",
                         "text_classification", "--train_file", bad, "--eval_file", dev,
                         "--model_dir", tmp_path / "out", check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "dev.jsonl:1: label 'y'" in result.stderr and "Traceback" not in result.stderr
    cfg = FinetuneConfig(task="text_classification")
    with pytest.raises(TaskDataError, match=r"Give --train_file \(and --eval_file to score\)"):
        finetune(cfg, pretrained_dir, None, None, str(tmp_path / "x"))
    with pytest.raises(TaskDataError, match="Unknown task 'summarization'"):
        finetune(FinetuneConfig(task="summarization"), pretrained_dir, str(bad), str(dev),
                 str(tmp_path / "x"))
    with pytest.raises(ConfigError, match="mirrored"):
        finetune(cfg, pretrained_dir, str(bad), str(dev), str(tmp_path / "x"),
                 runtime=RuntimeOptions(strategy="multi_worker"))


def test_squad_v2_end_to_end_writes_official_prediction_files(finetuned):
    out = finetuned / "qa"
    results = json.load(open(out / "eval_results.json"))
    assert {"exact", "f1", "HasAns_exact", "NoAns_exact", "best_exact", "best_exact_thresh",
            "best_f1", "best_f1_thresh"} <= set(results["summary"])
    # The official evaluation script's inputs: best non-null answers and null odds.
    best = json.load(open(out / "predictions.json"))
    null_odds = json.load(open(out / "null_odds.json"))
    assert set(best) == set(null_odds) == {"a", "b", "c"}
    assert all(best.values())
    records = read_jsonl(out / "predictions.jsonl")
    assert [r["id"] for r in records] == ["a", "b", "c"]
    for r in records:  # "" where the null odds exceed --qa_na_threshold (-2.75)
        assert r["prediction"] == ("" if null_odds[r["id"]] > -2.75 else best[r["id"]])


def test_bf16_fine_tuning_keeps_float32_outputs(pretrained_dir, tmp_path):
    train = head(DEMO / "sentiment" / "train.jsonl", 32, tmp_path / "train.jsonl")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=16, batch_size=16,
                         epochs=1)
    results = finetune(cfg, pretrained_dir, train, train, str(tmp_path / "bf16"),
                       runtime=RuntimeOptions(mixed_precision="bf16"))
    assert np.isfinite(results["summary"]["accuracy"]["median"])

    config = ElectraConfig.load(os.path.join(pretrained_dir, "config.json"))
    with runtime.precision("bf16"):
        encoder = run_dir.load_encoder(None, config, 0.1)
        model = ElectraTextClassifier(encoder, 2)
    ids = np.full((2, 8), 5, np.int32)
    logits = model({"input_word_ids": ids, "input_mask": np.ones_like(ids),
                    "input_type_ids": np.zeros_like(ids)})
    assert encoder.transformer_layers[0].compute_dtype == "bfloat16"
    assert encoder.transformer_layers[0].variable_dtype == "float32"
    assert logits.dtype == "float32"


def test_xla_compiled_fine_tuning_equals_the_graph_steps(pretrained_dir, tmp_path):
    """`--jit_compile` (every TPU run's path) fine-tunes to the same model: same
    predictions after the same steps, dropout off so both draw nothing at random."""
    train = head(DEMO / "sentiment" / "train.jsonl", 32, tmp_path / "train.jsonl")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=16, batch_size=16,
                         epochs=1, dropout=0.0)
    probabilities = {}
    for jit in (False, True):
        out = tmp_path / f"jit_{jit}"
        finetune(cfg, pretrained_dir, train, train, str(out),
                 runtime=RuntimeOptions(jit_compile=jit))
        probabilities[jit] = [p["probabilities"] for p in read_jsonl(out / "predictions.jsonl")]
    np.testing.assert_allclose(probabilities[True], probabilities[False], atol=2e-5)


def test_a_diverging_fine_tuning_stops_at_the_step_and_keeps_nothing_damaged(pretrained_dir,
                                                                            tmp_path, capsys):
    from electra_tf.training.callbacks import NonFiniteLoss

    train = head(DEMO / "sentiment" / "train.jsonl", 32, tmp_path / "train.jsonl")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=16, batch_size=64,
                         epochs=3, learning_rate=1e30, warmup_proportion=0.0)
    with pytest.raises(NonFiniteLoss, match=r"NaN or infinite at step [23]; nothing was "
                                            r"saved\. Fine-tune again with a lower"):
        finetune(cfg, pretrained_dir, train, train, str(tmp_path / "out"))
    assert ("warning: --batch_size=64 is larger than the 32 training sequences"
            in capsys.readouterr().err)
    assert not os.path.exists(tmp_path / "out" / run_dir.EVAL_RESULTS_FILE)
    assert not [f for _, _, names in os.walk(tmp_path / "out") for f in names
                if f.startswith("ckpt-")]


def test_fine_tuning_calls_no_xla_kernel_unless_told_to(pretrained_dir, tmp_path):
    """Fine-tuning batches end after their longest example, so their shapes change from
    step to step, and XLA compiles a kernel for every shape: by default a fine-tuning run
    traces none of the training kernels (GELU, dropout, layer norm) pretraining uses."""
    from electra_tf.layers import activations, fused_dropout, fused_layer_normalization

    kernels = (activations._gelu, fused_dropout._dropout_mask,
               fused_layer_normalization._forward)
    before = traces(*kernels)
    train = head(DEMO / "sentiment" / "train.jsonl", 16, tmp_path / "train.jsonl")
    finetune(FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=8,
                            epochs=1), pretrained_dir, train, None, str(tmp_path / "out"))
    assert traces(*kernels) == before


def test_bfloat16_fine_tuning_on_short_inputs_runs_the_fused_gelu_and_16_bit_dropout(
        pretrained_dir, tmp_path, monkeypatch):
    """In bfloat16, where TensorFlow's GELU is a dozen slow passes and Keras's dropout draws
    a bfloat16 of 128 values, short-input fine-tuning takes the fused GELU, traced for rows
    unknown until run time (its kernels then run over them padded to a bucket), and the
    16-bit dropout (`RuntimeOptions.for_run`); not the other kernels, unless told: with
    --fused_layer_norm its layer norms too (their kernels pad rows as the GELU's do);
    --nosixteen_bit_dropout keeps Keras's dropout."""
    from electra_tf.layers import activations, fused_dropout
    from electra_tf.layers.fused_layer_normalization import FusedLayerNormalization
    from electra_tf.layers.sixteen_bit_dropout import SixteenBitDropout
    from electra_tf.models import task

    before = traces(fused_dropout._dropout_mask)
    held, gelu_inputs = [], []
    original, gelu = task.training_kernels, activations._gelu

    @contextlib.contextmanager
    def recorded(model, options):
        with original(model, options):
            layers = list(model._flatten_layers())
            held.append([sum(isinstance(layer, kind) for layer in layers)
                         for kind in (SixteenBitDropout, FusedLayerNormalization)])
            yield

    def recorded_gelu(x, bias):
        gelu_inputs.append((x.shape.as_list(), x.dtype))
        return gelu(x, bias)

    monkeypatch.setattr(task, "training_kernels", recorded)
    monkeypatch.setattr(activations, "_gelu", recorded_gelu)
    train = head(DEMO / "sentiment" / "train.jsonl", 16, tmp_path / "train.jsonl")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=8,
                         epochs=1)
    finetune(cfg, pretrained_dir, train, None, str(tmp_path / "out"),
             runtime=RuntimeOptions(mixed_precision="bf16"))
    assert traces(fused_dropout._dropout_mask) == before
    assert gelu_inputs and all(shape[0] is None and dtype == tf.bfloat16
                               for shape, dtype in gelu_inputs)
    finetune(cfg, pretrained_dir, train, None, str(tmp_path / "keras_dropout"),
             runtime=RuntimeOptions(mixed_precision="bf16", sixteen_bit_dropout=False,
                                    fused_layer_norm=True))
    assert held[0][0] > 0 and held[0][1] == 0 and held[1][0] == 0 and held[1][1] > 0
    assert traces(fused_dropout._dropout_mask) == before


@pytest.mark.parametrize("asked, few_shapes, bfloat16, kernels", [
    (RuntimeOptions(), False, False, (False, False, False, False)),
    (RuntimeOptions(), False, True, (True, False, False, True)),
    (RuntimeOptions(), True, True, (True, True, True, False)),
    (RuntimeOptions(sixteen_bit_dropout=False), False, True, (True, False, False, False)),
    (RuntimeOptions(fused_layer_norm=True), False, True, (True, False, True, True)),
    (RuntimeOptions(fused_dropout=False), True, True, (True, False, True, True)),
    (RuntimeOptions(fused_dropout=True), False, False, (False, True, False, False)),
])
def test_a_runs_unset_kernels_follow_its_shapes_and_precision(asked, few_shapes, bfloat16,
                                                              kernels):
    told = asked.for_run(few_shapes=few_shapes, cpu_bfloat16=bfloat16)
    assert (told.fused_gelu, told.fused_dropout, told.fused_layer_norm,
            told.sixteen_bit_dropout) == kernels


def test_fine_tuning_on_long_inputs_calls_the_training_kernels_not_turned_off(
        pretrained_dir, tmp_path, monkeypatch, capsys):
    """From `LONG_INPUT_LENGTH` positions (`ElectraTask.fit` says why) a fine-tuning run
    trains with the training kernels, but for those its options turn off, and with none
    under --jit_compile (XLA compiles the whole step); --sixteen_bit_dropout gives the
    dropouts the fused one leaves to Keras 16-bit draws. (Which kernels its layers hold
    while `fit` runs: a count of the kernels' traces would miss shapes an earlier test in
    the process traced.)"""
    from electra_tf.layers.activations import fused_gelu
    from electra_tf.layers.fused_dropout import FusedDropout
    from electra_tf.layers.fused_layer_normalization import FusedLayerNormalization
    from electra_tf.layers.sixteen_bit_dropout import SixteenBitDropout
    from electra_tf.models import task
    from electra_tf.training import runtime

    monkeypatch.setattr(task, "LONG_INPUT_LENGTH", 32)  # the tiny model has 128 positions
    held = []
    original = task.training_kernels

    @contextlib.contextmanager
    def recorded(model, options):
        with original(model, options):
            layers = list(model._flatten_layers())
            held.append({type(layer).__name__ for layer in layers
                         if isinstance(layer, (FusedDropout, FusedLayerNormalization,
                                               SixteenBitDropout))}
                        | {"fused_gelu" for layer in layers
                           if getattr(layer, "activation", None) is fused_gelu})
            yield

    monkeypatch.setattr(task, "training_kernels", recorded)
    train = head(DEMO / "sentiment" / "train.jsonl", 16, tmp_path / "train.jsonl")
    cfg = FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=8,
                         epochs=1)
    finetune(cfg, pretrained_dir, train, train, str(tmp_path / "out"),
             runtime=RuntimeOptions(fused_dropout=False, sixteen_bit_dropout=True))
    assert held == [{"FusedLayerNormalization", "fused_gelu", "SixteenBitDropout"}]

    class Recorded(Exception):
        """Ends the run once its kernels are known: XLA need not compile its step."""

    def recorded_then_stopped(model, options):
        with recorded(model, options):
            raise Recorded

    monkeypatch.setattr(task, "training_kernels", recorded_then_stopped)
    with pytest.raises(Recorded):
        finetune(cfg, pretrained_dir, train, train, str(tmp_path / "jit"),
                 runtime=RuntimeOptions(jit_compile=True))
    runtime._note_sixteen_bits_unused.cache_clear()
    capsys.readouterr()
    with pytest.raises(Recorded):  # the fused dropout's own 32-bit draws, with a note
        finetune(cfg, pretrained_dir, train, train, str(tmp_path / "fused"),
                 runtime=RuntimeOptions(sixteen_bit_dropout=True))
    assert held[1:] == [set(), {"FusedDropout", "FusedLayerNormalization", "fused_gelu"}]
    assert "note: --sixteen_bit_dropout leaves the fused dropout" in capsys.readouterr().err


def test_fine_tuning_without_a_dev_set_keeps_the_model_unscored(pretrained_dir, tmp_path,
                                                                capsys):
    train = head(DEMO / "sentiment" / "train.jsonl", 16, tmp_path / "train.jsonl")
    out = tmp_path / "out"
    results = finetune(FinetuneConfig(task="text_classification", max_seq_length=16,
                                      batch_size=8, epochs=1), pretrained_dir, train, None,
                       str(out))
    assert results["summary"] == {} and results["trials"][0]["scores"] == {}
    assert "no evaluation data; the model is kept unscored" in capsys.readouterr().out
    assert not os.path.exists(out / "predictions.jsonl")
    clf = ElectraTextClassifier.from_pretrained(str(out))  # kept, ready to predict
    assert clf.predict(["a fine film", "a dull film"]).shape == (2, 2)


def test_the_training_batches_come_without_tf_datas_autotuning():
    """Its thread holds up the end of each epoch's pass (`without_autotuning`)."""
    from electra_tf.runs.finetune import _dataset

    ids = np.zeros((4, 8), np.int32)
    batches = _dataset(({"input_word_ids": ids}, np.zeros(4), None), batch_size=2, seed=0)
    assert len(list(batches)) == 2 and not batches.options().autotune.enabled
