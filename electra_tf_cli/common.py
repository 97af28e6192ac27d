"""What the command-line apps share: quiet TensorFlow start-up, one-line user errors, and
flags generated from the library's dataclasses."""

import contextlib
import dataclasses
import errno
import gc
import os
import re
import sys
import typing

VERBOSE_FLAGS = ("--verbose", "--verbose=true", "--verbose=1")


def import_tensorflow(verbose: typing.Optional[bool] = None) -> None:
    """Imports TensorFlow for a command. Its C++ INFO/WARNING/ERROR lines (oneDNN notices,
    GPU probing on machines without one) are silenced unless `verbose` (None: `--verbose`
    in `sys.argv`) or the user set TF_CPP_MIN_LOG_LEVEL. Call it before anything imports
    TensorFlow."""
    from electra_tf import xla_cache  # importing electra_tf: TensorFlow's CPU memory settings

    if verbose is None:
        verbose = any(a in VERBOSE_FLAGS for a in sys.argv)
    quiet = "TF_CPP_MIN_LOG_LEVEL" not in os.environ and not verbose
    if quiet:
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        # With TensorFlow's errors hidden, XLA's kernels are kept on disk on every CPU
        # (`electra_tf.xla_cache`, which `import electra_tf` left off on AVX-512 CPUs).
        xla_cache.use_on_disk_cache()
    # Python's garbage collector scans every object at its full collections, and the import
    # makes over 300,000 that are never garbage: collections off while it runs, then those
    # objects left out of later scans. Imports 0.8-1.3 s of CPU faster (of 4.7-5.7 s), a
    # 3-step `tiny` electra-pretrain 19.8-20.8 -> 15.2-18.0 s (2-core AVX2 EPYC;
    # docs/results.md).
    gc.disable()
    try:
        with _standard_error_closed() if quiet else contextlib.nullcontext():
            import tensorflow  # noqa: F401
    finally:
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def _standard_error_closed():
    """Within, nothing reaches standard error: TensorFlow's shared libraries log a few lines
    while they load, before its logging reads TF_CPP_MIN_LOG_LEVEL."""
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def start(app) -> None:
    """Runs app module `app` as a command (see `define`, `wrap`).

    TensorFlow loads only once the flags are parsed (`wrap`), so `--help` and flag errors
    answer at once instead of after its 4-8 s import: app modules define their flags from
    TensorFlow-free library modules (`config`, `training.runtime_options`,
    `finetuning.config`, ...) and import the rest inside their `run`."""
    from absl import app as absl_app

    define(app)
    absl_app.run(wrap(app.run))


def define(app) -> None:
    """Defines the flags of app module `app` (its `define_flags`, `--verbose`; its
    `REQUIRED` flags must be given) and makes --help show its docstring and flags."""
    from absl import flags

    app.define_flags()
    flags.DEFINE_bool("verbose", False, "Show TensorFlow's C++ log lines and INFO logs.")
    flags.mark_flags_as_required(app.REQUIRED)
    # absl's --help shows the __main__ module's docstring and the flags defined in it: a
    # console script's or a thin entry point's has neither, the app module has both.
    sys.modules["__main__"].__doc__ = app.__doc__
    for module, module_flags in flags.FLAGS.flags_by_module_dict().items():
        if module.startswith(__package__):
            for flag in module_flags:
                flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)


def wrap(run):
    """An absl main calling `run(argv)` once TensorFlow is loaded (`import_tensorflow`): a
    user error prints `error: <message>` and exits with status 2."""
    from absl import flags, logging

    from electra_tf.errors import UserError

    def wrapped(argv):
        # TensorFlow logs every checkpoint write at INFO through absl; users need warnings.
        verbose = "verbose" in flags.FLAGS and flags.FLAGS.verbose  # scripts may lack it
        logging.set_verbosity(logging.INFO if verbose else logging.WARNING)
        import_tensorflow(verbose)
        try:
            return run(argv)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)
        except Exception as e:
            problem = storage_problem(e)
            if problem is None:
                raise
            print(f"error: {problem}; free some space (or choose a writable place) and run "
                  "again: files completed before it are kept (runs resume from their last "
                  "checkpoint).", file=sys.stderr)
            sys.exit(2)

    return wrapped


_STORAGE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM,
                   errno.ENOTDIR)
# How TensorFlow's file system reports the same (its errors carry no errno).
_STORAGE_MESSAGES = ("No space left on device", "Disk quota exceeded", "Read-only file system",
                     "Permission denied")


def storage_problem(error: Exception):
    """A one-line description of `error` when the disk is full, read-only or not ours to
    write (a user's problem, not a bug), else None."""
    if isinstance(error, OSError) and error.errno in _STORAGE_ERRNOS:
        return f"cannot write {error.filename or 'a file'}: {error.strerror}"
    tf = sys.modules.get("tensorflow")
    if tf is not None and isinstance(error, tf.errors.OpError):
        message = error.message.splitlines()[0] if error.message else ""
        if any(m in message for m in _STORAGE_MESSAGES):
            # TensorFlow wraps the file's name and reason in its op's names.
            message = re.sub(r"\{\{[^}]*\}\}\s*|\s*\[Op:\w+\]", "", message)
            return f"cannot write: {message[:300]}"
    return None


