"""`ElectraEncoder`: a BERT-style transformer tower over a (possibly shared) embedding block."""

import keras
import tensorflow as tf

from electra_tf.layers.activations import GELU
from electra_tf.layers.closed_form_layer_normalization import use_closed_form_layer_norms
from electra_tf.layers.embeddings import ElectraEmbeddings
from electra_tf.layers.flat_dense import FlatDense
from electra_tf.layers.flat_einsum_dense import flatten_projections
from electra_tf.layers.inference import sequence_batch
from electra_tf.layers.initializers import weight_initializer
from electra_tf.layers.layer_stack import apply_layer_stack
from electra_tf.layers.query_first_attention import put_query_first
from electra_tf.layers.transformer_layer import TransformerLayer, post_norm_output
from electra_tf.tf_runtime import run_eager_ops_by_their_kernels

INPUT_NAMES = ("input_word_ids", "input_mask", "input_type_ids")


def input_specs() -> dict:
    """The encoder's inputs for any batch and length, as a `tf.function`'s signature: one
    trace serves them all."""
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES}


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraEncoder(keras.Model):
    """Embeddings -> optional projection -> post-LN transformer layers (exact GELU).

    Inputs and outputs follow the TF Hub BERT-encoder convention.

    Call arguments:
        inputs: dict of `input_word_ids`, `input_mask`, `input_type_ids`, int [batch, seq].
        pooled_only: return `pooled_output` alone, the last layer computed at the `[CLS]`
            position only (`first_position_output`): for heads that read nothing else.
    Returns: dict with
        `sequence_output`: [batch, seq, hidden];
        `pooled_output`: [batch, hidden], the `[CLS]` vector (ELECTRA has no pooler);
        `encoder_outputs`: list of [batch, seq, hidden], one per layer.

    Args:
        embeddings: the `ElectraEmbeddings` block; pass the discriminator's to the
            generator so both use the same variables.
        activation: the feed-forward activation, `GELU` (the exact GELU in the official
            code's form), `"electra_tf>fused_gelu"` (the same function, faster to train on
            CPUs) or Keras's `"gelu"` (the same again; see `activations`). It holds no
            weights: checkpoints load under any of them.
    """

    def __init__(self, embeddings, hidden_size, num_layers, num_heads, intermediate_size,
                 dropout=0.1, initializer_range=0.02, layer_norm_epsilon=1e-12,
                 activation=GELU, **kwargs):
        super().__init__(**kwargs)
        if isinstance(embeddings, dict):
            embeddings = keras.saving.deserialize_keras_object(embeddings)
        self.embeddings = embeddings
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        self.activation = activation
        initializer = weight_initializer(initializer_range)
        self.embeddings_project = None
        if embeddings.embedding_size != hidden_size:
            self.embeddings_project = FlatDense(
                hidden_size, kernel_initializer=initializer, dtype=self.dtype_policy,
                name="embeddings_project")
        self.transformer_layers = [
            TransformerLayer(
                intermediate_dim=intermediate_size, num_heads=num_heads, dropout=dropout,
                activation=keras.saving.get_registered_object(activation) or activation,
                layer_norm_epsilon=layer_norm_epsilon, kernel_initializer=initializer,
                dtype=self.dtype_policy, name=f"layer_{i}")
            for i in range(num_layers)
        ]
        # tf.train.Checkpoint does not follow Keras 3's layer lists; name each layer in the
        # object graph so a checkpoint's `discriminator` subtree holds every weight.
        for i, layer in enumerate(self.transformer_layers):
            self._track_trackable(layer, name=f"layer_{i}")

    @classmethod
    def from_electra_config(cls, config, generator=False, embeddings=None, **kwargs):
        """Builds the discriminator (or, with `generator=True`, the generator) tower."""
        if embeddings is None:
            embeddings = ElectraEmbeddings.from_electra_config(config)
        if generator:
            sizes = (config.generator_hidden_size, config.num_layers,
                     config.generator_num_heads, config.generator_intermediate_size)
        else:
            sizes = (config.hidden_size, config.num_layers, config.num_heads,
                     config.intermediate_size)
        return cls(embeddings, *sizes, dropout=config.dropout,
                   initializer_range=config.initializer_range,
                   layer_norm_epsilon=config.layer_norm_epsilon,
                   name="generator" if generator else "discriminator", **kwargs)

    @classmethod
    def from_pretrained(cls, name_or_path: str, dropout=None) -> "ElectraEncoder":
        """The discriminator encoder of a pretrained model, restored: any source
        `electra_tf.resolve` takes (catalog name, `hf:ORG/NAME`, URL, local Hugging Face,
        official or keras-hub model, pretraining run). `dropout` defaults to the model's.

            encoder = ElectraEncoder.from_pretrained("electra-small")
            outputs = encoder({"input_word_ids": ids, "input_mask": mask,
                               "input_type_ids": segments})  # int32 [batch, seq] each
        """
        # Deferred, as keras-hub defers its preset loaders: opening a source may convert
        # it, and converting builds this very class.
        from electra_tf.models.sources import open_model

        return open_model(name_or_path).encoder(dropout)

    def build(self, inputs_shape=None):
        # Explicit, so Keras need not trace `call` symbolically to create the weights: that
        # trace took 7 s per ELECTRA-Small tower on a 2-core EPYC, at every model build.
        run_eager_ops_by_their_kernels()  # every variable's creation 3-5x sooner
        shape = tuple((inputs_shape or {}).get("input_word_ids", (None, None)))
        if not self.embeddings.built:  # a shared block already has its variables
            self.embeddings.build(shape, shape)
        if self.embeddings_project is not None:
            self.embeddings_project.build(shape + (self.embeddings.embedding_size,))
        for layer in self.transformer_layers:
            layer.build(shape + (self.hidden_size,))
            flatten_projections(layer)
            put_query_first(layer)
            use_closed_form_layer_norms(layer)
        self.built = True

    def call(self, inputs, training=None, pooled_only=False):
        padding_mask = keras.ops.cast(inputs["input_mask"], "bool")
        layers, pooling_layer = self.transformer_layers, None
        if pooled_only and layers:
            layers, pooling_layer = layers[:-1], layers[-1]
        with sequence_batch(inputs["input_mask"]):
            x = self.embeddings(inputs["input_word_ids"], inputs["input_type_ids"],
                                training=training)
            if self.embeddings_project is not None:
                x = self.embeddings_project(x)
            encoder_outputs = apply_layer_stack(layers, x, training=training,
                                                padding_mask=padding_mask)
        x = encoder_outputs[-1] if encoder_outputs else x
        if pooling_layer is not None:
            # Outside `sequence_batch`: this layer's queries are not the sequences.
            x = first_position_output(pooling_layer, x, padding_mask, training)
        if pooled_only:
            return {"pooled_output": x[:, 0, :]}
        return {
            "sequence_output": x,
            "pooled_output": x[:, 0, :],
            "encoder_outputs": encoder_outputs,
        }

    def get_config(self):
        return {
            "name": self.name,
            "embeddings": keras.saving.serialize_keras_object(self.embeddings),
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "intermediate_size": self.intermediate_size,
            "dropout": self.dropout,
            "initializer_range": self.initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "activation": self.activation,
        }


def first_position_output(transformer_layer, x, padding_mask, training=None):
    """A built post-LN keras-hub `TransformerEncoder`'s output at the first position,
    [batch, 1, hidden]: `transformer_layer(x, padding_mask=padding_mask)[:, :1]`, computed
    for that position's query alone (keras-hub's `call` takes no separate query).

    Why: a head that reads the `[CLS]` vector alone needs the last layer's keys and values
    at every position, and nothing else there: its query and output projections, the
    feed-forward layer and the layer norms at the other positions are 10/12 of that
    layer's products, about 7% of ELECTRA-Small's encoder. The same function of the same
    weights, so the same gradients (dropout draws its masks for that position only)."""
    if transformer_layer.normalize_first:
        raise NotImplementedError("first_position_output computes post-LN layers (ELECTRA's).")
    first = keras.ops.expand_dims(x[:, 0], 1)  # of one position even where x's are unknown
    return post_norm_output(transformer_layer, first, x, padding_mask[:, None, :], training)
