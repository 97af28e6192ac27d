"""`electra-predict`: a fine-tuning run or its serving export, raw inputs in, the model's own
predictions out, one JSON line per input."""

import numpy as np
import pytest

from conftest import QA_CONTEXT, QA_QUESTIONS, jsonl, read_jsonl, run_command
from electra_tf.errors import ConfigError, TaskDataError
from electra_tf.models.finetuned import load_finetuned
from electra_tf.runs.predict import predict_file

ROWS = [{"text": "a wonderful, moving film", "id": 7},
        {"text": "dull and far too long", "text_pair": "I left early."},
        {"text": "the plot? it has none.", "text_pair": ""}]


def test_classifier_run_and_its_export_predict_what_the_model_does(finetuned, tmp_path):
    from electra_tf.export.classifier import export_classifier

    inputs = jsonl(tmp_path / "in.jsonl", ROWS * 3)  # 9 inputs, batches of 4
    result = run_command("electra-predict", "--checkpoint", finetuned / "cls", "--input",
                         inputs, "--output", tmp_path / "run.jsonl", "--batch_size", "4")
    assert "Predicted 9 inputs (classification)" in result.stdout
    lines = read_jsonl(tmp_path / "run.jsonl")
    assert [{k: r[k] for k in ROWS[i % 3]} for i, r in enumerate(lines)] == ROWS * 3

    model = load_finetuned(str(finetuned / "cls")).model
    expected = model.predict(([r["text"] for r in ROWS], [r.get("text_pair", "")
                                                          for r in ROWS]), verbose=0)
    for line, probabilities in zip(lines, np.concatenate([expected] * 3)):
        np.testing.assert_allclose(line["probabilities"], probabilities, atol=1e-4)
        assert line["prediction"] == ["neg", "pos"][int(np.argmax(probabilities))]

    export_classifier(str(finetuned / "cls"), str(tmp_path / "serving" / "sentiment"))
    predict_file(str(tmp_path / "serving" / "sentiment"), inputs, str(tmp_path / "exp.jsonl"))
    for ours, served in zip(lines, read_jsonl(tmp_path / "exp.jsonl")):
        assert served["prediction"] == ours["prediction"]
        np.testing.assert_allclose(served["probabilities"], ours["probabilities"], atol=1e-4)


def test_regression_tagging_and_qa_runs_predict(finetuned, tmp_path):
    texts = tmp_path / "scores.txt"
    texts.write_text("score 1\n\nscore 4\n", encoding="utf-8")
    predict_file(str(finetuned / "reg"), str(texts), str(tmp_path / "reg.jsonl"))
    scores = [r["prediction"] for r in read_jsonl(tmp_path / "reg.jsonl")]
    expected = load_finetuned(str(finetuned / "reg")).model.predict(["score 1", "score 4"],
                                                                   verbose=0)
    np.testing.assert_allclose(scores, expected, atol=1e-4)

    result = predict_file(str(finetuned / "ner"), str(finetuned / "ner.conll"),
                          str(tmp_path / "ner.jsonl"), batch_size=5)
    rows = read_jsonl(tmp_path / "ner.jsonl")
    assert result["kind"] == "tagging" and len(rows) == 24
    tagger = load_finetuned(str(finetuned / "ner")).model
    assert [r["prediction"] for r in rows] == tagger.predict([r["words"] for r in rows],
                                                             verbose=0)
    assert all(len(r["words"]) == len(r["prediction"]) for r in rows)

    predict_file(str(finetuned / "qa"), str(finetuned / "qa.json"), str(tmp_path / "qa.jsonl"))
    answers = read_jsonl(tmp_path / "qa.jsonl")
    assert [a["id"] for a in answers] == [q["id"] for q in QA_QUESTIONS]
    qa = load_finetuned(str(finetuned / "qa")).model
    assert [a["prediction"] for a in answers] == qa.predict(
        ([q["question"] for q in QA_QUESTIONS], [QA_CONTEXT] * 3), verbose=0)


def test_bad_inputs_are_one_line_and_nothing_is_overwritten(finetuned, tmp_path):
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    inputs = jsonl(tmp_path / "in.jsonl", [{"text": "fine", "text_pair": "a pair"}])
    with pytest.raises(ConfigError, match="already exists"):
        predict_file(str(finetuned / "cls"), inputs, str(taken))
    assert taken.read_text() == "mine\n"
    with pytest.raises(TaskDataError, match="fine-tuned on single texts"):
        predict_file(str(finetuned / "reg"), inputs, str(tmp_path / "out.jsonl"))
    assert not (tmp_path / "out.jsonl").exists()
    no_text = jsonl(tmp_path / "bad.jsonl", [{"sentence": "x"}])
    result = run_command("electra-predict", "--checkpoint", finetuned / "cls", "--input",
                         no_text, "--output", tmp_path / "o.jsonl", check=False)
    assert result.returncode != 0 and "bad.jsonl:1: no string field 'text'" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "o.jsonl").exists()
    with pytest.raises(ConfigError, match="neither a fine-tuning run"):
        predict_file(str(tmp_path), inputs, str(tmp_path / "o.jsonl"))
