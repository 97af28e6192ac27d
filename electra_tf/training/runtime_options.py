"""`RuntimeOptions`: how a run executes (`tf.distribute` strategy, mixed precision, XLA,
training kernels), and the choices of each.

Kept free of TensorFlow, like the library modules the commands define their flags from:
`--help` and flag errors answer without loading it (`electra_tf_cli.common.start`).
`training.runtime` applies the options.
"""

import dataclasses
from typing import Optional

from electra_tf.errors import check_choice

STRATEGIES = ("auto", "cpu", "gpu", "mirrored", "multi_worker", "tpu")
PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


@dataclasses.dataclass
class RuntimeOptions:
    """How a run executes (flags shared by pretrain.py and finetune.py)."""

    # auto: TPU if --tpu is given or one is attached, else all local GPUs (mirrored when
    # there are several), else the CPU. multi_worker reads the cluster from TF_CONFIG.
    strategy: str = "auto"
    tpu: Optional[str] = None  # TPU name or grpc:// address for TPUClusterResolver
    # bf16: TPUs and CPUs with AMX/AVX-512-BF16; fp16: GPUs (with dynamic loss scaling).
    mixed_precision: str = "none"
    jit_compile: bool = False  # XLA; measure first: on CPUs it is often slower
    # The three training kernels below: None leaves each to the run (`for_run`).
    # The encoders' GELU as two small XLA kernels (`layers.activations.fused_gelu`): same
    # values, ~5% faster ELECTRA-Small steps on 2 CPU cores (README), ~20% faster
    # bfloat16 fine-tuning on short inputs on CPUs. Weights are unaffected.
    fused_gelu: Optional[bool] = None
    # Every dropout as small XLA kernels (`layers.fused_dropout`: the mask, then the kept
    # values scaled, each way): the same distribution, other random draws; exports are
    # unaffected.
    fused_dropout: Optional[bool] = None
    # Every layer norm as one small XLA kernel each way (`layers.fused_layer_normalization`):
    # the same function, computed in float32 (also for bfloat16 inputs, without Keras's
    # casts); exports are unaffected.
    fused_layer_norm: Optional[bool] = None
    # Keras's dropouts (where the fused ones do not run) deciding by 16 random bits a value
    # (`layers.sixteen_bit_dropout`): half the random numbers drawn, each value dropped with
    # probability round(rate x 2^16) / 2^16 (0.1000061 for 0.1). None: on for models that
    # compute in bfloat16 on a CPU, whose Keras dropout decides by a bfloat16 draw of 128 values
    # (0.1016 for 0.1), so 16 bits are nearer the rate and faster (~5%); off in float32,
    # where Keras's draws give the rate to 2^-23. Exports are unaffected.
    sixteen_bit_dropout: Optional[bool] = None

    def for_run(self, few_shapes: bool, cpu_bfloat16: bool = False) -> "RuntimeOptions":
        """These options, each training kernel left unset (None) turned on if the run's
        batches come in few shapes and off if not; the GELU's also on for models that
        compute in bfloat16 on a CPU (`cpu_bfloat16`, `training.runtime.cpu_bfloat16`), as
        are, unset, the 16-bit decisions of the dropouts that stay Keras's (above).
        Accelerators keep the float32 rules: these were measured on CPUs. XLA compiles a
        kernel for every shape it meets: one fine-tuning epoch on the demo sentiment texts,
        each batch ending after its longest example, compiled 597 for a `tiny` model and
        took ELECTRA-Small 179 s instead of 92 (docs/results.md, twentieth pass).
        Pretraining's batches have one shape; fine-tuning's on long inputs
        (`models.task.LONG_INPUT_LENGTH`) end at one of a few lengths
        (`models.task.bucketed_length`). The fused GELU and layer norms run over a batch's
        rows padded to one of a few sizes (`layers.row_buckets`). That pays for the GELU in
        bfloat16, where TensorFlow's own is a dozen slow bfloat16 passes: short-input
        fine-tuning steps 0.80x the time. Not for the layer norms (0.96x, but ~0.5 s of
        compiling a bucket: 1.12x over 100 steps), nor for the GELU in float32 (0.97-1.02x)
        (docs/results.md, seventieth pass)."""
        unset = {"fused_gelu": few_shapes or cpu_bfloat16, "fused_dropout": few_shapes,
                 "fused_layer_norm": few_shapes}
        run = dataclasses.replace(self, **{
            name: on if getattr(self, name) is None else getattr(self, name)
            for name, on in unset.items()})
        if run.sixteen_bit_dropout is None:
            run.sixteen_bit_dropout = cpu_bfloat16 and not run.fused_dropout
        return run

    @property
    def encoder_activation(self) -> str:
        from electra_tf.layers.activations import GELU  # that module loads TensorFlow

        return "electra_tf>fused_gelu" if self.fused_gelu else GELU

    def validated(self) -> "RuntimeOptions":
        check_choice("--strategy", self.strategy, STRATEGIES)
        check_choice("--mixed_precision", self.mixed_precision, PRECISIONS)
        return self
