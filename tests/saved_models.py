"""Reading exported SavedModels the way TF Serving does: the signatures recorded in
saved_model.pb (what `saved_model_cli show` prints), and predictions through the TF1
session loader in a fresh process that imports nothing of ours."""

import json
import os
import tempfile

from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from conftest import run_command


def signature_defs(path) -> dict:
    """{signature name: SignatureDef} of the "serve" graph in `path`/saved_model.pb."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    (graph,) = [m for m in saved_model.meta_graphs if "serve" in m.meta_info_def.tags]
    return dict(graph.signature_def)


def tensor_specs(tensor_infos) -> dict:
    """{name: (dtype name, shape with -1 for unknown dims)}; fails on an unknown dtype or
    rank (a signature TF Serving could not describe)."""
    specs = {}
    for name, info in tensor_infos.items():
        assert info.dtype != types_pb2.DT_INVALID, name
        assert not info.tensor_shape.unknown_rank, name
        specs[name] = (types_pb2.DataType.Name(info.dtype),
                       tuple(d.size for d in info.tensor_shape.dim))
    return specs


_SESSION_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops, as the model server links them
results = []
for query in json.load(open(sys.argv[1])):
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], query["path"])
        signature = meta.signature_def[query["signature"]]
        names = sorted(signature.outputs)
        values = session.run([signature.outputs[n].name for n in names],
                             {signature.inputs[k].name: v for k, v in query["feeds"].items()})
        results.append({n: (v.astype(str) if v.dtype.kind in "SO" else v).tolist()
                        for n, v in zip(names, values)})
print(json.dumps(results))
"""


def session_predict(queries) -> list:
    """Runs each query {"path", "signature", "feeds"} through the TF1 session loader in one
    fresh process (TF Serving's own path); returns each one's outputs by name."""
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "queries.json")
        with open(path, "w") as f:
            json.dump([{"signature": "serving_default", **q, "path": str(q["path"])}
                       for q in queries], f)
        result = run_command("python", "-c", _SESSION_SCRIPT, path, timeout=300)
    return json.loads(result.stdout.strip().splitlines()[-1])
