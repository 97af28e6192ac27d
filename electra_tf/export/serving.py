"""TF Serving SavedModels of fine-tuned models: raw strings in, predictions out.

The task's kind (`finetuning.kinds`) makes the signatures (every input and output a dense
tensor, so TF Serving's REST and gRPC APIs can carry them); this module holds them, the
variables, the vocab and the tokenizer in one SavedModel object.
"""

import tensorflow as tf

from electra_tf.export.encoder import Reusable
from electra_tf.finetuning import kinds
from electra_tf.text.tokenizer import make_tokenizer


def build_serving_module(run):
    """A SavedModel object and its signatures for a restored `run_dir.Finetuned`.

    Returns (module, signatures: {name: concrete function}).
    """
    kind = kinds.get(run.kind)
    module = Reusable()
    model = run.model
    # The graphs' variables, saved once each as plain tf.Variables. (Tracking the Keras
    # model too would save every weight a second time, as Keras variable objects.)
    module.model_variables = [v.value for v in model.variables]
    module.vocab_file = tf.saved_model.Asset(run.vocab_path)
    module.tokenizer = make_tokenizer(run.vocab_path, run.encoder_config.lower_case,
                                      run.encoder_config.strip_accents)
    signatures = kind.serving_signatures(run, module.tokenizer)
    module.signature_functions = signatures  # saved with the object
    return module, signatures


def example_inputs(input_specs, batch_size: int) -> dict:
    """A batch of valid inputs for a serving function's `input_signature` (warm-up)."""
    text = tf.constant(["ELECTRA warm-up request."] * batch_size)
    return {spec.name: tf.strings.split(text).to_tensor("") if spec.shape.rank == 2 else text
            for spec in input_specs}
