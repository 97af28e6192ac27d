"""`FinetuneConfig`: the official ELECTRA fine-tuning recipe, with per-model defaults.

Defaults follow the official `run_finetuning.py` / `configure_finetuning.py` and the paper's
Table 7; each field that keeps one of our earlier variants says so (README: "ours vs
official").
"""

import dataclasses
from typing import Optional

from electra_tf.errors import check_choice
from electra_tf.finetuning import squad
from electra_tf.training.finetuning_recipe import (FINETUNING_WARMUP_PROPORTION,
                                                   FINETUNING_WEIGHT_DECAY,
                                                   finetuning_layerwise_decay,
                                                   finetuning_learning_rate)

BATCH_LOSSES = ("sum", "mean")
TAG_ENCODINGS = ("bioes", "as_given")


@dataclasses.dataclass
class FinetuneConfig:
    """The official ELECTRA fine-tuning recipe; None means "the default for this model"."""

    task: str = "text_classification"
    max_seq_length: Optional[int] = None  # 128; 512 for QA, 256 for tagging (official)
    batch_size: int = 32
    epochs: Optional[int] = None  # task default: 3 (10 for RTE/STS-B, 2 for QA)
    learning_rate: Optional[float] = None  # by size (`finetuning_learning_rate`)
    layerwise_decay: Optional[float] = None  # by depth (`finetuning_layerwise_decay`)
    official_layerwise_decay_bug: bool = False
    warmup_proportion: float = FINETUNING_WARMUP_PROPORTION
    weight_decay: float = FINETUNING_WEIGHT_DECAY
    dropout: float = 0.1
    # Dropout before the task head: None is the official choice (the encoder's dropout
    # before the [CLS] head of classification and regression, none for tagging and QA).
    head_dropout: Optional[float] = None
    adam_bias_correction: bool = False
    # "sum": the loss summed over the batch, then clipped at global norm 1.0 (official);
    # "mean": averaged over the batch (our earlier variant).
    batch_loss: str = "sum"
    # MRPC and STS-B also train on every pair in swapped order (official).
    double_unordered: bool = True
    # "bioes": span tags (IOB1/IOB2 in the files) train as BIOES, predictions come back as
    # IOB2 (official); "as_given": train on the file's tags.
    tag_encoding: str = "bioes"
    # Report (and keep for export) the model after the last epoch (official); True picks
    # the epoch with the best main metric on the eval file instead.
    select_best_epoch: bool = False
    seed: int = 0
    num_trials: int = 1
    text_field: str = "text"
    pair_field: str = "text_pair"
    label_field: str = "label"
    tag_column: int = -1
    tfds_name: Optional[str] = None  # e.g. "glue/sst2": read a prepared TFDS dataset
    data_dir: Optional[str] = None  # where the TFDS dataset is prepared
    train_split: str = "train"
    eval_split: str = "validation"  # MNLI: validation_matched / validation_mismatched
    doc_stride: int = squad.DOC_STRIDE  # QA: step between context windows
    max_query_length: int = squad.MAX_QUERY_LENGTH  # QA: question pieces kept
    # QA: the longest answer span decoded, in pieces.
    max_answer_length: int = squad.MAX_ANSWER_LENGTH
    # QA: the end predicted given the start (beam over starts and ends), official; False
    # predicts both independently (our earlier variant).
    qa_joint_prediction: bool = True
    qa_beam_size: int = squad.BEAM_SIZE  # QA: starts (and ends per start) kept decoding
    # QA: the weight of the no-answer classifier's loss.
    qa_answerable_weight: float = squad.ANSWERABLE_WEIGHT
    # QA (SQuAD 2.0): "" is predicted when a question's no-answer logit exceeds this.
    qa_na_threshold: float = squad.NO_ANSWER_THRESHOLD

    def resolved(self, encoder_config, task) -> "FinetuneConfig":
        """The recipe with every default filled in for this encoder and task."""
        check_choice("--batch_loss", self.batch_loss, BATCH_LOSSES)
        check_choice("--tag_encoding", self.tag_encoding, TAG_ENCODINGS)
        size = encoder_config.preset_name or encoder_config.matching_preset()
        return dataclasses.replace(
            self,
            max_seq_length=self.max_seq_length or task.kind.default_max_seq_length,
            epochs=self.epochs or task.epochs,
            learning_rate=self.learning_rate or finetuning_learning_rate(size),
            layerwise_decay=(self.layerwise_decay
                             or finetuning_layerwise_decay(encoder_config.num_layers)),
            head_dropout=(task.kind.official_head_dropout(self.dropout)
                          if self.head_dropout is None else self.head_dropout))
