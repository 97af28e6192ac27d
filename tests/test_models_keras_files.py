"""Every public model saved with `model.save("x.keras")` and loaded by
`keras.saving.load_model` in a fresh process answers as it did (the tokenizer and
preprocessor travel inside the task models: their raw-string answers depend on both)."""

import json

import numpy as np
import tensorflow as tf

from conftest import QA_CONTEXT, QA_QUESTIONS, run_command
from electra_tf.models import (ElectraEncoder, ElectraPretrainer, ElectraQuestionAnswerer,
                               ElectraTextClassifier, ElectraTokenClassifier)

WORDS = [["the", "nation", "was", "strong"], ["free", "people"]]
TEXTS = ["a delightful film", "the people were free", ""]
PAIRS = ["was it?", "", "an empty text"]
QUESTIONS = ([q["question"] for q in QA_QUESTIONS], [QA_CONTEXT] * len(QA_QUESTIONS))

LOAD_PY = """
import json, sys
import numpy as np
import keras
import tensorflow as tf
import electra_tf.models  # registers the Keras classes
inputs, words, questions, texts, pairs = json.loads(sys.argv[2])
inputs = {k: np.asarray(v, np.int32) for k, v in inputs.items()}
out = {}
for name in ("encoder", "pretrainer", "classifier", "regressor", "tagger", "qa"):
    model = keras.saving.load_model(f"{sys.argv[1]}/{name}.keras")
    if name == "encoder":
        out[name] = model(inputs)["sequence_output"].numpy()
    elif name == "classifier":
        out[name] = model.predict(texts, verbose=0)
    elif name == "regressor":
        out[name] = model.predict((texts, pairs), verbose=0)
    elif name == "pretrainer":
        out[name] = model.discriminator(inputs)["sequence_output"].numpy()
    elif name == "tagger":
        out[name] = model(model.preprocess_samples(tf.ragged.constant(words))).numpy()
        print(json.dumps({"tags": model.predict(words, verbose=0)}))
    else:
        out[name] = model(inputs)["no_answer_logit"].numpy()
        print(json.dumps({"answers": model.predict(tuple(questions), verbose=0)}))
np.savez(f"{sys.argv[1]}/out.npz", **out)
"""


def test_each_public_model_round_trips_in_a_fresh_process(pretrained_dir, tmp_path):
    ids = np.array([[2, 15, 27, 3, 0, 0], [2, 9, 3, 31, 40, 3]], np.int32)
    inputs = {"input_word_ids": ids, "input_mask": (ids > 0).astype(np.int32),
              "input_type_ids": np.array([[0] * 6, [0, 0, 0, 1, 1, 1]], np.int32)}
    encoder = ElectraEncoder.from_pretrained(pretrained_dir)
    pretrainer = ElectraPretrainer.from_pretrained(pretrained_dir)
    classifier = ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=16)
    regressor = ElectraTextClassifier.from_pretrained(
        pretrained_dir, num_classes=1, sequence_length=16, label_range=(0.0, 5.0),
        text_pairs=True)
    tagger = ElectraTokenClassifier.from_pretrained(
        pretrained_dir, label_names=["O", "B-X", "I-X", "E-X", "S-X"], sequence_length=8)
    qa = ElectraQuestionAnswerer.from_pretrained(pretrained_dir, sequence_length=32,
                                                 doc_stride=12, unanswerable=True)
    expected = {
        "encoder": encoder(inputs)["sequence_output"].numpy(),
        "pretrainer": pretrainer.discriminator(inputs)["sequence_output"].numpy(),
        "classifier": classifier.predict(TEXTS, verbose=0),
        "regressor": regressor.predict((TEXTS, PAIRS), verbose=0),
        "tagger": tagger(tagger.preprocess_samples(tf.ragged.constant(WORDS))).numpy(),
        "qa": qa(inputs)["no_answer_logit"].numpy()}
    tags, answers = tagger.predict(WORDS, verbose=0), qa.predict(QUESTIONS, verbose=0)
    for name, model in [("encoder", encoder), ("pretrainer", pretrainer),
                        ("classifier", classifier), ("regressor", regressor),
                        ("tagger", tagger), ("qa", qa)]:
        model.save(tmp_path / f"{name}.keras")

    stdout = run_command("python", "-c", LOAD_PY, tmp_path, json.dumps(
        [{k: v.tolist() for k, v in inputs.items()}, WORDS, QUESTIONS, TEXTS, PAIRS])).stdout
    printed = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert printed == [{"tags": tags}, {"answers": answers}]
    loaded = np.load(tmp_path / "out.npz")
    for name, value in expected.items():
        np.testing.assert_allclose(loaded[name], value, atol=1e-6, err_msg=name)


def test_task_models_build_their_heads_without_a_pass_through_their_encoder(
        pretrained_dir, monkeypatch):
    """Heads get their weights when the model is made, named as a forward pass would name
    them: building a model whose encoder is built runs no forward pass (an eager one cost
    0.26 s of ELECTRA-Small's first `predict`), and a pass afterwards creates nothing."""
    for task, options in ((ElectraTextClassifier, {"num_classes": 3}),
                          (ElectraTokenClassifier, {"num_classes": 2}),
                          (ElectraQuestionAnswerer, {}),
                          (ElectraQuestionAnswerer, {"joint_prediction": False})):
        model = task.from_pretrained(pretrained_dir, sequence_length=32, **options)
        with monkeypatch.context() as patched:
            patched.setattr(task, "call", lambda *args, **kwargs: 1 / 0)
            model.build_weights()
        paths = sorted(w.path for w in model.weights)
        model(model.example_inputs(np.full((2, 8), 5, np.int32)))
        assert sorted(w.path for w in model.weights) == paths
        heads = [path for path in paths if not path.startswith(model.encoder.name)]
        assert heads and all(path.startswith(f"{model.name}/") for path in heads)
