"""The public Keras objects, keras-hub's pattern: a tokenizer, a preprocessor that packs raw
strings for the encoder, and task models that hold their preprocessor, each with
`from_pretrained(name_or_path)` and `get_config` (so `model.save("x.keras")` round-trips).
"""

# Importing this package registers every class with Keras, which `keras.saving.load_model`
# and the restoring of fine-tuned runs need (`import electra_tf` alone stays light: it
# loads them on use).
from electra_tf.layers.encoder import ElectraEncoder  # noqa: E402,F401
from electra_tf.models.metrics import PearsonCorrelation  # noqa: E402,F401
from electra_tf.models.preprocessor import ElectraPreprocessor  # noqa: E402,F401
from electra_tf.models.question_answerer import ElectraQuestionAnswerer  # noqa: E402,F401
from electra_tf.models.text_classifier import ElectraTextClassifier  # noqa: E402,F401
from electra_tf.models.token_classifier import ElectraTokenClassifier  # noqa: E402,F401
from electra_tf.text.tokenizer import ElectraTokenizer  # noqa: E402,F401
from electra_tf.pretraining.pretrainer import ElectraPretrainer  # noqa: E402,F401
