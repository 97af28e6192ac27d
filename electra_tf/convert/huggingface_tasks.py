"""A fine-tuned run as Hugging Face's task model of its kind, with its label names:
`ElectraForSequenceClassification` (classification, regression), `ElectraForTokenClassification`
(tagging) or `ElectraForQuestionAnswering` (extractive QA), so that
`transformers.pipeline(task, model=DIR)` predicts what our model predicts.

The token and span heads are one dense layer in both libraries and map weight for weight.
HF's sequence-classification head is two layers, dense -> GELU -> dense, where the official
recipe (ours) has one; see `_sequence_classification_head` for the exact equivalent.
"""

import math

import numpy as np

from electra_tf import files
from electra_tf.convert import huggingface, official_names
from electra_tf.errors import ConfigError

# From this input on, float32's erf(z / sqrt(2)) rounds to 1, so GELU(z) = z exactly.
_GELU_EXACT_FROM = 8.0

_ARCHITECTURES = {"ElectraTextClassifier": "ElectraForSequenceClassification",
                  "ElectraTokenClassifier": "ElectraForTokenClassification",
                  "ElectraQuestionAnswerer": "ElectraForQuestionAnswering"}


def pipeline_task(architecture: str) -> str:
    """The `transformers.pipeline` task of an architecture this module writes."""
    return {"ElectraForSequenceClassification": "text-classification",
            "ElectraForTokenClassification": "token-classification",
            "ElectraForQuestionAnswering": "question-answering"}[architecture]


def write_finetuned(finetuned, output: str) -> dict:
    """Writes `finetuned` (a restored `models.finetuned.Finetuned`) as an HF model directory
    at the new path `output`. Returns {"path", "architecture", "pipeline_task", "notes"}
    (what a user of the HF model should know)."""
    model, config = finetuned.model, finetuned.encoder_config
    class_name = type(model).__name__
    if class_name not in _ARCHITECTURES:
        raise ConfigError(f"A fine-tuned {class_name} has no Hugging Face counterpart.")
    architecture = _ARCHITECTURES[class_name]
    encoder = official_names.read(official_names.discriminator_weights(model.encoder))
    if class_name == "ElectraTextClassifier":
        head, fields = _sequence_classification_head(model, encoder, config)
    elif class_name == "ElectraTokenClassifier":
        head, fields = _token_classification_head(model)
    else:
        head, fields = _question_answering_head(model)
    notes = fields.pop("notes", [])
    config_json = {**huggingface.hf_config(config), **fields, "architectures": [architecture],
                   "classifier_dropout": getattr(model, "dropout_rate", 0.0)}
    with files.atomic_directory(output) as partial:
        huggingface.write_directory(partial, {**huggingface.encoder_state(encoder), **head},
                                    config_json, config, finetuned.vocab_path,
                                    finetuned.max_seq_length)
    return {"path": output, "architecture": architecture,
            "pipeline_task": pipeline_task(architecture), "notes": notes}


def _kernel_and_bias(dense) -> tuple:
    """A Keras dense layer's (kernel [in, out], bias [out]) as float64 arrays."""
    return (np.asarray(dense.kernel.numpy(), np.float64),
            np.asarray(dense.bias.numpy(), np.float64))


def _labels(names: list) -> dict:
    return {"id2label": {str(i): name for i, name in enumerate(names)},
            "label2id": {name: i for i, name in enumerate(names)}, "num_labels": len(names)}


def _sequence_classification_head(model, encoder: dict, config) -> tuple:
    """HF's head computes out_proj(GELU(dense(x))) on the [CLS] vector x; ours, one dense
    layer K x + b. x is the last layer's LayerNorm output, x_i = gamma_i n_i + beta_i with
    |n_i| <= sqrt(hidden - 1) for any normalised vector, so with dense = identity plus a
    shift s_i = |gamma_i| sqrt(hidden - 1) - beta_i + 8, every GELU input is >= 8, where
    float32's GELU is the identity: out_proj = K (x + s) + (b - K s) = K x + b. Regression
    folds our scaling into the scores (HF's logit is the score in the labels' range)."""
    kernel, bias = _kernel_and_bias(model.head)  # [hidden, classes]
    last = f"{official_names.DISCRIMINATOR_SCOPE}/encoder/layer_{config.num_layers - 1}/output"
    gamma = encoder[f"{last}/LayerNorm/gamma"].astype(np.float64)
    beta = encoder[f"{last}/LayerNorm/beta"].astype(np.float64)
    shift = np.abs(gamma) * math.sqrt(config.hidden_size - 1) - beta + _GELU_EXACT_FROM
    out_weight, out_bias = kernel.T, bias - kernel.T @ shift
    if model.regression:
        low, high = model.label_range or (0.0, 1.0)
        out_weight, out_bias = out_weight * high, out_bias * high + low
        fields = {"num_labels": 1, "problem_type": "regression",
                  "id2label": {"0": "score"}, "label2id": {"score": 0}}
    else:
        fields = {**_labels(model.label_names or [str(i) for i in range(model.num_classes)]),
                  "problem_type": "single_label_classification"}
    fields["notes"] = [
        "The classification head is HF's two layers holding our one: its dense layer is the "
        "identity plus a shift that keeps GELU exact, so its logits are ours (1e-5)."]
    head = {"classifier.dense.weight": np.eye(config.hidden_size),
            "classifier.dense.bias": shift,
            "classifier.out_proj.weight": out_weight, "classifier.out_proj.bias": out_bias}
    return head, fields


def _token_classification_head(model) -> tuple:
    kernel, bias = _kernel_and_bias(model.head)
    fields = _labels(model.label_names or [str(i) for i in range(model.num_classes)])
    if model.bioes:
        fields["notes"] = [
            "The labels are BIOES tags (the official recipe); transformers' token-"
            "classification pipeline groups B-/I- tags only, so use aggregation_strategy="
            "'none' and read S-/E- yourself, or electra-predict, which answers IOB2."]
    return {"classifier.weight": kernel.T, "classifier.bias": bias}, fields


def _question_answering_head(model) -> tuple:
    if model.joint_prediction:
        raise ConfigError(
            "This QA run predicts each answer's end from its start (joint prediction, the "
            "official recipe); Hugging Face's ElectraForQuestionAnswering has independent "
            "start and end layers and cannot hold it. Fine-tune with "
            "--noqa_joint_prediction to convert the model.")
    start_kernel, start_bias = _kernel_and_bias(model.start_head)
    end_kernel, end_bias = _kernel_and_bias(model.end_head)
    notes = []
    if model.unanswerable:
        notes.append(
            "The no-answer classifier has no place in ElectraForQuestionAnswering: "
            "transformers decides 'no answer' from the [CLS] span's score instead "
            "(pipeline(..., handle_impossible_answer=True)), so answers to unanswerable "
            "questions can differ from ours.")
    head = {"qa_outputs.weight": np.concatenate([start_kernel.T, end_kernel.T]),
            "qa_outputs.bias": np.concatenate([start_bias, end_bias])}
    return head, {"num_labels": 2, "notes": notes}
