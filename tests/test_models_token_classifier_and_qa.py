"""`ElectraTokenClassifier` (lists of words -> tags) and `ElectraQuestionAnswerer`
(question + context -> answer text) from Python, and the fine-tuned runs of
`electra-finetune` loaded as them: the same predictions as the command line wrote."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import electra_tf
from conftest import DEMO, QA_CONTEXT, QA_QUESTIONS, autograph_conversions, read_jsonl
from electra_tf.errors import ConfigError
from electra_tf.finetuning import readers
from electra_tf.models import question_answerer, task

CONTEXT = ("The president gave a speech to the congress about the economy. "
           "The nation was strong and the people were free.")


def _conll(n):
    return readers.read_conll(str(DEMO / "japanese_ner" / "train.conll"), -1)[:n]


def test_tagger_fits_words_and_tags_and_answers_iob2(pretrained_dir):
    # Seeded: a head drawn after other tests' draws scored no word right after its three
    # steps (which tests ran before in the process decided it).
    keras.utils.set_random_seed(0)
    sentences = _conll(16)
    words, tags = [s.words for s in sentences], [s.tags for s in sentences]
    labels = electra_tf.ElectraTokenClassifier.labels_for(tags)
    assert "S-" + labels[-1][2:] in labels  # span tags train as BIOES (official)
    tagger = electra_tf.ElectraTokenClassifier.from_pretrained(
        pretrained_dir, label_names=labels, sequence_length=24)
    with autograph_conversions() as converted:  # the datasets' preprocessing as written
        history = tagger.fit(words, tags, batch_size=8, epochs=1, verbose=0,
                             validation_data=(words[:4], tags[:4]))
    assert converted == []
    assert int(tagger.optimizer.iterations) == 2
    tagger.fit(words[:8], tags[:8], batch_size=8, shuffle=False, verbose=0)  # in order
    assert int(tagger.optimizer.iterations) == 3
    assert {"loss", "accuracy", "val_loss", "val_accuracy"} <= set(history.history)
    predicted = tagger.predict(words[:6], batch_size=4, verbose=0)
    # One tag per word, also for words past the 22 pieces that fit ("O").
    assert [len(p) for p in predicted] == [len(w) for w in words[:6]]
    assert {t for p in predicted for t in p} <= set(tagger.output_tags())
    assert not any(t.startswith(("S-", "E-")) for p in predicted for t in p)  # IOB2 out
    # evaluate on lists (packed eagerly) scores as on their dataset (keras-hub's map).
    scores = tagger.evaluate(words[:6], tags[:6], batch_size=4, verbose=0, return_dict=True)
    streamed = tagger.evaluate(tagger.examples_dataset(words[:6], tags[:6]).ragged_batch(4),
                               verbose=0, return_dict=True)
    assert scores == pytest.approx(streamed, rel=1e-5) and 0 < scores["accuracy"] <= 1
    # Batches of 5, 5 and then 9 words at most answer as one batch does.
    uneven = [words[0][:3], words[1][:5], words[2][:2], words[3][:5], words[4][:1],
              (words[5] * 9)[:9]]
    assert tagger.predict(uneven, batch_size=2, verbose=0) == tagger.predict(
        uneven, batch_size=6, verbose=0)
    with pytest.raises(ConfigError, match="lists of words"):
        tagger.predict(["a sentence as one string"])
    with pytest.raises(ConfigError, match="not among label_names"):
        tagger.fit([["x"]], [["B-NOPE"]], verbose=0)


def test_the_tagger_reads_up_to_the_last_real_token_with_the_same_logits(pretrained_dir,
                                                                         monkeypatch):
    """The encoder reads each batch up to its last real token (a short sentence packed
    to 24 positions is mostly padding): the logits at the real positions, the loss and the
    predictions are those of the whole padded batch; the cut positions' logits are zeros."""
    tagger = electra_tf.ElectraTokenClassifier.from_pretrained(
        pretrained_dir, label_names=["O", "B-X", "I-X"], sequence_length=24)
    tagger.compile_official_recipe(total_steps=1)
    words, tags = [["a", "fine", "film"], ["dull"]], [["O", "B-X", "I-X"], ["O"]]
    packed = tagger.preprocess_samples(tf.ragged.constant(words))
    lengths = []
    original_call = tagger.encoder.call
    monkeypatch.setattr(tagger.encoder, "call", lambda inputs, **kw: (
        lengths.append(inputs["input_mask"].shape[1]) or original_call(inputs, **kw)))
    cut = tagger(packed, training=False).numpy()
    assert lengths == [int(packed["input_mask"][0].numpy().sum())] and lengths[0] < 24
    assert not cut[:, lengths[0]:].any()
    answers = [tagger.evaluate(words, tags, verbose=0, return_dict=True),
               tagger.predict(words, verbose=0)]
    monkeypatch.setattr(task, "without_padding_tail", lambda inputs, min_length, **_: inputs)
    whole = tagger(packed, training=False).numpy()
    assert lengths[-1] == 24
    real = packed["input_mask"].numpy().astype(bool)
    np.testing.assert_allclose(cut[real], whole[real], atol=1e-5)
    tagger.make_test_function(force=True), tagger.make_predict_function(force=True)
    scores = tagger.evaluate(words, tags, verbose=0, return_dict=True)
    assert answers[0] == pytest.approx(scores, rel=1e-5)
    assert answers[1] == tagger.predict(words, verbose=0)


