"""`FlatEinsumDense`: Keras's `EinsumDense` with its contraction run as one 2-D matmul.

Written by hand because Keras's TensorFlow backend computes the attention projections'
einsums ("abc,cde->abde" for query, key and value, "abcd,cde->abe" for the output) as
`tf.matmul` of a 3-D input with a 2-D kernel, which TensorFlow runs as a broadcasting
`BatchMatMulV2`: its kernel gradient is one small matmul per example followed by a sum
over the batch. Flattened to [batch x seq, features] (`flat_dense.flat_matmul`: a 2-D
`MatMul` and `BiasAdd`, which TensorFlow fuses), forward and backward are single `MatMul`s:
one projection's forward and backward at ELECTRA-Small's [32, 128, 256] x [256, 4, 64]
took 31 ms as einsum and 15 ms flattened on a 2-core AVX2 EPYC. Same weights, names and
values (to float32 rounding).

Its `output_scale` multiplies the outputs: the attention's query scaling, which
`QueryFirstAttention` leaves to its query projection. Where gradients are wanted it
multiplies the kernel and bias instead ([256, 256] and [256] values at ELECTRA-Small's
size, where the outputs are [32, 128, 256] values), and the gradient multiplies the
kernel's and bias's gradients instead of the outputs': ELECTRA-Small's bf16 pretraining
step spent 14 ms less in `Mul`s (68 -> 54 ms of a ~1.5 s step, 2-core AVX-512 EPYC). For a
power of two, as at every ELECTRA size (heads of 64: 1/8), the outputs are the same floats
either way, and the gradients too but for the order in which TensorFlow sums an input's
gradients. Outside training the outputs are multiplied: a short request's outputs hold
fewer values than the kernel.
"""

import keras
import tensorflow as tf

from electra_tf.layers.flat_dense import FlatDense, flat_matmul
from electra_tf.layers.inference import gradients_wanted
from electra_tf.layers.query_first_attention import self_attention


@keras.saving.register_keras_serializable(package="electra_tf")
class FlatEinsumDense(keras.layers.EinsumDense):
    """An `EinsumDense` whose equation contracts the input's trailing axes with the
    kernel's leading ones, computed with `tensordot`; other equations, LoRA and quantized
    kernels go through `EinsumDense.call` unchanged. `output_scale`, when not None,
    multiplies the outputs of a projection without activation (the module says how)."""

    output_scale = None

    def call(self, inputs, training=None):
        axes = contracted_axes(self.equation)
        if (not axes or self.lora_enabled or self.quantization_mode is not None
                or (self.bias is not None
                    and tuple(self.bias.shape) != tuple(self.kernel.shape[axes:]))):
            return self._scaled(super().call(inputs, training=training))
        folded = self.output_scale is not None and gradients_wanted()
        kernel, bias = self.kernel, self.bias
        if folded:
            kernel = self._scaled(tf.convert_to_tensor(kernel))
            bias = None if bias is None else self._scaled(tf.convert_to_tensor(bias))
        outputs = flat_matmul(inputs, kernel, bias, contracted_axes=axes,
                              activation=self.activation, training=training)
        return outputs if folded else self._scaled(outputs)

    def _scaled(self, x):
        if self.output_scale is None:
            return x
        return x * tf.constant(self.output_scale, x.dtype)


def contracted_axes(equation: str) -> int:
    """How many trailing input axes `equation` contracts with the kernel's leading axes
    when it is exactly a tensordot ("abc,cde->abde": 1; "abcd,cde->abe": 2), else 0."""
    inputs, output = equation.replace(" ", "").split("->")
    lhs, _, rhs = inputs.partition(",")
    for axes in range(1, min(len(lhs), len(rhs)) + 1):
        if (lhs[-axes:] == rhs[:axes] and output == lhs[:-axes] + rhs[axes:]
                and len(set(lhs + rhs)) == len(lhs) + len(rhs) - axes):
            return axes
    return 0


def flatten_projections(transformer_layer) -> None:
    """Makes a built keras-hub `TransformerEncoder`'s attention projections
    `FlatEinsumDense` and its feed-forward layers `FlatDense`: the same objects (weights,
    names, checkpoints), another `call`.

    The projections are created inside Keras's `MultiHeadAttention.build` and the
    feed-forward layers inside keras-hub's, which offer no way to choose their class;
    changing the class of the built objects keeps everything else about them.
    """
    for projection in attention_projections(transformer_layer):
        projection.__class__ = FlatEinsumDense
    for dense in feedforward_layers(transformer_layer):
        dense.__class__ = FlatDense


def attention_projections(transformer_layer) -> tuple:
    """A built keras-hub `TransformerEncoder`'s query, key, value and output projections."""
    attention = self_attention(transformer_layer)
    return (attention._query_dense, attention._key_dense, attention._value_dense,
            attention._output_dense)


def feedforward_layers(transformer_layer) -> tuple:
    """A built keras-hub `TransformerEncoder`'s intermediate and output `Dense` layers."""
    return (transformer_layer._feedforward_intermediate_dense,
            transformer_layer._feedforward_output_dense)
