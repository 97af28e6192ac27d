"""The embedding block shared by ELECTRA's generator and discriminator."""

import keras
import keras_hub

from electra_tf.layers.closed_form_layer_normalization import ClosedFormLayerNormalization
from electra_tf.layers.initializers import weight_initializer


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraEmbeddings(keras.layers.Layer):
    """Word + position + segment embeddings, then LayerNorm and dropout.

    One instance is shared by the generator and the discriminator (the paper ties all
    embeddings); the word matrix is also the generator's (transposed) output layer, through
    `token_embedding(x, reverse=True)`.

    Args:
        token_embedding: optional existing `ReversibleEmbedding` (e.g. another block's
            `token_embedding`) to use as this block's word embeddings: the generator of
            `tie_embeddings="token"` shares only the word matrix with the discriminator.
            Not part of `get_config`.
        gradient_disentangled: the discriminator's block under DeBERTa-v3's
            gradient-disentangled embedding sharing (`tie_embeddings="gdes"`): it looks
            words up in `stop_gradient(E) + token_delta`, where `E` is the word matrix the
            generator shares and trains and `token_delta` (zeros at first) is trained by
            the discriminator's loss alone. `word_table()` is the sum, the matrix the kept
            encoder uses.

    Call arguments:
        token_ids: int [batch, seq].
        segment_ids: int [batch, seq].
    Returns: float [batch, seq, embedding_size].

    Example:
    >>> block = ElectraEmbeddings(vocab_size=100, embedding_size=16)
    >>> block(np.zeros((2, 8), "int32"), np.zeros((2, 8), "int32")).shape
    (2, 8, 16)
    """

    def __init__(self, vocab_size, embedding_size, max_position_embeddings=512,
                 type_vocab_size=2, dropout=0.1, initializer_range=0.02,
                 layer_norm_epsilon=1e-12, token_embedding=None, gradient_disentangled=False,
                 **kwargs):
        super().__init__(**kwargs)
        self.gradient_disentangled = gradient_disentangled
        self.token_delta = None
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.max_position_embeddings = max_position_embeddings
        self.type_vocab_size = type_vocab_size
        self.dropout = dropout
        self.initializer_range = initializer_range
        self.layer_norm_epsilon = layer_norm_epsilon
        initializer = weight_initializer(initializer_range)
        # `reverse_dtype`: the generator's vocabulary products (`reverse=True`) in the
        # compute dtype, as Keras documents as the default; left unset, Keras multiplies
        # in the float32 matrix's dtype, as `Embedding` does not autocast. Under
        # mixed_bfloat16 those three products of 608 x 128 x 30,522 took 104-120 ms of
        # ELECTRA-Small's 1.3 s pretraining step (2-core AVX-512 EPYC).
        self.token_embedding = token_embedding or keras_hub.layers.ReversibleEmbedding(
            vocab_size, embedding_size, tie_weights=True,
            embeddings_initializer=initializer, dtype=self.dtype_policy,
            reverse_dtype=self.dtype_policy.compute_dtype, name="word_embeddings")
        self.position_embedding = keras_hub.layers.PositionEmbedding(
            sequence_length=max_position_embeddings, initializer=initializer,
            dtype=self.dtype_policy, name="position_embeddings")
        self.segment_embedding = keras.layers.Embedding(
            type_vocab_size, embedding_size, embeddings_initializer=initializer,
            dtype=self.dtype_policy, name="token_type_embeddings")
        self.layer_norm = ClosedFormLayerNormalization(
            epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm")
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)

    @classmethod
    def from_electra_config(cls, config, embedding_size=None, token_embedding=None,
                            gradient_disentangled=False):
        """The block of `config` (`embedding_size` overrides the config's width)."""
        return cls(config.vocab_size, embedding_size or config.embedding_size,
                   config.max_position_embeddings, config.type_vocab_size, config.dropout,
                   config.initializer_range, config.layer_norm_epsilon,
                   token_embedding=token_embedding,
                   gradient_disentangled=gradient_disentangled, name="embeddings")

    def build(self, token_ids_shape, segment_ids_shape=None):
        if not self.token_embedding.built:  # a shared one already has its variables
            self.token_embedding.build(token_ids_shape)
        self.position_embedding.build(tuple(token_ids_shape) + (self.embedding_size,))
        self.segment_embedding.build(token_ids_shape)
        self.layer_norm.build(tuple(token_ids_shape) + (self.embedding_size,))
        if self.gradient_disentangled:
            self.token_delta = self.add_weight(
                shape=(self.vocab_size, self.embedding_size), initializer="zeros",
                name="token_delta")
        self.built = True

    def word_table(self):
        """The word matrix this block looks words up in ([vocab, embedding_size])."""
        table = self.token_embedding.embeddings
        if not self.gradient_disentangled:
            return table
        return keras.ops.stop_gradient(table) + self.token_delta

    def call(self, token_ids, segment_ids, training=None):
        if self.gradient_disentangled:
            tokens = keras.ops.take(keras.ops.cast(self.word_table(), self.compute_dtype),
                                    token_ids, axis=0)
        else:
            tokens = self.token_embedding(token_ids)
        x = tokens + self.position_embedding(tokens) + self.segment_embedding(segment_ids)
        return self.dropout_layer(self.layer_norm(x), training=training)

    def compute_output_shape(self, token_ids_shape, segment_ids_shape=None):
        return tuple(token_ids_shape) + (self.embedding_size,)

    def get_config(self):
        config = super().get_config()
        config.update({
            "vocab_size": self.vocab_size,
            "embedding_size": self.embedding_size,
            "max_position_embeddings": self.max_position_embeddings,
            "type_vocab_size": self.type_vocab_size,
            "dropout": self.dropout,
            "initializer_range": self.initializer_range,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "gradient_disentangled": self.gradient_disentangled,
        })
        return config
