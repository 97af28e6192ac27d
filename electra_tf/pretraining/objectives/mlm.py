"""`mlm`: BERT with dynamic masking, trained as the paper's baseline; no generator."""

from electra_tf.errors import ConfigError
from electra_tf.pretraining.objectives.base import MaskedLanguageModeling


class Mlm(MaskedLanguageModeling):
    """The kept encoder reads the `[MASK]`ed text (85% `[MASK]`, 15% unchanged) and
    predicts the chosen positions."""

    name = "mlm"
    reads_samples = False

    def validate(self, config):
        if config.generator != "transformer":
            raise ConfigError("objective='mlm' has no generator: drop --generator (it "
                              "applies to the objectives with one).")
