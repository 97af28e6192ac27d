"""`FinetuneConfig`: the official ELECTRA fine-tuning recipe, with per-model defaults."""

import dataclasses
from typing import Optional

# Peak learning rate by the size of the pretrained model (its preset): the paper's
# Small recipe for small-sized encoders, 1e-4 otherwise.
LEARNING_RATES = {"tiny": 3e-4, "small": 3e-4, "small++": 3e-4, "base": 1e-4, "large": 1e-4}
DEFAULT_LEARNING_RATE = 1e-4


@dataclasses.dataclass
class FinetuneConfig:
    """The official ELECTRA fine-tuning recipe; None means "the default for this model"."""

    task: str = "text_classification"
    max_seq_length: Optional[int] = None  # 128; 384 for QA
    batch_size: int = 32
    epochs: Optional[int] = None  # task default: 3 (10 for RTE/STS-B)
    learning_rate: Optional[float] = None  # 1e-4; 3e-4 for small-sized encoders
    layerwise_decay: Optional[float] = None  # 0.8; 0.9 for 24-layer encoders
    official_layerwise_decay_bug: bool = False
    warmup_proportion: float = 0.1
    weight_decay: float = 0.01
    dropout: float = 0.1
    adam_bias_correction: bool = False
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
    doc_stride: int = 128  # QA: step between context windows
    max_query_length: int = 64  # QA: question pieces kept
    max_answer_length: int = 30  # QA: longest answer span decoded, in pieces

    def resolved(self, encoder_config, task) -> "FinetuneConfig":
        """The recipe with every default filled in for this encoder and task."""
        size = encoder_config.preset_name or encoder_config.matching_preset()
        return dataclasses.replace(
            self,
            max_seq_length=self.max_seq_length or task.kind.default_max_seq_length,
            epochs=self.epochs or task.epochs,
            learning_rate=self.learning_rate or LEARNING_RATES.get(size,
                                                                   DEFAULT_LEARNING_RATE),
            layerwise_decay=self.layerwise_decay or (
                0.9 if encoder_config.num_layers >= 24 else 0.8))
