import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import run_command
from saved_models import signature_defs, tensor_specs

TEXTS = ["The quick brown fox jumps over the lazy dog.", "Short one.", "A third text, longer "
         "than the others so that it is cut to the sequence length " * 3]
PAIRS = ["Is it a fox?", "Yes.", "No, it is a much longer second segment " * 4]


@pytest.fixture(scope="module")
def exported(encoder_export):
    return encoder_export


def reference_outputs(pretrained_dir, seq_length=32):
    """The in-training model's outputs on TEXTS and (TEXTS, PAIRS), as fine-tuning encodes."""
    from electra_tf.finetuning.features import Encoder
    from electra_tf.run_dir import load_encoder, open_pretrained
    from electra_tf.text.tokenizer import ElectraTokenizer

    pretrained = open_pretrained(pretrained_dir)
    config = pretrained.config
    encoder = load_encoder(pretrained, config, dropout=config.dropout)
    packer = Encoder(ElectraTokenizer.of_model(pretrained), pretrained.special_ids, seq_length,
                     truncation="round_robin")  # TF Hub's convention, as the preprocessor
    results = {}
    for name, pairs in (("single", None), ("pair", PAIRS)):
        inputs = packer.encode_pairs(TEXTS, pairs)
        outputs = encoder(inputs, training=False)
        results[name] = {"sequence_output": np.asarray(outputs["sequence_output"]),
                         "pooled_output": np.asarray(outputs["pooled_output"]), **inputs}
    return results, len(encoder.weights), sum(int(np.prod(w.shape)) for w in encoder.weights)


FRESH_PROCESS = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer ops)
    base, out, texts, pairs = sys.argv[1], sys.argv[2], sys.argv[3].split("|"), sys.argv[4].split("|")
    preprocess = tf.saved_model.load(base + "/preprocess")
    encoder = tf.saved_model.load(base + "/encoder")
    single = preprocess(tf.constant(texts))
    tokenize = preprocess.tokenize
    pair = preprocess.bert_pack_inputs([tokenize(tf.constant(texts)), tokenize(tf.constant(pairs))],
                                       seq_length=32)
    saved = {}
    for name, inputs in (("single", single), ("pair", pair)):
        outputs = encoder(inputs, training=False)
        for key in ("sequence_output", "pooled_output", "default"):
            saved[f"{name}/{key}"] = outputs[key].numpy()
        for key, value in inputs.items():
            saved[f"{name}/{key}"] = value.numpy()
    saved["encoder_outputs"] = len(encoder(single, training=False)["encoder_outputs"])
    dropout_a = encoder(single, training=True)["sequence_output"].numpy()
    dropout_b = encoder(single, training=True)["sequence_output"].numpy()
    saved["dropout_changes"] = float(np.abs(dropout_a - dropout_b).max())
    saved["short"] = preprocess.bert_pack_inputs([tokenize(tf.constant(texts))],
                                                 seq_length=16)["input_word_ids"].numpy()
    saved["num_variables"] = len(encoder.variables)
    saved["num_trainable"] = len(encoder.trainable_variables)
    saved["num_parameters"] = sum(int(np.prod(v.shape)) for v in encoder.trainable_variables)
    np.savez(out, **saved)
