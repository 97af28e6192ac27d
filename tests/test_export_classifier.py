"""export_classifier: TF Serving versions of fine-tuned models, proven through the TF1
session loader that TF Serving's C++ loader mirrors, and the serving protos."""

import os

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from conftest import ROOT, run_command
from electra_tf.errors import ConfigError
from electra_tf.export import classifier as export_lib
from electra_tf.models import serving
from electra_tf.models.finetuned import load_finetuned
from electra_tf.finetuning import features
from electra_tf.finetuning.tags import to_iob2
from saved_models import session_predict, signature_defs, tensor_specs

# Empty, very long, Korean and emoji texts; pairs given, empty (a single text) and mixed.
TEXTS = ["", "the food was great and the service friendly", "word " * 400,
         "음식이 정말 맛있어요 😀", "terrible."]
PAIRS = ["", "a second segment", "", "pair " * 300, "나쁘다"]
SERVING_DIR = ROOT / "export" / "serving"
SCORE_TEXTS = ["score 3", "", "score " * 50]
# Padded with "": a short sentence, one cut by the length limit (24 pieces), and a word
# with no word piece (becomes [UNK], as in training).
SENTENCES = [["爆発", "と", "の"], ["word"] * 30, ["\u200b", "情報"]]
WIDTH = max(map(len, SENTENCES))
WORDS = [s + [""] * (WIDTH - len(s)) for s in SENTENCES]


@pytest.fixture(scope="module")
def exported(finetuned, tmp_path_factory):
    """Version 1 of each fine-tuned run, and what TF Serving's loading path predicts."""
    base = tmp_path_factory.mktemp("serving")
    for name in ("cls", "reg", "ner"):
        export_lib.export_classifier(str(finetuned / name), str(base / name / "1"))
    served = session_predict([
        {"path": base / "cls" / "1", "feeds": {"text": TEXTS, "text_pair": PAIRS}},
        {"path": base / "reg" / "1", "feeds": {"text": SCORE_TEXTS}},
        {"path": base / "ner" / "1", "feeds": {"words": WORDS}},
        {"path": base / "ner" / "1", "signature": "tag_text",
         "feeds": {"text": [" ".join(s) for s in SENTENCES[:2]]}}])
    return base, dict(zip(("cls", "reg", "ner", "ner_text"), served))


def restore(model_dir):
    """The fine-tuned Keras model and the training-side (eager, numpy) feature encoder."""
    from electra_tf.text.tokenizer import ElectraTokenizer

    restored = load_finetuned(model_dir)
    tokenizer = ElectraTokenizer(restored.vocab_path, restored.encoder_config.lower_case,
                                 restored.encoder_config.strip_accents)
    return restored, features.Encoder(tokenizer, restored.special_ids,
                                      restored.max_seq_length)


def test_classifier_version_serves_raw_text_like_the_keras_model(finetuned, exported):
    outputs = exported[1]["cls"]
    restored, encoder = restore(str(finetuned / "cls"))
    assert restored.text_pairs and restored.kind == "classification"
    inputs = encoder.encode_pairs(TEXTS, PAIRS, with_pairs=True)
    expected = tf.nn.softmax(restored.model(inputs, training=False)).numpy()
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
    assert outputs["label_id"] == expected.argmax(-1).tolist()
    assert outputs["label"] == [["neg", "pos"][i] for i in expected.argmax(-1)]


def test_versions_are_numbered_and_pruned(finetuned, tmp_path):
    base = tmp_path / "sentiment"
    result = export_lib.export_classifier(str(finetuned / "reg"), str(base))
    assert result["version"] == 1 and result["model_name"] == "sentiment"
    # The next export takes version 2; --versions 1 then keeps only the newest.
    assert export_lib.export_classifier(str(finetuned / "reg"), str(base))["version"] == 2
    assert export_lib.export_classifier(str(finetuned / "reg"), str(base),
                                        versions=1)["removed"] == [1, 2]
    assert sorted(os.listdir(base)) == ["3"]


def test_signatures_are_concrete_and_warmup_requests_parse(finetuned, exported):
    from tensorflow_serving.apis import prediction_log_pb2

    path = exported[0] / "cls" / "1"
    signature = signature_defs(path)["serving_default"]
    assert tensor_specs(signature.inputs) == {"text": ("DT_STRING", (-1,)),
                                              "text_pair": ("DT_STRING", (-1,))}
    assert tensor_specs(signature.outputs) == {"probabilities": ("DT_FLOAT", (-1, 2)),
                                               "label_id": ("DT_INT32", (-1,)),
                                               "label": ("DT_STRING", (-1,))}

    # Every weight saved once (tracking the Keras model too would save each one twice),
    # and the scalar the oneDNN trial reads as the export loads (`OneDnnTrialAtLoad`).
    model = load_finetuned(str(finetuned / "cls")).model
    assert saved_values(path) == sum(int(np.prod(v.shape)) for v in model.variables) + 1

    # Traced for inference: no hand-written gradients, the layer norms in their cheaper
    # order (`normalize_for_inference`: no SquaredDifference).
    graph = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    nodes = [node for function in graph.meta_graphs[0].graph_def.library.function
             for node in function.node_def]
    assert not any("_gradient_op_type" in node.attr for node in nodes)
    assert {"Square", "MatMul"} <= {node.op for node in nodes}
    assert "SquaredDifference" not in {node.op for node in nodes}

    records = list(tf.data.TFRecordDataset(str(path / serving.WARMUP_FILE)))
    batch_sizes = []
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        assert request.model_spec.name == "cls"
        assert request.model_spec.signature_name == "serving_default"
        assert set(request.inputs) == {"text", "text_pair"}
        batch_sizes.append(tf.make_ndarray(request.inputs["text"]).shape[0])
    assert tuple(batch_sizes) == serving.WARMUP_BATCH_SIZES


