"""Fine-tuned runs -> Hugging Face task models: `transformers` (CPU torch) predicts what we
predict, through its own tokenizer and pipelines."""

import json

import numpy as np
import pytest
import tensorflow as tf

from conftest import QA_CONTEXT, run_command
from electra_tf.export.huggingface import export_huggingface
from electra_tf.errors import ConfigError
from electra_tf.models.finetuned import load_finetuned

TEXTS = ["a wonderful, moving film", "dull and far too long", "the plot? it has none."]


def _hf_inputs(tokenizer, texts, pairs=None):
    return tokenizer(texts, pairs, padding=True, return_tensors="pt")


def _packed(hf_inputs) -> dict:
    """The inputs HF's tokenizer made, as our models take them."""
    return {"input_word_ids": hf_inputs["input_ids"].numpy().astype(np.int32),
            "input_mask": hf_inputs["attention_mask"].numpy().astype(np.int32),
            "input_type_ids": hf_inputs["token_type_ids"].numpy().astype(np.int32)}


def test_classifier_run_converts_and_the_pipeline_predicts_ours(finetuned, tmp_path):
    import torch
    import transformers

    out = tmp_path / "hf"
    result = run_command("electra-convert", "--to", "huggingface", "--checkpoint",
                         finetuned / "cls", "--output", out)
    assert "ElectraForSequenceClassification" in result.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["id2label"] == {"0": "neg", "1": "pos"}

    ours = load_finetuned(str(finetuned / "cls")).model  # trained on texts and pairs
    pairs = ["I loved it.", "Not for me.", "Quite."]
    hf_model = transformers.ElectraForSequenceClassification.from_pretrained(out).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    for text, pair in [(TEXTS[0], None), *zip(TEXTS, pairs)]:
        inputs = _hf_inputs(tokenizer, [text], [pair] if pair else None)
        if pair:  # the same pieces as ours
            packed = ours.preprocessor((tf.constant([text]), tf.constant([pair])), y=None)
            width = inputs["input_ids"].shape[1]
            np.testing.assert_array_equal(inputs["input_ids"][0].numpy(),
                                          packed["input_word_ids"][0][:width])
        with torch.no_grad():
            logits = hf_model(**inputs).logits.numpy()
        np.testing.assert_allclose(logits[0], ours(_packed(inputs))[0], atol=1e-4)

    probabilities = ours.predict((TEXTS, pairs), verbose=0)
    classify = transformers.pipeline("text-classification", model=str(out), top_k=None,
                                     device="cpu")
    answers = classify([{"text": t, "text_pair": p} for t, p in zip(TEXTS, pairs)])
    for scores, expected in zip(answers, probabilities):
        by_label = {s["label"]: s["score"] for s in scores}
        np.testing.assert_allclose([by_label["neg"], by_label["pos"]], expected, atol=1e-4)


def test_regression_run_scores_in_the_labels_range(finetuned, tmp_path):
    import transformers

    export_huggingface(str(finetuned / "reg"), str(tmp_path / "hf"))
    ours = load_finetuned(str(finetuned / "reg")).model
    texts = ["score 1", "score 4", "nothing"]
    expected = ours.predict(texts, verbose=0)
    pipeline = transformers.pipeline("text-classification", model=str(tmp_path / "hf"),
                                     function_to_apply="none", device="cpu")
    scores = [r["score"] for r in pipeline(texts)]
    np.testing.assert_allclose(scores, expected, atol=1e-4)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["problem_type"] == (
        "regression")


def test_tagging_run_converts_with_its_tags(finetuned, tmp_path):
    import torch
    import transformers

    export_huggingface(str(finetuned / "ner"), str(tmp_path / "hf"))
    ours = load_finetuned(str(finetuned / "ner")).model
    words = [w.split("\t")[0] for w in
             (finetuned / "ner.conll").read_text(encoding="utf-8").split("\n\n")[0].splitlines()]
    hf_model = transformers.ElectraForTokenClassification.from_pretrained(
        tmp_path / "hf").eval()
    assert [hf_model.config.id2label[i] for i in range(len(ours.label_names))] == (
        ours.label_names)
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    inputs = tokenizer([words], is_split_into_words=True, truncation=True,
                       return_tensors="pt")
    packed, starts = ours.preprocessor.pack_words(tf.ragged.constant([words], tf.string))
    width = inputs["input_ids"].shape[1]
    np.testing.assert_array_equal(inputs["input_ids"][0].numpy(),
                                  packed["input_word_ids"][0][:width])
    with torch.no_grad():
        logits = hf_model(**inputs).logits.numpy()[0]
    np.testing.assert_allclose(logits, ours(_packed(inputs))[0].numpy(), atol=1e-4)
    # The first piece of each word carries its tag, in both.
    first = [s for s in starts[0].numpy() if s >= 0]
    tags = [ours.label_names[i] for i in logits[first].argmax(-1)]
    expected = ours.predict([words], verbose=0)[0][:len(first)]
    assert [t.replace("S-", "B-").replace("E-", "I-") for t in tags] == expected


def test_qa_runs_convert_without_joint_prediction_only(finetuned, pretrained_dir, tmp_path):
    import torch
    import transformers

    from electra_tf.finetuning.config import FinetuneConfig
    from electra_tf.runs.finetune import finetune

    with pytest.raises(ConfigError, match="--noqa_joint_prediction"):
        export_huggingface(str(finetuned / "qa"), str(tmp_path / "joint"))
    assert not (tmp_path / "joint").exists()

    finetune(FinetuneConfig(task="squad_v2", max_seq_length=32, doc_stride=12, batch_size=8,
                            epochs=1, qa_joint_prediction=False),
             pretrained_dir, str(finetuned / "qa.json"), None, str(tmp_path / "qa"))
    report = export_huggingface(str(tmp_path / "qa"), str(tmp_path / "hf"))
    assert report["pipeline_task"] == "question-answering"
    assert any("no-answer classifier" in note for note in report["notes"])

    ours = load_finetuned(str(tmp_path / "qa")).model
    hf_model = transformers.ElectraForQuestionAnswering.from_pretrained(
        tmp_path / "hf").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    inputs = tokenizer(["Who gave a speech?"], [QA_CONTEXT[:60]], return_tensors="pt")
    with torch.no_grad():
        theirs = hf_model(**inputs)
    mine = ours(_packed(inputs))
    context = inputs["token_type_ids"][0].numpy() == 1  # where ours does not mask
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(getattr(theirs, name)[0].numpy()[context],
                                   mine[name][0].numpy()[context], atol=1e-4)
    answer = transformers.pipeline("question-answering", model=str(tmp_path / "hf"),
                                   device="cpu")(question="Who gave a speech?",
                                                 context=QA_CONTEXT)
    assert answer["answer"] in QA_CONTEXT


def test_a_fine_tuned_run_refuses_other_targets_and_existing_outputs(finetuned, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "mine.txt").write_text("keep")
    codes = run_command("electra-convert", "--to", "official",
                        "--checkpoint", finetuned / "cls", "--output", tmp_path / "tf1",
                        check=False)
    assert codes.returncode == 2 and "converts --to huggingface" in codes.stderr
    with pytest.raises(ConfigError, match="already exists"):
        export_huggingface(str(finetuned / "cls"), str(tmp_path / "taken"))
    assert (tmp_path / "taken" / "mine.txt").read_text() == "keep"
