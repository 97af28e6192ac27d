"""Any model a `from_pretrained` takes, opened: a pretrained encoder (every source
`electra_tf.resolve` takes) or a fine-tuned run directory."""

import dataclasses
import os
from typing import Optional

from electra_tf import run_dir
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError


@dataclasses.dataclass
class ModelSource:
    """An opened model: its encoder config and vocab; `pretrained` for a pretraining run or
    converted model, `finetuned` (the directory) for a fine-tuning run."""

    spec: str
    config: ElectraConfig
    vocab_path: str
    pretrained: Optional[run_dir.Pretrained] = None
    finetuned: Optional[str] = None

    def tokenizer(self, cls=None, **kwargs):
        from electra_tf.models.tokenizer import ElectraTokenizer

        return (cls or ElectraTokenizer)(self.vocab_path, lowercase=self.config.lower_case,
                                         strip_accents=self.config.strip_accents, **kwargs)

    def preprocessor(self, sequence_length: int):
        from electra_tf.models.preprocessor import ElectraPreprocessor

        if sequence_length > self.config.max_position_embeddings:
            raise ConfigError(f"sequence_length={sequence_length} exceeds the encoder's "
                              f"{self.config.max_position_embeddings} positions.")
        return ElectraPreprocessor(self.tokenizer(), sequence_length)

    def encoder(self, dropout: Optional[float] = None):
        """The discriminator encoder, restored; `dropout` defaults to the model's."""
        if self.pretrained is None:
            raise ConfigError(f"{self.spec!r} is a fine-tuned run: load it with the task "
                              "class it was trained as (e.g. ElectraTextClassifier).")
        dropout = self.config.dropout if dropout is None else dropout
        return run_dir.load_encoder(self.pretrained, self.config, dropout)

    def finetuned_model(self, cls):
        """The fine-tuned run's task model (best trial), which must be a `cls`."""
        from electra_tf.models.finetuned import load_finetuned

        model = load_finetuned(self.finetuned).model
        if not isinstance(model, cls):
            raise ConfigError(f"{self.spec!r} holds a fine-tuned {type(model).__name__}, "
                              f"not a {cls.__name__}: load it with "
                              f"{type(model).__name__}.from_pretrained.")
        return model


def open_model(spec: str) -> ModelSource:
    """`spec` opened: a fine-tuned run directory, or any pretrained source (see
    `electra_tf.resolve`: downloaded, verified and converted on first use)."""
    from electra_tf.convert.resolve import resolve

    spec = os.path.expanduser(str(spec))
    if run_dir.is_finetuned(spec):
        config = run_dir.read_finetuned_config(spec)
        return ModelSource(spec, config, os.path.join(spec, run_dir.VOCAB_FILE),
                           finetuned=spec)
    pretrained = run_dir.open_pretrained(resolve(spec))
    return ModelSource(spec, pretrained.config, pretrained.vocab_path, pretrained=pretrained)
