"""`inference_only()`: functions traced within take no gradients, so the layers whose
gradient is written by hand trace their forward pass alone.

Why: `tf.custom_gradient` builds its gradient's graph machinery at every call while
tracing, about 2-5 ms each in Python. ELECTRA-Small's classifier holds 73 (the layer
normalizations' closed-form gradients and the attention's head swaps), about a quarter of
the ~1 s its predict function took to trace. Outputs are the same ops either way, but for
the layer normalizations, which normalize in a cheaper order
(`closed_form_layer_normalization.normalize_for_inference`).
"""

import contextvars

from electra_tf import traced

_inference_only = contextvars.ContextVar("inference_only", default=False)


def inference_only():
    """Within, layers trace without their hand-written gradients. For functions that are
    never differentiated (`predict`, `evaluate`, TF Serving signatures); not for the TF
    Hub-style encoder export, whose users fine-tune through it."""
    return traced.switched(_inference_only, True)


def gradients_wanted() -> bool:
    """False within `inference_only()`."""
    return not _inference_only.get()