""")


def test_exported_encoder_matches_training_model_in_a_fresh_process(tmp_path, exported,
                                                                    pretrained_dir):
    run_command("python", "-c", FRESH_PROCESS, exported, tmp_path / "out.npz",
                "|".join(TEXTS), "|".join(PAIRS))
    saved = np.load(tmp_path / "out.npz")
    reference, num_weights, num_parameters = reference_outputs(pretrained_dir)
    for name, outputs in reference.items():
        for key in ("input_word_ids", "input_mask", "input_type_ids"):
            np.testing.assert_array_equal(saved[f"{name}/{key}"], outputs[key], err_msg=key)
        for key in ("sequence_output", "pooled_output"):
            np.testing.assert_allclose(saved[f"{name}/{key}"], outputs[key], atol=1e-5,
                                       rtol=0, err_msg=f"{name}/{key}")
        np.testing.assert_array_equal(saved[f"{name}/default"], saved[f"{name}/pooled_output"])
    assert saved["encoder_outputs"] == 2  # tiny preset: one output per layer
    assert saved["dropout_changes"] > 0  # training=True turns dropout on
    assert saved["short"].shape == (3, 16)
    # The discriminator only: exactly its weights, no generator or head variable anywhere.
    assert saved["num_trainable"] == num_weights == saved["num_variables"]
    assert saved["num_parameters"] == num_parameters


def test_signatures_have_concrete_dtypes(exported):
    ids = ("DT_INT32", (-1, -1))
    encoder = signature_defs(os.path.join(exported, "encoder"))["serving_default"]
    assert tensor_specs(encoder.inputs) == {name: ids for name in (
        "input_word_ids", "input_mask", "input_type_ids")}
    assert tensor_specs(encoder.outputs) == {
        "sequence_output": ("DT_FLOAT", (-1, -1, 64)), "pooled_output": ("DT_FLOAT", (-1, 64)),
        "default": ("DT_FLOAT", (-1, 64)), "encoder_outputs_0": ("DT_FLOAT", (-1, -1, 64)),
        "encoder_outputs_1": ("DT_FLOAT", (-1, -1, 64))}
    preprocess = signature_defs(os.path.join(exported, "preprocess"))["serving_default"]
    assert tensor_specs(preprocess.inputs) == {"strings": ("DT_STRING", (-1,))}
    assert tensor_specs(preprocess.outputs) == {name: ("DT_INT32", (-1, 32)) for name in (
        "input_word_ids", "input_mask", "input_type_ids")}
    assert os.path.isfile(os.path.join(exported, "encoder", "assets", "vocab.txt"))


def test_keras_tfsmlayer_runs_the_encoder(exported, pretrained_dir):
    import keras
    import tensorflow_text  # noqa: F401

    layer = keras.layers.TFSMLayer(os.path.join(exported, "encoder"),
                                   call_endpoint="serve")
    reference, _, _ = reference_outputs(pretrained_dir)
    inputs = {k: reference["single"][k] for k in
              ("input_word_ids", "input_mask", "input_type_ids")}
    outputs = layer(inputs)
    np.testing.assert_allclose(outputs["sequence_output"],
                               reference["single"]["sequence_output"], atol=1e-5)
    assert "encoder_outputs_1" in outputs


HUB_FINE_TUNING = textwrap.dedent("""
    import os, sys
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    import numpy as np
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # noqa: F401
    import tf_keras
    base = sys.argv[1]
    text = tf_keras.layers.Input(shape=(), dtype=tf.string)
    inputs = hub.KerasLayer(base + "/preprocess")(text)
    encoder = hub.KerasLayer(base + "/encoder", trainable=True)
    pooled = encoder(inputs)["pooled_output"]
    model = tf_keras.Model(text, tf_keras.layers.Dense(2)(pooled))
    model.compile(optimizer=tf_keras.optimizers.Adam(1e-3),
                  loss=tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.numpy().copy() for w in encoder.trainable_weights]
    texts = tf.constant(["good movie", "bad movie"] * 4)
    labels = np.array([1, 0] * 4)
    model.fit(texts, labels, epochs=1, batch_size=8, verbose=0)
    changed = sum(not np.array_equal(a, w.numpy()) for a, w in zip(before, encoder.trainable_weights))
    print("trainable", len(encoder.trainable_weights), "changed", changed)
""")


def test_tensorflow_hub_keras_layer_fine_tunes_it(exported):
    result = subprocess.run([sys.executable, "-c", HUB_FINE_TUNING, exported],
                            capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert result.returncode == 0, result.stderr[-3000:]
    counts = result.stdout.split()
    trainable, changed = int(counts[counts.index("trainable") + 1]), int(counts[-1])
    assert trainable > 0 and changed == trainable, result.stdout


def test_export_never_deletes_or_overwrites_an_existing_directory(pretrained_dir, tmp_path,
                                                                  monkeypatch):
    from conftest import run_app
    from electra_tf.errors import ConfigError
    from electra_tf.export.encoder import export_encoder

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("not the exporter's")
    monkeypatch.chdir(mine)
    with pytest.raises(ConfigError, match="'.' already exists and is not an empty directory"):
        export_encoder(pretrained_dir, ".")
    runs = run_app("electra_tf_cli.export_encoder",
                   ["--checkpoint", pretrained_dir, "--output", mine],
                   ["--checkpoint", pretrained_dir, "--output", mine / "keep.txt"])
    for run in runs:
        assert run["code"] == 2 and "Traceback" not in run["stderr"], run
        assert "already exists and is not an empty directory" in run["stderr"]
    assert os.listdir(mine) == ["keep.txt"]
    assert (mine / "keep.txt").read_text() == "not the exporter's"
