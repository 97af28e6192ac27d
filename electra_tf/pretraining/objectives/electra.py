"""`electra`: replaced token detection over every real token (the paper's objective)."""

from electra_tf.pretraining.objectives.base import ReplacedTokenDetection


class Electra(ReplacedTokenDetection):
    """Generator MLM + 50 x the discriminator's BCE averaged over every non-pad token."""

    name = "electra"

    def detection_weights(self, outputs):
        return outputs["input_mask"]
