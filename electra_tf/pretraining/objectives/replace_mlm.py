"""`replace_mlm`: MLM on positions that hold generator samples instead of `[MASK]`."""

from electra_tf.pretraining.objectives.base import MaskedLanguageModeling


class ReplaceMlm(MaskedLanguageModeling):
    """Replace MLM (paper Table 5): the generator's samples fill the chosen positions and
    the kept encoder predicts the original tokens there."""

    name = "replace_mlm"
