"""TF Serving versions: a SavedModel of raw-strings-in signatures, written under a model
base directory with TF Serving's warm-up requests.

The version directory holds `assets.extra/tf_serving_warmup_requests`, which TF Serving
replays before it marks the version available, so the first real request does not pay for
graph initialisation. Every signature input and output is a dense tensor, so TF Serving's
REST and gRPC APIs can carry them.

With `constant_weights`, the model's weights are constants of the graph, not variables
(`weights_as_constants` says when that pays).
"""

import contextlib
import os
import re
import shutil

import keras
import numpy as np
import tensorflow as tf

from electra_tf import files
from electra_tf.errors import ConfigError
from electra_tf.layers.export_tracing import export_tracing
from electra_tf.layers.inference import inference_only, onednn_trial_at_load
from electra_tf.layers.onednn_trial_at_load import OneDnnTrialAtLoad

# The batch sizes the example batching config allows (export/serving/batching.config).
WARMUP_BATCH_SIZES = (1, 8, 32)
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
# The most bytes of weights a version holds as constants of its graph: a SavedModel's graph
# is one protocol buffer, which cannot exceed 2 GiB. ELECTRA-Base's weights take 0.44 GB,
# ELECTRA-Large's 1.34.
CONSTANT_WEIGHTS_MAX_BYTES = 2 ** 30


class Reusable(tf.__internal__.tracking.AutoTrackable):
    """An object whose attributes (variables, functions, assets) are saved as they are."""


def weights_bytes(model) -> int:
    """The bytes `model`'s weights take."""
    return sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in model.variables)


@contextlib.contextmanager
def weights_as_constants(model):
    """Within, functions traced read `model`'s weights as constants of their graph.

    Why: a server then reads no variable per request (ELECTRA-Small's graph had ~400
    variable handles and reads of ~2,500 nodes a short request), and oneDNN keeps a
    constant weight in its own layout from one request to the next. Through the TF1
    session loader, alternating with the same version on variables (ms, 2-core Sapphire
    Rapids): one short text 5.80 against 6.09 and 6.52 against 6.91, 48 words 11.2 against
    12.6, one long text 18.2 against 19.4, 8 short texts 20.4 against 21.2; from 32 short
    texts (~640 rows) level. Same outputs.

    Why not always: the server then holds ~10 times the weights in memory (Grappler folds
    the constants into every form a request may take, and the session keeps its graphs):
    ELECTRA-Small's classifier 803-816 MiB above the process's start against 306-323 on
    variables, with oneDNN or without; and its first request, which pays graph
    optimisation, takes ~0.4 s longer."""
    weights = [(v, tf.constant(v.numpy())) for v in model.variables]
    with keras.StatelessScope(state_mapping=weights):
        yield
    if len(model.variables) != len(weights):  # their initializers would be in the graph
        raise ValueError(f"{type(model).__name__} created weights while its export traced: "
                         "build it (one forward pass) before exporting it.")


def serving_module(model, signatures: dict, tokenizer, constant_weights: bool = False):
    """The SavedModel object of a task `model` serving `signatures` through `tokenizer`
    (without its weights where they are to be `constant_weights`)."""
    module = Reusable()
    if not constant_weights:
        # The graphs' variables, saved once each as plain tf.Variables. (Tracking the
        # Keras model too would save every weight a second time, as Keras variable
        # objects.)
        module.model_variables = [v.value for v in model.variables]
    module.tokenizer = tokenizer  # its lookup tables are resources the graphs use
    module.signature_functions = signatures  # saved with the object
    # Tried where the export is loaded: its graphs pick some forms by it.
    module.onednn_trial = OneDnnTrialAtLoad()
    return module


def version_dirs(base: str) -> list:
    """The version numbers under a TF Serving model base directory, ascending."""
    if not os.path.isdir(base):
        return []
    return sorted(int(name) for name in os.listdir(base)
                  if re.fullmatch(r"\d+", name) and os.path.isdir(os.path.join(base, name)))


