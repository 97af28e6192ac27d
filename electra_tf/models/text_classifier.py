"""`ElectraTextClassifier`: a text (or a pair of texts) -> class probabilities, or a score."""

import keras
import numpy as np
import tensorflow as tf

from electra_tf import traced
from electra_tf.errors import ConfigError
from electra_tf.models.metrics import PearsonCorrelation
from electra_tf.models.task import ElectraTask, encoder_inputs
from electra_tf.text.packing import TEXT, TEXT_PAIR


@keras.saving.register_keras_serializable(package="electra_tf")
class ElectraTextClassifier(ElectraTask):
    """Classification (`num_classes` >= 2) or regression (`num_classes=1`) from the
    `[CLS]` vector, as the official fine-tuning code does it: dropout, then one dense
    layer.

    Called on packed inputs it returns logits [batch, num_classes] (regression: scores
    [batch], trained on labels scaled into `label_range` as below). `predict` returns
    probabilities (regression: scores in the labels' own range).

        clf = ElectraTextClassifier.from_pretrained("electra-small", num_classes=2)
        clf.fit(texts, labels, epochs=3, batch_size=32)   # or ((texts, pairs), labels)
        clf.predict(["a delightful film"])                # [1, 2] probabilities

    Args:
        encoder: the discriminator `ElectraEncoder`.
        num_classes: the classes, or 1 for regression (default: one per `label_names`).
        preprocessor: an `ElectraPreprocessor`, or None for packed inputs.
        dropout: before the head (the official recipe: the encoder's, 0.1).
        label_names: the classes' names (served with the predictions).
        label_range: regression labels (low, high) trained as `(label - low) / high`, as
            the official code does for STS-B's 0..5; predictions are scaled back.
        text_pairs: the model reads pairs (`fit` on pairs sets it); exports then take a
            `text_pair` too.
    """

    def __init__(self, encoder, num_classes=None, preprocessor=None, dropout=0.1,
                 initializer_range=0.02, label_names=None, label_range=None,
                 text_pairs=False, **kwargs):
        if num_classes is not None and num_classes < 1:
            raise ConfigError(f"num_classes={num_classes}: give 2 or more classes, or 1 for "
                              "regression.")
        self._init_dense_head(encoder, preprocessor, num_classes, dropout, initializer_range,
                              label_names)
        self.label_range = None if label_range is None else tuple(label_range)
        self.text_pairs = text_pairs
        super().__init__(**kwargs)

    @property
    def regression(self) -> bool:
        return self.num_classes == 1

    def call(self, inputs, training=None):
        # [CLS] alone is read: not the padding tail, nor the last layer elsewhere.
        inputs = self.cut_padding_tail(encoder_inputs(inputs))
        cls = self.encoder(inputs, training=training, pooled_only=True)["pooled_output"]
        logits = self.head(self.dropout(cls, training=training))
        return keras.ops.squeeze(logits, -1) if self.regression else logits

    def predictions(self, outputs):
        """Outputs of `call` -> probabilities, or scores in the labels' range."""
        if not self.regression:
            return keras.ops.softmax(outputs)
        low, high = self.label_range or (0.0, 1.0)
        return outputs * high + low

    def predict_step(self, data):
        x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
        return self.predictions(self(x, training=False))

    def task_loss(self):
        # Summed over the batch, as the official recipe (clipping then sees the sum).
        if self.regression:
            return keras.losses.MeanSquaredError(reduction="sum")
        return keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="sum")

    def task_metrics(self):
        if self.regression:
            return [PearsonCorrelation()]
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def fit(self, x=None, y=None, *args, validation_data=None, **kwargs):
        """Keras's `fit`; class labels may be names (of `label_names`) as well as ids."""
        if isinstance(x, tuple) and len(x) == 2 and self.preprocessor is not None:
            self.text_pairs = True
        if isinstance(validation_data, tuple) and len(validation_data) >= 2:
            validation_data = (validation_data[0], self.label_ids(validation_data[1]),
                               *validation_data[2:])
        return super().fit(x, self.label_ids(y), *args, validation_data=validation_data,
                           **kwargs)

    def label_tensors(self, y):
        return super().label_tensors(self.label_ids(y))

    def label_ids(self, labels):
        """Class names (of `label_names`) -> ids; anything else as it is."""
        if self.regression or not self.label_names or labels is None or isinstance(
                labels, (tf.data.Dataset, tf.Tensor)) or len(labels) == 0:
            return labels
        if not isinstance(labels[0], str):
            return labels
        index = {name: i for i, name in enumerate(self.label_names)}
        unknown = sorted({label for label in labels if label not in index})
        if unknown:
            raise ConfigError(f"Labels {unknown[:5]} are not among label_names "
                              f"{self.label_names}.")
        return np.asarray([index[label] for label in labels], np.int32)

    # ------------------------------------------------------------------ serving
    def serving_signatures(self) -> dict:
        """{"serving_default": tf.function}: `text` [N] (and `text_pair` [N] for a model
        trained on pairs; an empty one packs `[CLS] text [SEP] [SEP]`) in; out
        `probabilities` [N, classes], `label_id` [N] and `label` [N] (the class name),
        or for regression `score` [N]. Every tensor dense, as TF Serving needs."""
        names = tf.constant(self.label_names or [str(i) for i in range(self.num_classes)])

        def serve(segments):
            inputs = self.preprocessor(tuple(segments))
            outputs = self.predictions(self(inputs, training=False))
            if self.regression:
                return {"score": outputs}
            label_id = tf.argmax(outputs, -1, output_type=tf.int32)
            return {"probabilities": outputs, "label_id": label_id,
                    "label": tf.gather(names, label_id)}

        if self.text_pairs:
            function = traced.function(lambda text, text_pair: serve([text, text_pair]),
                                       input_signature=[TEXT, TEXT_PAIR])
        else:
            function = traced.function(lambda text: serve([text]), input_signature=[TEXT])
        return {"serving_default": function}


    def get_config(self):
        config = super().get_config()
        config.update({**self._dense_head_config(), "label_range": self.label_range,
                       "text_pairs": self.text_pairs})
        return config
