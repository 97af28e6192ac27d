"""TF Hub-style SavedModels: the discriminator encoder, and its text preprocessor.

They follow the TF Hub BERT-encoder convention (the published `electra_small` encoders
with `bert_en_uncased_preprocess`), so code written for those works with ours:

    preprocess = hub.KerasLayer("exports/x/preprocess")
    encoder = hub.KerasLayer("exports/x/encoder", trainable=True)
    outputs = encoder(preprocess(["a sentence"]))   # sequence_output, pooled_output, ...

Both are plain `tf.saved_model` objects ("reusable SavedModels"): no generator variable,
no Keras metadata, loadable by `tf.saved_model.load`, `hub.KerasLayer` and Keras 3's
`TFSMLayer`. Written by hand because neither Keras 3's `model.export` (no `training`
argument, no `variables` lists) nor keras-hub (its own preset format) writes this layout.
"""

import os

import tensorflow as tf

from electra_tf import files, run_dir, traced
from electra_tf.layers.encoder import INPUT_NAMES, input_specs
from electra_tf.layers.export_tracing import export_tracing
from electra_tf.models.serving import Reusable
from electra_tf.text.packing import pack_segments
from electra_tf.text.tokenizer import ElectraTokenizer


def build_encoder_module(encoder, vocab_path: str):
    """The reusable SavedModel object of a built `ElectraEncoder` (the discriminator).

    `__call__(inputs, training=False)` returns `sequence_output` [batch, seq, hidden],
    `pooled_output` and `default` (the `[CLS]` vector) [batch, hidden], and
    `encoder_outputs` (one [batch, seq, hidden] per layer).
    """
    module = Reusable()
    module.vocab_file = tf.saved_model.Asset(vocab_path)
    # TF Hub reads these lists to fine-tune the model; they hold tf.Variables. They are
    # also what is saved: tracking the Keras encoder as well would save every weight twice.
    module.variables = [v.value for v in encoder.weights]
    module.trainable_variables = [v.value for v in encoder.trainable_weights]
    module.regularization_losses = []
    # Dropout's random-seed state is not among the weights but the graph reads it.
    module.dropout_seed_states = [v.value for v in encoder.variables
                                  if "seed_generator" in v.path]

    @traced.function
    def call(inputs, training=False):
        outputs = encoder({name: inputs[name] for name in INPUT_NAMES}, training=training)
        return {"sequence_output": outputs["sequence_output"],
                "pooled_output": outputs["pooled_output"],
                "default": outputs["pooled_output"],
                "encoder_outputs": outputs["encoder_outputs"]}

    with export_tracing():
        for training in (False, True):
            call.get_concrete_function(input_specs(), training=training)
    module.__call__ = call

    @traced.function(input_signature=[input_specs()])
    def serve(inputs):
        outputs = call(inputs, training=False)
        flat = {k: outputs[k] for k in ("sequence_output", "pooled_output", "default")}
        for i, layer_output in enumerate(outputs["encoder_outputs"]):
            flat[f"encoder_outputs_{i}"] = layer_output
        return flat

    module.serve = serve
    return module


def build_preprocess_module(vocab_path: str, lower_case: bool, strip_accents: bool,
                            special_ids: dict, seq_length: int):
    """The preprocessing SavedModel object: raw strings -> the encoder's three int32 inputs.

    Attributes like TF Hub's BERT preprocessors:
      `__call__(strings [batch])` -> `input_word_ids`, `input_mask`, `input_type_ids`,
          int32 [batch, seq_length];
      `tokenize(strings [batch])` -> int32 word-piece ids, ragged [batch, None];
      `bert_pack_inputs(segments, seq_length)` -> the three tensors for one or two
          tokenized segments (`[CLS] a [SEP] b [SEP]`, truncated round-robin as TF Hub's
          BERT preprocessors do).
    """
    module = Reusable()
    module.vocab_file = tf.saved_model.Asset(vocab_path)
    module.tokenizer = ElectraTokenizer(vocab_path, lower_case, strip_accents)

    @traced.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def tokenize(strings):
        return module.tokenizer(strings)

    ragged = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)

    bert_pack_inputs = Reusable()  # called as bert_pack_inputs(segments, seq_length=...)

    @traced.function
    def pack_inputs(segments, seq_length=seq_length):
        return pack_segments(segments, seq_length, special_ids, "round_robin")

    for count in (1, 2):
        pack_inputs.get_concrete_function([ragged] * count)
        pack_inputs.get_concrete_function([ragged] * count, tf.TensorSpec([], tf.int32))
    bert_pack_inputs.__call__ = pack_inputs
    module.bert_pack_inputs = bert_pack_inputs
    module.tokenize = tokenize

    @traced.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def call(strings):
        return pack_segments([module.tokenizer(strings)], seq_length, special_ids,
                             "round_robin")

    module.__call__ = call
    return module


def export_encoder(checkpoint: str, output: str, seq_length: int = 128) -> dict:
    """Writes `output/encoder` and `output/preprocess` for a pretraining run (or a converted
    one); returns their paths. Written beside `output` first, then renamed into place;
    `output` must not exist yet (or be an empty directory)."""
    files.check_new_directory(output)  # before the slow part
    pretrained = run_dir.open_pretrained(checkpoint)
    config = pretrained.config
    encoder = run_dir.load_encoder(pretrained, config, dropout=config.dropout)
    encoder_module = build_encoder_module(encoder, pretrained.vocab_path)
    preprocess = build_preprocess_module(pretrained.vocab_path, config.lower_case,
                                         config.strip_accents, pretrained.special_ids,
                                         seq_length)
    with files.atomic_directory(output) as partial:
        tf.saved_model.save(encoder_module, os.path.join(partial, "encoder"),
                            signatures={"serving_default": encoder_module.serve})
        with export_tracing():  # the preprocessor's functions are traced here
            tf.saved_model.save(preprocess, os.path.join(partial, "preprocess"),
                                signatures={"serving_default": preprocess.__call__})
    return {"encoder": os.path.join(output, "encoder"),
            "preprocess": os.path.join(output, "preprocess")}
