"""Task metrics Keras does not provide in their exact (whole-dataset) form."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="electra_tf")
class PearsonCorrelation(keras.metrics.Metric):
    """Pearson's r over every example seen (running sums), not a mean of per-batch values
    as `keras.metrics.PearsonCorrelation` computes: what GLUE's STS-B score is."""

    def __init__(self, name="pearson", **kwargs):
        super().__init__(name=name, **kwargs)
        self.sums = self.add_variable(shape=(6,), initializer="zeros", name="sums",
                                      dtype="float64")

    def update_state(self, y_true, y_pred, sample_weight=None):
        y = ops.reshape(ops.cast(y_true, "float64"), [-1])
        p = ops.reshape(ops.cast(y_pred, "float64"), [-1])
        self.sums.assign_add(ops.stack([
            ops.cast(ops.shape(y)[0], "float64"), ops.sum(y), ops.sum(p), ops.sum(y * y),
            ops.sum(p * p), ops.sum(y * p)]))

    def result(self):
        n, sy, sp, syy, spp, syp = ops.unstack(self.sums)
        covariance = n * syp - sy * sp
        spread = ops.sqrt(ops.maximum(n * syy - sy * sy, 0.0) * ops.maximum(n * spp - sp * sp,
                                                                           0.0))
        return ops.cast(ops.where(spread > 0, covariance / ops.maximum(spread, 1e-30), 0.0),
                        "float32")

    def reset_state(self):
        self.sums.assign(ops.zeros((6,), "float64"))
