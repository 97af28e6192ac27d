"""A fine-tuning run directory restored as its task model (see `run_dir` for the layout)."""

import dataclasses
from typing import Optional

import keras
import tensorflow as tf

from electra_tf import run_dir
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.layers.initializers import restoring
from electra_tf.models.preprocessor import ElectraPreprocessor
from electra_tf.text.tokenizer import ElectraTokenizer

# The task models of runs written before they became `ElectraTask`s (their head config
# named the head's width `head_outputs`).
_FORMER_NAMES = {"SequenceClassifier": "ElectraTextClassifier",
                 "TokenClassifier": "ElectraTokenClassifier",
                 "SpanQuestionAnswerer": "ElectraQuestionAnswerer"}


def task_model_class(class_name: str):
    """The task model class a fine-tuning run's task.json names (registered with Keras:
    `electra_tf.models` registers them all)."""
    class_name = _FORMER_NAMES.get(class_name, class_name)
    cls = keras.saving.get_registered_object(f"electra_tf>{class_name}")
    if cls is None:
        raise ConfigError(f"Unknown task model {class_name!r} in {run_dir.TASK_FILE}.")
    return cls


@dataclasses.dataclass
class Finetuned:
    """A fine-tuned run on disk, restored: what serving needs to rebuild its inputs."""

    model: object  # the task model (keras.Model), weights restored
    task: str  # the task name (`finetuning.tasks`)
    kind: str  # its kind (`finetuning.kinds`)
    labels: list
    text_pairs: bool  # the model was trained on `[CLS] a [SEP] b [SEP]` inputs
    task_info: dict  # task.json: the above, and what the task's kind recorded for serving
    settings: dict  # finetune_config.json: the recipe it was trained with
    encoder_config: ElectraConfig
    vocab_path: str
    tokenizer: ElectraTokenizer
    checkpoint: str

    @property
    def max_seq_length(self) -> int:
        return self.settings["max_seq_length"]

    @property
    def special_ids(self) -> dict:
        return self.tokenizer.special_ids


def build_task_model(class_name: str, encoder, head_config: dict, preprocessor=None):
    """The task model `class_name` around `encoder`, with `preprocessor`."""
    head_config = dict(head_config)
    if "head_outputs" in head_config:
        head_config["num_classes"] = head_config.pop("head_outputs")
    return task_model_class(class_name)(encoder, preprocessor=preprocessor, **head_config)


def load_finetuned(directory: str, trial: Optional[int] = None) -> Finetuned:
    """Restores the kept model of `trial` (default: the trial with the best main metric)
    of a fine-tuning run, with its preprocessor."""
    trial, checkpoint = run_dir.kept_checkpoint(directory, trial)
    task_info = run_dir.read_finetuned_json(directory, run_dir.TASK_FILE)
    settings = run_dir.read_finetuned_json(directory, run_dir.FINETUNE_CONFIG_FILE)
    encoder_config = run_dir.read_finetuned_config(directory)
    vocab_path = run_dir.finished_finetuned_file(directory, run_dir.VOCAB_FILE)
    tokenizer = ElectraTokenizer(vocab_path, lowercase=encoder_config.lower_case,
                                 strip_accents=encoder_config.strip_accents)
    model_info = task_info["model"]
    with restoring():
        model = build_task_model(model_info["class_name"],
                                 run_dir.build_encoder(encoder_config, settings["dropout"]),
                                 model_info["head_config"],
                                 ElectraPreprocessor(tokenizer, settings["max_seq_length"]))
        model.build_weights()
    status = tf.train.Checkpoint(model=run_dir.layers_only(model)).read(checkpoint)
    status.expect_partial().assert_existing_objects_matched()
    return Finetuned(model, task_info["task"], task_info["kind"],
                     run_dir.read_finetuned_json(directory, run_dir.LABELS_FILE),
                     task_info["text_pairs"], task_info, settings, encoder_config,
                     vocab_path, tokenizer, checkpoint)


def load_task_model(directory: str, cls):
    """The kept model of a fine-tuning run (best trial), which must be a `cls`."""
    model = load_finetuned(directory).model
    if not isinstance(model, cls):
        raise ConfigError(f"{directory!r} holds a fine-tuned {type(model).__name__}, not a "
                          f"{cls.__name__}: load it with {type(model).__name__}."
                          "from_pretrained.")
    return model