def test_constant_weights_are_in_the_graph_and_serve_the_same(finetuned, exported,
                                                               tmp_path, monkeypatch):
    path = tmp_path / "cls" / "1"
    run_command("python", ROOT / "export" / "export_classifier.py", "--checkpoint",
                finetuned / "cls", "--output", path, "--constant_weights")
    # Every weight saved once, as a constant of the graph (`weights_as_constants`); the
    # checkpoint holds only the trial's scalar.
    assert saved_values(path) == 1
    graph = saved_model_pb2.SavedModel.FromString((path / "saved_model.pb").read_bytes())
    constants = sum(len(node.attr["value"].tensor.tensor_content)
                    for node in graph.meta_graphs[0].graph_def.node if node.op == "Const")
    weights = serving.weights_bytes(load_finetuned(str(finetuned / "cls")).model)
    assert weights <= constants < weights + 2 ** 16
    outputs, = session_predict([{"path": path, "feeds": {"text": TEXTS, "text_pair": PAIRS}}])
    on_variables = exported[1]["cls"]
    np.testing.assert_allclose(outputs["probabilities"], on_variables["probabilities"],
                               atol=1e-6)
    assert outputs["label"] == on_variables["label"]

    # A model too large for a graph's protocol buffer is refused before anything is written.
    monkeypatch.setattr(serving, "CONSTANT_WEIGHTS_MAX_BYTES", 1024)
    with pytest.raises(ConfigError, match="without constant weights"):
        export_lib.export_classifier(str(finetuned / "cls"), str(tmp_path / "big"),
                                     constant_weights=True)
    assert not (tmp_path / "big").exists()


def saved_values(path) -> int:
    """How many values a version's checkpoint holds."""
    return sum(int(np.prod(shape)) for name, shape in
               tf.train.list_variables(str(path / "variables" / "variables"))
               if name != "_CHECKPOINTABLE_OBJECT_GRAPH")


def test_regression_and_tagging_signatures(finetuned, exported):
    outputs = exported[1]
    restored, encoder = restore(str(finetuned / "reg"))
    expected = restored.model(encoder.encode_pairs(SCORE_TEXTS), training=False).numpy()
    np.testing.assert_allclose(outputs["reg"]["score"], expected, atol=1e-5)

    signatures = signature_defs(exported[0] / "ner" / "1")
    assert tensor_specs(signatures["serving_default"].inputs) == {
        "words": ("DT_STRING", (-1, -1))}
    assert tensor_specs(signatures["tag_text"].inputs) == {"text": ("DT_STRING", (-1,))}
    restored, encoder = restore(str(finetuned / "ner"))
    inputs, _, starts = encoder.encode_words(SENTENCES)
    logits = restored.model(inputs, training=False).numpy()
    for row, sentence in enumerate(SENTENCES):
        # Trained on BIOES (official), served as IOB2 tags.
        expected = [to_iob2(restored.labels[logits[row, s].argmax()]) if s >= 0 else "O"
                    for s in starts[row]]
        assert outputs["ner"]["tags"][row] == expected + [""] * (WIDTH - len(sentence))
        assert [i for i in outputs["ner"]["tag_ids"][row] if i >= 0] == [
            logits[row, s].argmax() for s in starts[row] if s >= 0]
    assert -1 in starts[1]  # the long sentence was really cut
    assert outputs["ner_text"]["tags"][0][:3] == outputs["ner"]["tags"][0][:3]


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
    assert tuple(batching.allowed_batch_sizes) == serving.WARMUP_BATCH_SIZES
    assert batching.max_batch_size.value == batching.allowed_batch_sizes[-1]


def test_an_existing_version_and_a_non_finetuning_dir_are_refused(finetuned, exported,
                                                                   pretrained_dir, tmp_path):
    existing = exported[0] / "cls" / "1"
    result = run_command("python", ROOT / "export" / "export_classifier.py", "--checkpoint",
                         finetuned / "cls", "--output", existing, check=False)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{existing} exists" in result.stderr
    assert str(exported[0] / "cls" / "2") in result.stderr
    with pytest.raises(ConfigError, match="not a finished fine-tuning run"):
        export_lib.export_classifier(pretrained_dir, str(tmp_path / "x"))