def resolve_version(output: str):
    """`.../name/3` -> (`.../name`, 3); `.../name` -> (`.../name`, next free version)."""
    output = output.rstrip("/")
    name = os.path.basename(output)
    if name.isdigit():
        base, version = os.path.dirname(output), int(name)
        if version in version_dirs(base):
            raise ConfigError(
                f"{output} exists: a server may be serving it. Export to "
                f"{os.path.join(base, str(max(version_dirs(base)) + 1))} (or pass the base "
                f"directory {base} to take the next version).")
        return base, version
    existing = version_dirs(output)
    return output, (existing[-1] + 1) if existing else 1


def example_inputs(input_specs, batch_size: int) -> dict:
    """A batch of valid inputs for a serving function's `input_signature` (warm-up)."""
    text = tf.constant(["ELECTRA warm-up request."] * batch_size)
    return {spec.name: tf.strings.split(text).to_tensor("") if spec.shape.rank == 2 else text
            for spec in input_specs}


def write_warmup_requests(path: str, model_name: str, signature_name: str,
                          input_specs) -> int:
    """Writes TF Serving's warm-up file: one PredictRequest per WARMUP_BATCH_SIZES."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for batch_size in WARMUP_BATCH_SIZES:
            request = predict_pb2.PredictRequest(
                model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature_name))
            for name, value in example_inputs(input_specs, batch_size).items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request))
            writer.write(log.SerializeToString())
    return len(WARMUP_BATCH_SIZES)


def write_serving_version(model, signatures: dict, tokenizer, output: str, model_name=None,
                          versions: int = 0, constant_weights: bool = False) -> dict:
    """Saves `model`'s `signatures` ({name: tf.function}, "serving_default" first), which
    tokenize with `tokenizer` (a keras-hub WordPiece tokenizer), as a new TF Serving
    version; the vocab goes to its `assets/vocab.txt`. `constant_weights` writes the
    weights into the graph (`weights_as_constants`: faster small requests, more memory).

    `output` is a version directory (`.../sentiment/1`) or a model base directory (the next
    version is taken). `versions` > 0 keeps only that many newest versions (the new one
    included); 0 keeps all. Returns {"path", "version", "model_name", "signatures",
    "removed"}.
    """
    if versions < 0:
        raise ConfigError(f"--versions must be >= 0 (0 keeps all); got {versions}.")
    size = weights_bytes(model) if constant_weights else 0
    if size > CONSTANT_WEIGHTS_MAX_BYTES:
        raise ConfigError(
            f"The model's weights take {size / 2 ** 30:.2f} GiB, more than "
            f"the {CONSTANT_WEIGHTS_MAX_BYTES / 2 ** 30:.0f} GiB a SavedModel's graph can "
            "hold as constants: export it without constant weights.")
    base, version = resolve_version(output)
    model_name = model_name or os.path.basename(os.path.abspath(base))
    module = serving_module(model, signatures, tokenizer, constant_weights)
    path = os.path.join(base, str(version))
    os.makedirs(base, exist_ok=True)
    with files.atomic_directory(path) as partial:
        # The signatures are traced here; TF Serving never differentiates them.
        with export_tracing(), inference_only(), onednn_trial_at_load(module.onednn_trial), (
                weights_as_constants(model) if constant_weights
                else contextlib.nullcontext()):
            tf.saved_model.save(module, partial, signatures=signatures)
        files.write_text(os.path.join(partial, "assets", "vocab.txt"),
                         "".join(token + "\n" for token in tokenizer.vocabulary))
        write_warmup_requests(os.path.join(partial, WARMUP_FILE), model_name,
                              "serving_default", signatures["serving_default"].input_signature)
    removed = []
    if versions:
        for old in version_dirs(base)[:-versions]:
            shutil.rmtree(os.path.join(base, str(old)))
            removed.append(old)
    return {"path": path, "version": version, "model_name": model_name,
            "signatures": sorted(signatures), "removed": removed}