def test_question_answerer_fits_and_answers_spans_of_the_context(pretrained_dir):
    qa = electra_tf.ElectraQuestionAnswerer.from_pretrained(
        pretrained_dir, sequence_length=32, doc_stride=12)
    questions = ["Who gave a speech?", "What was strong?", "What color was the sky?"]
    contexts = [CONTEXT] * 3
    qa.fit((questions, contexts), ["The president", ("The nation", CONTEXT.index("The nation")), None],
           batch_size=8, epochs=1, verbose=0)
    assert qa.unanswerable  # fit saw a question without answer
    answers = qa.predict((questions, contexts), verbose=0)
    assert len(answers) == 3 and all(a in CONTEXT for a in answers)
    with pytest.raises(ConfigError, match="does not occur in its context"):
        qa.fit((["Who?"], [CONTEXT]), ["nobody"], verbose=0)


@pytest.mark.parametrize("joint_prediction", [True, False])
def test_the_question_answerer_reads_up_to_the_last_real_token_with_the_same_outputs(
        pretrained_dir, monkeypatch, joint_prediction):
    """The encoder reads each batch up to its last real token (at least a beam's width);
    the beams, the no-answer logits and the span logits (given back at the packed length,
    the cut positions scoring as outside ones) are those of the whole padded batch."""
    qa = electra_tf.ElectraQuestionAnswerer.from_pretrained(
        pretrained_dir, sequence_length=64, joint_prediction=joint_prediction)
    qa.build_weights()
    _, features = qa.features(["Who gave a speech?", "What was strong?"], [CONTEXT] * 2)
    inputs = features.inputs
    training = {**inputs, "start_positions": features.start_positions}
    lengths = []
    original_call = qa.encoder.call
    monkeypatch.setattr(qa.encoder, "call", lambda inputs, **kw: (
        lengths.append(inputs["input_mask"].shape[1]) or original_call(inputs, **kw)))
    cut = [qa(x, training=False) for x in (inputs, training)]
    assert lengths == [int(inputs["input_mask"].sum(1).max())] * 2 and lengths[0] < 64
    # Fewer real tokens than the beam's 20: the cut keeps a beam's width.
    _, short = qa.features(["a"], ["b"])
    assert short.inputs["input_mask"].sum() < qa.beam_size
    assert qa.predict((["a"], ["b"]), verbose=0)[0] in ("", "b")
    monkeypatch.setattr(task, "without_padding_tail", lambda inputs, min_length, **_: inputs)
    whole = [qa(x, training=False) for x in (inputs, training)]
    real = inputs["input_mask"].astype(bool)
    for cut_outputs, whole_outputs in zip(cut, whole):
        for name, value in whole_outputs.items():
            value, cut_value = value.numpy(), cut_outputs[name].numpy()
            assert cut_value.shape == value.shape, name
            if name.endswith("_index"):  # the same, but for ties within rounding
                log_probs = whole_outputs[name.replace("_index", "_log_probs")].numpy()
                tied = np.isclose(log_probs[..., 1:], log_probs[..., :-1], atol=1e-5)
                untied = ~(np.pad(tied, [(0, 0)] * (tied.ndim - 1) + [(1, 0)])
                           | np.pad(tied, [(0, 0)] * (tied.ndim - 1) + [(0, 1)]))
                np.testing.assert_array_equal(cut_value[untied], value[untied])
            elif name in ("start_logits", "end_logits"):
                np.testing.assert_allclose(cut_value[real], value[real], atol=1e-4)
                assert (cut_value[:, lengths[0]:] == question_answerer.OUTSIDE_LOGIT).all()
                assert (cut_value[~real] < question_answerer.OUTSIDE_LOGIT / 2).all()
            else:
                np.testing.assert_allclose(cut_value, value, atol=1e-4)


def test_the_fine_tuned_tagging_run_predicts_as_the_command_line_did(finetuned):
    tagger = electra_tf.ElectraTokenClassifier.from_pretrained(str(finetuned / "ner"))
    records = read_jsonl(finetuned / "ner" / "predictions.jsonl")
    sentences = readers.read_conll(str(finetuned / "ner.conll"), -1)
    assert tagger.predict([s.words for s in sentences], verbose=0) == [
        r["prediction"] for r in records]
    with pytest.raises(ConfigError, match="ElectraTextClassifier.from_pretrained"):
        electra_tf.ElectraTokenClassifier.from_pretrained(str(finetuned / "cls"))


def test_the_fine_tuned_qa_run_answers_as_the_command_line_did(finetuned):
    qa = electra_tf.ElectraQuestionAnswerer.from_pretrained(str(finetuned / "qa"))
    records = read_jsonl(finetuned / "qa" / "predictions.jsonl")
    answers = qa.predict(([q["question"] for q in QA_QUESTIONS],
                          [QA_CONTEXT] * len(QA_QUESTIONS)), verbose=0)
    assert answers == [r["prediction"] for r in records]
    assert qa.unanswerable and qa.doc_stride == 12
    np.testing.assert_equal(qa.no_answer_threshold, -2.75)