UNDOCUMENTED = "(undocumented)"


def undocumented(field) -> str:
    """The help of a flag nobody wrote one for: a test refuses it in every command."""
    return UNDOCUMENTED


def define_dataclass_flags(cls, help_texts: dict, default_help, skip=()) -> None:
    """One absl flag per field of dataclass `cls`, defaulting to None ("not given").

    `help_texts` maps field names to help; other fields get `default_help(field)`.
    """
    from absl import flags

    define = {bool: flags.DEFINE_bool, int: flags.DEFINE_integer,
              float: flags.DEFINE_float, str: flags.DEFINE_string}
    for field in dataclasses.fields(cls):
        if field.name not in skip:
            kind = (typing.get_args(field.type) or (field.type,))[0]  # Optional[int] -> int
            define[kind](field.name, None, help_texts.get(field.name, default_help(field)))


def dataclass_overrides(cls, skip=()) -> dict:
    """{field name: flag value} for the fields of `cls` given on the command line."""
    from absl import flags

    return {f.name: getattr(flags.FLAGS, f.name) for f in dataclasses.fields(cls)
            if f.name not in skip and getattr(flags.FLAGS, f.name) is not None}


def define_runtime_flags() -> None:
    """--strategy, --tpu, --mixed_precision, --jit_compile, --fused_gelu,
    --fused_dropout, --fused_layer_norm, --sixteen_bit_dropout (see `RuntimeOptions`)."""
    from absl import flags

    from electra_tf.training.runtime_options import PRECISIONS, STRATEGIES

    flags.DEFINE_enum("strategy", "auto", STRATEGIES,
                      "tf.distribute strategy. auto: TPU (with --tpu or TPU_NAME) > several "
                      "GPUs (mirrored) > one GPU > CPU; multi_worker reads TF_CONFIG.")
    flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (TPUClusterResolver).")
    flags.DEFINE_enum("mixed_precision", "none", list(PRECISIONS),
                      "bf16 for TPUs and CPUs with AMX/AVX512-BF16; fp16 (loss-scaled) for "
                      "GPUs. Variables and losses stay float32.")
    flags.DEFINE_bool("jit_compile", False, "Compile the train step with XLA (measure "
                      "first: on CPUs it can be much slower).")
    kernels = ("Default: on for pretraining and for fine-tuning with --max_seq_length of 256 "
               "or more (each batch's length then rounded up to a multiple of 8, of 32 "
               "beyond 128), off for shorter fine-tuning (its batches change shape, and XLA "
               "compiles the kernels again for every new one) and for fine-tuning under "
               "--jit_compile (XLA compiles the whole step).")
    flags.DEFINE_bool("fused_gelu", None, "Run the encoders' exact GELU as two small XLA "
                      "kernels (forward, backward), over each batch padded to one of a few "
                      "sizes where its shape changes: same values, faster on CPUs. "
                      "--nofused_gelu for TensorFlow's separate ops. " + kernels
                      + " Also on for shorter fine-tuning under --mixed_precision bf16 on "
                      "CPUs (TensorFlow's bf16 GELU is slow there: ~20% shorter steps).")
    flags.DEFINE_bool("fused_dropout", None, "Run every dropout as small XLA kernels (the "
                      "mask from XLA's vectorised random generator, drawn ahead of its input; "
                      "the kept values scaled): the same distribution, faster on CPUs. "
                      "--nofused_dropout for Keras's dropout. " + kernels)
    flags.DEFINE_bool("fused_layer_norm", None, "Run every layer norm as one small XLA "
                      "kernel each way, in float32: same values, faster on CPUs. "
                      "--nofused_layer_norm for TensorFlow's separate ops. " + kernels)
    flags.DEFINE_bool("sixteen_bit_dropout", None, "Where Keras's dropout runs (fine-tuning "
                      "shorter than 256 positions, or --nofused_dropout), decide each value "
                      "by 16 random bits instead of a float: half the random numbers drawn "
                      "(~2% shorter float32 steps, ~5% bf16, on a 2-core Sapphire Rapids), "
                      "each value dropped with probability round(rate x 65536) / 65536 "
                      "(0.1000061 for 0.1). Default: on under --mixed_precision bf16 on CPUs, "
                      "where Keras's draws drop 0.1016 for 0.1 (128 values); off in float32, "
                      "where they give the rate itself.")


def runtime_options():
    from absl import flags

    from electra_tf.training.runtime_options import RuntimeOptions

    return RuntimeOptions(
        strategy=flags.FLAGS.strategy, tpu=flags.FLAGS.tpu,
        mixed_precision=flags.FLAGS.mixed_precision,
        jit_compile=flags.FLAGS.jit_compile,
        fused_gelu=flags.FLAGS.fused_gelu,
        fused_dropout=flags.FLAGS.fused_dropout,
        fused_layer_norm=flags.FLAGS.fused_layer_norm,
        sixteen_bit_dropout=flags.FLAGS.sixteen_bit_dropout).validated()
