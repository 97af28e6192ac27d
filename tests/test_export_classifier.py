"""export_classifier: TF Serving versions of fine-tuned models, proven through the TF1
session loader that TF Serving's C++ loader mirrors, and the serving protos."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from conftest import DEMO, ROOT, saved_model_cli
from electra_tf.export import classifier as export_lib
from electra_tf import run_dir
from electra_tf.finetuning import features
from electra_tf.finetuning.config import FinetuneConfig
from electra_tf.runs.finetune import finetune

# Empty, very long, Korean and emoji texts; pairs given, empty (a single text) and mixed.
TEXTS = ["", "the food was great and the service friendly", "word " * 400,
         "음식이 정말 맛있어요 😀", "terrible."]
PAIRS = ["", "a second segment", "", "pair " * 300, "나쁘다"]
SERVING_DIR = ROOT / "export" / "serving"


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def finetuned(pretrained_dir, tmp_path_factory):
    """Tiny fine-tuned runs: pair classification, regression and tagging."""
    root = tmp_path_factory.mktemp("finetuned")
    lines = open(DEMO / "sentiment" / "train.jsonl", encoding="utf-8").read().splitlines()
    rows = [json.loads(line) for line in lines[:48]]
    for i, row in enumerate(rows):
        row["label"] = ["neg", "pos"][int(row["label"])]
        if i % 2:
            row["text_pair"] = rows[i - 1]["text"]
    data = jsonl(root / "cls.jsonl", rows)
    cfg = FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=16,
                             epochs=1)
    finetune(cfg, pretrained_dir, data, data, str(root / "cls"))

    scores = jsonl(root / "reg.jsonl",
                   [{"text": f"score {i % 5}", "label": float(i % 5)} for i in range(32)])
    cfg = FinetuneConfig(task="text_regression", max_seq_length=16, batch_size=16,
                             epochs=1)
    finetune(cfg, pretrained_dir, scores, scores, str(root / "reg"))

    conll = root / "ner.conll"
    sentences = open(DEMO / "japanese_ner" / "train.conll", encoding="utf-8").read()
    conll.write_text("\n\n".join(sentences.split("\n\n")[:24]) + "\n\n", encoding="utf-8")
    cfg = FinetuneConfig(task="tagging", max_seq_length=24, batch_size=8, epochs=1)
    finetune(cfg, pretrained_dir, str(conll), str(conll), str(root / "ner"))
    return root


def session_predict(path, feeds, signature="serving_default"):
    """Runs a signature in a fresh process through the TF1 session loader, like TF Serving."""
    script = f"""
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops, as the model server links them
feeds = json.loads(sys.stdin.read())
with tf.compat.v1.Session(graph=tf.Graph()) as session:
    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], {str(path)!r})
    signature = meta.signature_def[{signature!r}]
    names = sorted(signature.outputs)
    values = session.run([signature.outputs[n].name for n in names],
                         {{signature.inputs[k].name: v for k, v in feeds.items()}})
    print(json.dumps({{n: (v.astype(str) if v.dtype.kind in "SO" else v).tolist()
                      for n, v in zip(names, values)}}))
