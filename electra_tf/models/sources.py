"""Any model a `from_pretrained` takes, opened: a pretrained encoder (every source
`electra_tf.resolve` takes) or a fine-tuned run directory. `ElectraEncoder`,
`ElectraPretrainer`, the tokenizer, the preprocessor and the task models all open their
argument here."""

import dataclasses
import os
from typing import Optional

from electra_tf import run_dir
from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.layers.initializers import restoring


@dataclasses.dataclass
class ModelSource:
    """An opened model: its encoder config and vocab; `pretrained` for a pretraining run or
    converted model, `finetuned` (the directory) for a fine-tuning run."""

    spec: str
    config: ElectraConfig
    vocab_path: str
    pretrained: Optional[run_dir.Pretrained] = None
    finetuned: Optional[str] = None

    def encoder(self, dropout: Optional[float] = None):
        """The discriminator encoder, restored; `dropout` defaults to the model's."""
        self._check_pretrained()
        dropout = self.config.dropout if dropout is None else dropout
        return run_dir.load_encoder(self.pretrained, self.config, dropout)

    def pretrainer(self, dropout: Optional[float] = None):
        """The whole `ElectraPretrainer` (generator and heads too), restored."""
        from electra_tf.pretraining.pretrainer import ElectraPretrainer

        self._check_pretrained()
        parts = self.pretrained.parts()
        if not (parts["generator"] and parts["discriminator_head"]):
            raise ConfigError(f"{self.spec} has no generator and replaced-token-detection "
                              "head: load ElectraEncoder.from_pretrained, or "
                              "continue pretraining with electra-pretrain --init_checkpoint, "
                              "which starts a fresh generator.")
        config = self.config if dropout is None else self.config.replace(dropout=dropout)
        with restoring():
            model = ElectraPretrainer(config)
            model.build_all()
        run_dir.restore_pretrainer(model, self.pretrained, parts)
        return model

    def _check_pretrained(self):
        if self.pretrained is None:
            raise ConfigError(f"{self.spec!r} is a fine-tuned run: load it with the task "
                              "class it was trained as (e.g. ElectraTextClassifier).")


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

