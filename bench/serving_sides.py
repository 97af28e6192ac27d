"""The requests the serving benches send (`serving_latency.py`, `serving_profile.py`):
raw texts through an exported classifier in a TF1 session, as TF Serving runs it, and
through the same weights in Hugging Face torch and ONNX Runtime, each tokenizing with its
own tokenizer; and their timing and first line, which `split_products.py` shares."""

import os
import statistics
import time

import numpy as np

from electra_tf.tf_runtime import onednn_enabled

SENTENCE = "The battery lasts all day and the screen is bright, but the speaker is weak."
TEXTS = {"short": SENTENCE, "long": " ".join([SENTENCE] * 8)}  # ~20 and > 128 tokens
MAX_LENGTH = 128


def median_seconds(run, repeats):
    """The median time of `repeats` calls of `run()`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def tensorflow_kernels() -> str:
    """The allocator and kernels TensorFlow runs with, a bench's first line."""
    return ("TF_CPU_ALLOCATOR_USE_BFC=" + os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "")
            + ", oneDNN " + ("on" if onednn_enabled() else "off"))


def tf_serving_requests(session, signature):
    """request(texts, **run_options) through the loaded SavedModel's serving signature
    (`run_options`: `Session.run`'s `options` and `run_metadata`)."""
    fetches = [signature.outputs[name].name for name in sorted(signature.outputs)]
    inputs = [info.name for info in signature.inputs.values()]  # a pair model: both texts
    return lambda texts, **run_options: session.run(
        fetches, {name: texts for name in inputs}, **run_options)


def torch_requests(directory, onnx=True):
    """{"torch": request, "onnxruntime": request} on the Hugging Face model in
    `directory`, each tokenizing with its fast tokenizer (padding to the longest); without
    `onnx`, torch's alone (no ONNX export)."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(directory).eval()

    def tokenize(texts, tensors):
        return tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH,
                         return_tensors=tensors)

    @torch.inference_mode()
    def with_torch(texts):
        return torch.softmax(model(**tokenize(texts, "pt")).logits, -1).numpy()

    if not onnx:
        return {"torch": with_torch}
    import tempfile

    import onnxruntime

    names = ["input_ids", "attention_mask", "token_type_ids"]
    example = tokenize([SENTENCE, SENTENCE], "pt")
    with tempfile.TemporaryDirectory() as exported:  # the session holds the model in memory
        onnx_path = os.path.join(exported, "model.onnx")
        torch.onnx.export(model, tuple(example[n] for n in names), onnx_path,
                          input_names=names, output_names=["logits"], dynamo=False,
                          dynamic_axes={n: {0: "batch", 1: "length"} for n in names})
        session = onnxruntime.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])

    def with_onnxruntime(texts):
        encoded = tokenize(texts, "np")
        (logits,) = session.run(None, {n: encoded[n].astype(np.int64) for n in names})
        exp = np.exp(logits - logits.max(-1, keepdims=True))
        return exp / exp.sum(-1, keepdims=True)

    return {"torch": with_torch, "onnxruntime": with_onnxruntime}