"""
    result = subprocess.run([sys.executable, "-c", script], input=json.dumps(feeds),
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def restore(model_dir):
    """The fine-tuned Keras model and the training-side (eager, numpy) feature encoder."""
    from electra_tf.text.tokenizer import make_tokenizer

    restored = run_dir.load_finetuned(model_dir)
    tokenizer = make_tokenizer(restored.vocab_path, restored.encoder_config.lower_case,
                               restored.encoder_config.strip_accents)
    return restored, features.Encoder(tokenizer, restored.special_ids,
                                      restored.max_seq_length)


def test_classifier_version_serves_raw_text_like_the_keras_model(finetuned, tmp_path):
    base = tmp_path / "serving" / "sentiment"
    result = export_lib.export_classifier(str(finetuned / "cls"), str(base / "1"))
    assert result["version"] == 1 and result["model_name"] == "sentiment"
    outputs = session_predict(base / "1", {"text": TEXTS, "text_pair": PAIRS})

    restored, encoder = restore(str(finetuned / "cls"))
    assert restored.text_pairs
    inputs = encoder.encode_pairs(TEXTS, PAIRS, with_pairs=True)
    expected = tf.nn.softmax(restored.model(inputs, training=False)).numpy()
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
    assert outputs["label_id"] == expected.argmax(-1).tolist()
    assert outputs["label"] == [["neg", "pos"][i] for i in expected.argmax(-1)]

    # The next export takes version 2; --versions 1 then keeps only the newest.
    assert export_lib.export_classifier(str(finetuned / "cls"), str(base))["version"] == 2
    assert export_lib.export_classifier(str(finetuned / "cls"), str(base),
                                        versions=1)["removed"] == [1, 2]
    assert sorted(os.listdir(base)) == ["3"]


def test_signatures_are_concrete_and_warmup_requests_parse(finetuned, tmp_path):
    from tensorflow_serving.apis import prediction_log_pb2

    path = tmp_path / "sentiment" / "1"
    export_lib.export_classifier(str(finetuned / "cls"), str(path))
    assert "serving_default" in saved_model_cli("--dir", str(path), "--all")
    shown = saved_model_cli("--dir", str(path), "--tag_set", "serve", "--signature_def",
                            "serving_default")
    assert "DT_INVALID" not in shown and "unknown_rank" not in shown, shown
    for expected in ("inputs['text'] tensor_info", "inputs['text_pair'] tensor_info",
                     "outputs['probabilities']", "outputs['label_id']",
                     "outputs['label']", "dtype: DT_STRING", "dtype: DT_FLOAT"):
        assert expected in shown, expected

    # Every weight saved once (tracking the Keras model too would save each one twice).
    saved = sum(int(np.prod(shape)) for name, shape in
                tf.train.list_variables(str(path / "variables" / "variables"))
                if name != "_CHECKPOINTABLE_OBJECT_GRAPH")
    model = run_dir.load_finetuned(str(finetuned / "cls")).model
    assert saved == sum(int(np.prod(v.shape)) for v in model.variables)

    records = list(tf.data.TFRecordDataset(str(path / export_lib.WARMUP_FILE)))
    batch_sizes = []
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        assert request.model_spec.name == "sentiment"
        assert request.model_spec.signature_name == "serving_default"
        assert set(request.inputs) == {"text", "text_pair"}
        batch_sizes.append(tf.make_ndarray(request.inputs["text"]).shape[0])
    assert tuple(batch_sizes) == export_lib.WARMUP_BATCH_SIZES


def test_regression_and_tagging_signatures(finetuned, tmp_path):
    export_lib.export_classifier(str(finetuned / "reg"), str(tmp_path / "reg" / "1"))
    texts = ["score 3", "", "score " * 50]
    outputs = session_predict(tmp_path / "reg" / "1", {"text": texts})
    restored, encoder = restore(str(finetuned / "reg"))
    expected = restored.model(encoder.encode_pairs(texts), training=False).numpy()
    np.testing.assert_allclose(outputs["score"], expected, atol=1e-5)

    export_lib.export_classifier(str(finetuned / "ner"), str(tmp_path / "ner" / "1"))
    # Padded with "": a short sentence, one cut by the length limit (24 pieces), and a word
    # with no word piece (becomes [UNK], as in training).
    sentences = [["爆発", "と", "の"], ["word"] * 30, ["\u200b", "情報"]]
    width = max(map(len, sentences))
    words = [s + [""] * (width - len(s)) for s in sentences]
    outputs = session_predict(tmp_path / "ner" / "1", {"words": words})
    restored, encoder = restore(str(finetuned / "ner"))
    inputs, _, starts = encoder.encode_words(sentences)
    logits = restored.model(inputs, training=False).numpy()
    for row, sentence in enumerate(sentences):
        expected = [restored.labels[logits[row, s].argmax()] if s >= 0 else "O"
                    for s in starts[row]]
        assert outputs["tags"][row] == expected + [""] * (width - len(sentence))
        assert [i for i in outputs["tag_ids"][row] if i >= 0] == [
            logits[row, s].argmax() for s in starts[row] if s >= 0]
    assert -1 in starts[1]  # the long sentence was really cut

    by_text = session_predict(tmp_path / "ner" / "1",
                              {"text": [" ".join(s) for s in sentences[:2]]}, "tag_text")
    assert by_text["tags"][0][:3] == outputs["tags"][0][:3]


def batching_parameters_class():
    """TF Serving's `BatchingParameters` message (session_bundle_config.proto).

    The tensorflow-serving-api wheel ships the model-server config protos but not this one,
    so its published field list (names, numbers, types) is declared here.
    """
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tests/batching_parameters.proto", package="tensorflow.serving", syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"])
    message = proto.message_type.add(name="BatchingParameters")
    for number, (name, wrapper) in enumerate(
            [("max_batch_size", "Int64Value"), ("batch_timeout_micros", "Int64Value"),
             ("max_enqueued_batches", "Int64Value"), ("num_batch_threads", "Int64Value"),
             ("thread_pool_name", "StringValue")], start=1):
        message.field.add(name=name, number=number, type=field.TYPE_MESSAGE,
                          label=field.LABEL_OPTIONAL, type_name=f".google.protobuf.{wrapper}")
    message.field.add(name="allowed_batch_sizes", number=6, type=field.TYPE_INT64,
                      label=field.LABEL_REPEATED)
    message.field.add(name="pad_variable_length_inputs", number=7, type=field.TYPE_BOOL,
                      label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def test_serving_configs_parse_with_the_serving_protos():
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    config = text_format.Parse((SERVING_DIR / "models.config").read_text(),
                               model_server_config_pb2.ModelServerConfig())
    models = config.model_config_list.config
    assert [m.name for m in models] == ["sentiment", "ner"]
    assert all(m.model_platform == "tensorflow" and m.base_path == f"/models/{m.name}"
               for m in models)
    batching = text_format.Parse((SERVING_DIR / "batching.config").read_text(),
                                 batching_parameters_class()())
    # TF Serving requires the last allowed size to equal max_batch_size.
    assert tuple(batching.allowed_batch_sizes) == export_lib.WARMUP_BATCH_SIZES
    assert batching.max_batch_size.value == batching.allowed_batch_sizes[-1]


def test_cli_refuses_an_existing_version_and_a_non_finetuning_dir(finetuned, pretrained_dir,
                                                                   tmp_path):
    def cli(*args):
        return subprocess.run([sys.executable, str(ROOT / "export" / "export_classifier.py"),
                               *args], capture_output=True, text=True, timeout=600)

    (tmp_path / "m" / "1").mkdir(parents=True)
    result = cli("--checkpoint", str(finetuned / "cls"), "--output", str(tmp_path / "m" / "1"))
    assert result.returncode == 2
    assert "exists" in result.stderr and str(tmp_path / "m" / "2") in result.stderr
    result = cli("--checkpoint", pretrained_dir, "--output", str(tmp_path / "x"))
    assert result.returncode == 2 and "not a finished fine-tuning run" in result.stderr
    assert "Traceback" not in result.stderr
