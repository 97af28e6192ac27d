"""`electra_15`: replaced token detection on the positions chosen for masking only."""

from electra_tf.pretraining.masking import chosen_positions_mask
from electra_tf.pretraining.objectives.base import ReplacedTokenDetection


class Electra15(ReplacedTokenDetection):
    """ELECTRA 15% (paper Table 5): the BCE counts the ~15% chosen positions, where the
    generator's samples went, instead of every token."""

    name = "electra_15"

    def detection_weights(self, outputs):
        return chosen_positions_mask(outputs["mlm_positions"], outputs["mlm_weights"],
                                     outputs["input_ids"].shape[1])
