"""TF Serving SavedModels of fine-tuned models: raw strings in, predictions out.

Signatures by task kind (every input and output is a dense tensor, so TF Serving's REST
and gRPC APIs can carry them; `N` = batch, `L` = number of labels, `W` = words):

  classification  serving_default(text [N] (, text_pair [N]))
                    -> probabilities float32 [N, L], label_id int32 [N], label string [N]
  regression      serving_default(text [N] (, text_pair [N])) -> score float32 [N]
  tagging         serving_default(words string [N, W], "" padding)
                  tag_text(text [N]), split on whitespace
                    -> tags string [N, W] ("O" for words cut by the length limit, "" for
                       padding), tag_ids int32 [N, W] (-1 for both), probabilities
                       float32 [N, W, L]

`text_pair` is an input only when the model was trained on pairs; an empty `text_pair` is
packed as `[CLS] text [SEP] [SEP]`, as fine-tuning packed examples without a pair.
Texts longer than the training length are truncated, never refused.
"""

import tensorflow as tf

from electra_tf.errors import ConfigError
from electra_tf.export.encoder import Reusable
from electra_tf.export.packing import pack_segments, pack_words
from electra_tf.text.tokenizer import make_tokenizer

TEXT = tf.TensorSpec([None], tf.string, name="text")
TEXT_PAIR = tf.TensorSpec([None], tf.string, name="text_pair")
WORDS = tf.TensorSpec([None, None], tf.string, name="words")


def build_serving_module(run):
    """A SavedModel object and its signatures for a restored `finetuning.run.Finetuned`.

    Returns (module, signatures: {name: concrete function}).
    """
    kind = run.task.kind
    if kind == "qa":
        raise ConfigError("Serving export of QA models is not supported yet; export the "
                         "encoder with export_encoder.py and decode spans client-side.")
    module = Reusable()
    model = run.model
    # The graphs' variables, saved once each as plain tf.Variables. (Tracking the Keras
    # model too would save every weight a second time, as Keras variable objects.)
    module.model_variables = [v.value for v in model.variables]
    module.vocab_file = tf.saved_model.Asset(run.vocab_path)
    module.tokenizer = make_tokenizer(run.vocab_path, run.encoder_config.lower_case,
                                      run.encoder_config.strip_accents)
    seq_length, special = run.cfg.max_seq_length, run.special_ids
    label_names = tf.constant([str(label) for label in run.labels] or [""])

    if kind == "tagging":
        def tag(words: tf.RaggedTensor):
            pieces = words.with_values(module.tokenizer(words.values))
            inputs, word_starts = pack_words(pieces, seq_length, special)
            logits = model(inputs, training=False)
            tagged = word_starts >= 0
            probabilities = tf.gather(tf.nn.softmax(logits), tf.maximum(word_starts, 0),
                                      batch_dims=1)
            probabilities *= tf.cast(tagged, probabilities.dtype)[..., None]
            tag_ids = tf.where(tagged, tf.argmax(probabilities, -1, output_type=tf.int32), -1)
            real = words.with_values(tf.ones_like(words.values, tf.bool)).to_tensor(False)
            tags = tf.where(tagged, tf.gather(label_names, tf.maximum(tag_ids, 0)),
                            tf.where(real, "O", ""))
            return {"tags": tags, "tag_ids": tag_ids, "probabilities": probabilities}

        @tf.function(input_signature=[WORDS])
        def serve(words):
            return tag(tf.RaggedTensor.from_tensor(words, padding=""))

        @tf.function(input_signature=[TEXT])
        def tag_text(text):
            return tag(tf.strings.split(text))

        module.serve, module.tag_text = serve, tag_text
        return module, {"serving_default": serve, "tag_text": tag_text}

    def predict(segments):
        inputs = pack_segments([module.tokenizer(s) for s in segments], seq_length, special)
        outputs = model(inputs, training=False)
        if kind == "regression":
            return {"score": outputs}
        label_id = tf.argmax(outputs, -1, output_type=tf.int32)
        return {"probabilities": tf.nn.softmax(outputs), "label_id": label_id,
                "label": tf.gather(label_names, label_id)}

    if run.text_pairs:
        serve = tf.function(lambda text, text_pair: predict([text, text_pair]),
                            input_signature=[TEXT, TEXT_PAIR])
    else:
        serve = tf.function(lambda text: predict([text]), input_signature=[TEXT])
    module.serve = serve
    return module, {"serving_default": serve}


def example_inputs(input_specs, batch_size: int) -> dict:
    """A batch of valid inputs for a serving function's `input_signature` (warm-up)."""
    text = tf.constant(["ELECTRA warm-up request."] * batch_size)
    return {spec.name: tf.strings.split(text).to_tensor("") if spec.shape.rank == 2 else text
            for spec in input_specs}
