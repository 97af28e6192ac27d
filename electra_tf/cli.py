"""Shared pieces of the absl command-line apps: one-line errors instead of tracebacks."""

import dataclasses
import sys
import typing

from absl import flags, logging

from electra_tf.errors import UserError


def run_main(main):
    """Wraps an absl `main(argv)`: a user error prints `error: <message>` and exits 2."""

    def wrapped(argv):
        # TensorFlow logs every checkpoint write at INFO through absl; users need warnings.
        logging.set_verbosity(logging.WARNING)
        try:
            return main(argv)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapped


def define_dataclass_flags(cls, help_texts: dict, default_help, skip=()) -> None:
    """One absl flag per field of dataclass `cls`, defaulting to None ("not given").

    `help_texts` maps field names to help; other fields get `default_help(field)`.
    """
    define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
              float: flags.DEFINE_float, str: flags.DEFINE_string}
    for field in dataclasses.fields(cls):
        if field.name not in skip:
            kind = (typing.get_args(field.type) or (field.type,))[0]  # Optional[int] -> int
            define[kind](field.name, None, help_texts.get(field.name, default_help(field)))


def define_runtime_flags() -> None:
    """--strategy, --tpu, --mixed_precision, --jit_compile, --fused_gelu (see
    `RuntimeOptions`)."""
    from electra_tf.training import runtime

    flags.DEFINE_enum("strategy", "auto", runtime.STRATEGIES,
                      "tf.distribute strategy. auto: TPU (with --tpu or TPU_NAME) > several "
                      "GPUs (mirrored) > one GPU > CPU; multi_worker reads TF_CONFIG.")
    flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (TPUClusterResolver).")
    flags.DEFINE_enum("mixed_precision", "none", list(runtime.PRECISIONS),
                      "bf16 for TPUs and CPUs with AMX/AVX512-BF16; fp16 (loss-scaled) for "
                      "GPUs. Variables and losses stay float32.")
    flags.DEFINE_bool("jit_compile", False, "Compile the train step with XLA (measure "
                      "first: on CPUs it can be much slower).")
    flags.DEFINE_bool("fused_gelu", True, "Run the encoders' exact GELU as two small XLA "
                      "kernels (forward, backward): same values, faster on CPUs. "
                      "--nofused_gelu for TensorFlow's separate ops.")


def runtime_options():
    from electra_tf.training import runtime

    return runtime.RuntimeOptions(
        strategy=flags.FLAGS.strategy, tpu=flags.FLAGS.tpu,
        mixed_precision=flags.FLAGS.mixed_precision,
        jit_compile=flags.FLAGS.jit_compile,
        fused_gelu=flags.FLAGS.fused_gelu).validated()


def dataclass_overrides(cls, skip=()) -> dict:
    """{field name: flag value} for the fields of `cls` given on the command line."""
    return {f.name: getattr(flags.FLAGS, f.name) for f in dataclasses.fields(cls)
            if f.name not in skip and getattr(flags.FLAGS, f.name) is not None}
