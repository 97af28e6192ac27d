"""XLA's compiled kernels kept on disk, under `$ELECTRA_TF_HOME/xla/` (`zoo.cache.home`).

Every process compiled its XLA kernels anew (the fused training kernels, one per shape and
direction, and the whole step under `--jit_compile`): ELECTRA-Small's first pretraining
step took 20.6 s compiling them, 16.1 s loading them from here; a `tiny` `--jit_compile`
fit 14.0 s against 4.9-6.0 s (2 AVX2 EPYC cores; docs/results.md, thirty-ninth pass).
TensorFlow keeps compiled kernels in the directory `TF_XLA_FLAGS` names
(`--tf_xla_persistent_cache_directory`): it writes each under a temporary name and renames
it, and loads a kernel only for the same computation, compared whole. Written here, because
TensorFlow leaves them to its user:

- the directory's key (`directory_key`): a kernel is machine code for the CPU that compiled
  it, built by one TensorFlow and its XLA flags; each combination has a directory of its
  own, so a home shared by different machines never runs another CPU's code. Only where
  the CPU can be named (Linux: `/proc/cpuinfo`).
- quiet loads: TensorFlow reads a kernel as a text proto first and logs an error for each
  binary one it reads; at exit, the process rewrites the directory's binary kernels as text
  (`as_text_entry`: checked to parse back to the same proto; written atomically).
- a bound: at exit, the oldest files go while `xla/` holds more than `MAX_BYTES`, and
  temporary files a killed process left behind go after an hour.
- no false alarms: on AVX-512 CPUs XLA compiles every kernel with two tuning features
  (`+prefer-no-scatter`, `+prefer-no-gather`) that its loader then misses among the CPU's
  own, and logs for every kernel it loads, in two lines of ~2,500 characters each, that
  the "machine type used for XLA:CPU compilation doesn't match the machine type for
  execution" and "could lead to execution errors such as SIGILL" (XLA's
  `cpu_aot_loader.cc`; the kernel loads and runs, and the key above means the same CPU).
  On those CPUs the directory is used only where TensorFlow's errors are not shown
  (`TF_CPP_MIN_LOG_LEVEL=3`, which the commands set unless `--verbose`): elsewhere, as in
  a notebook, a later ELECTRA-Small pretraining run would log 52 such errors.

Set `--tf_xla_persistent_cache_directory=` (empty) in `TF_XLA_FLAGS` to turn it off; a
directory given there is TensorFlow's alone (none of the above).
"""

import atexit
import contextlib
import functools
import hashlib
import importlib.util
import os
import re
import sys
import time
from typing import Optional

from electra_tf import files
from electra_tf.zoo import cache

FLAG = "tf_xla_persistent_cache_directory"
CPU_ONLY = "--tf_xla_persistent_cache_device_types=CPU"  # the key names no accelerator
MAX_BYTES = 1 << 30
MIN_FREE_BYTES = 1 << 28  # left on the disk to turn it on (a whole step's kernel: ~10 MB)
STALE_SECONDS = 3600
TEXT_START = b"key {"  # how a kernel file written as text begins (its first field)
_STATE = {}  # this process's kernel directory, once set
_CPU_FIELDS = ("vendor_id", "cpu family", "model", "model name", "flags",  # x86
               "CPU implementer", "CPU architecture", "CPU variant", "CPU part", "Features")


def cpu_description(cpuinfo_lines) -> Optional[str]:
    """The first processor's identity and instruction sets from `/proc/cpuinfo`'s lines,
    read up to the blank line that ends its block (the file has one per core); None if it
    names no instruction sets."""
    fields = {}
    for line in cpuinfo_lines:
        if not line.strip():
            break
        name, _, value = line.partition(":")
        if name.strip() in _CPU_FIELDS:
            fields[name.strip()] = " ".join(value.split())
    if not {"flags", "Features"} & set(fields):
        return None
    return "\n".join(f"{name}: {value}" for name, value in sorted(fields.items()))


def directory_key(tensorflow: str, cpu: str, xla_flags: str) -> str:
    """The name of the directory of kernels built by this TensorFlow installation, for this
    CPU, with these XLA flags (`XLA_FLAGS` and the rest of `TF_XLA_FLAGS`)."""
    return hashlib.sha256("\n".join((tensorflow, cpu, xla_flags)).encode()).hexdigest()[:16]


def use_on_disk_cache() -> None:
    """Has this process's XLA compilations (and its children's) read and write the kernel
    directory of its TensorFlow, CPU and flags. Takes effect if called before TensorFlow
    reads its XLA flags (at its first computation); again after `TF_CPP_MIN_LOG_LEVEL`
    changed, too. Does nothing where the user set the flag, the CPU or TensorFlow's
    library cannot be named, TensorFlow would log a false alarm for every kernel it loads
    (`loads_with_false_alarms`), or the directory is not writable or its disk nearly full
    (TensorFlow fails a computation it cannot save)."""
    # A child of a process that set it has its parent's: it keys its own, by its flags.
    tf_xla_flags = re.sub(rf" ?--{FLAG}=\S*/xla/[0-9a-f]{{16}} {CPU_ONLY}", "",
                          os.environ.get("TF_XLA_FLAGS", ""))
    if FLAG in tf_xla_flags or _STATE:
        return
    try:
        package = importlib.util.find_spec("tensorflow").submodule_search_locations[0]
        library = os.path.join(package, "libtensorflow_framework.so.2")
        status = os.stat(library)
        cpu = _this_cpu()
        if cpu is None:
            return
        if loads_with_false_alarms(cpu, os.environ.get("TF_CPP_MIN_LOG_LEVEL", "")):
            if "TF_XLA_FLAGS" in os.environ:  # nor a parent process's directory
                os.environ["TF_XLA_FLAGS"] = tf_xla_flags
            return
        root = os.path.join(cache.home(), "xla")
        directory = os.path.join(root, directory_key(
            f"{library} {status.st_size} {status.st_mtime_ns}", cpu,
            f"{os.environ.get('XLA_FLAGS', '')}\n{tf_xla_flags}"))
        os.makedirs(directory, exist_ok=True)
        disk = os.statvfs(directory)
        if not os.access(directory, os.W_OK) or disk.f_bavail * disk.f_frsize < MIN_FREE_BYTES:
            return
    except (OSError, AttributeError, TypeError):  # no such file, package or directory
        return
    os.environ["TF_XLA_FLAGS"] = f"{tf_xla_flags} --{FLAG}={directory} {CPU_ONLY}".strip()
    _STATE["directory"] = directory
    atexit.register(_tidy)


def loads_with_false_alarms(cpu: str, min_log_level: str) -> bool:
    """Whether TensorFlow would log an error for every kernel it loads from disk: on a CPU
    with AVX-512 (`cpu`: `cpu_description`'s), unless `min_log_level`
    (`TF_CPP_MIN_LOG_LEVEL`'s value) hides errors."""
    avx512 = re.search(r"^flags: .*\bavx512", cpu, re.MULTILINE) is not None
    return avx512 and not (min_log_level.strip().isdigit() and int(min_log_level) >= 3)


def _this_cpu() -> Optional[str]:
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        return cpu_description(f)


def _tidy() -> None:
    if "tensorflow" not in sys.modules:  # no kernel compiled: nothing to tidy
        return
    try:
        _rewrite_as_text(_STATE["directory"])
        _bound(os.path.dirname(_STATE["directory"]))
    except OSError:
        pass  # another process tidying at once, or a full disk: the next exit tidies


def _rewrite_as_text(directory: str) -> None:
    for entry in os.scandir(directory):
        if entry.name.endswith(".pb"):
            with open(entry.path, "rb") as f:
                if f.read(len(TEXT_START)) == TEXT_START:
                    continue
                f.seek(0)
                text = as_text_entry(f.read())
            if text is not None:
                files.write_text(entry.path, text)


def as_text_entry(data: bytes) -> Optional[str]:
    """A binary kernel file's entry (`tensorflow.XlaSerializedCacheEntry`) as a text proto;
    None if it is not a whole entry or its text does not parse back to the same proto."""
    from google.protobuf import message, text_format

    entry_class = _entry_class()
    entry = entry_class()
    try:
        entry.ParseFromString(data)
        text = text_format.MessageToString(entry)
        parsed = text_format.Parse(text, entry_class())
    except (message.DecodeError, text_format.ParseError):
        return None
    same = (parsed.SerializeToString(deterministic=True)
            == entry.SerializeToString(deterministic=True))
    return text if same and entry.executable and entry.HasField("hlo_module") else None


@functools.lru_cache(maxsize=None)
def _entry_class():
    """`tensorflow.XlaSerializedCacheEntry` (tensorflow/compiler/jit/
    xla_compilation_cache.proto), whose Python module TensorFlow does not ship; its field
    names are what a text proto spells."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from tensorflow.compiler.xla.service import hlo_pb2

    fields = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="electra_tf/xla_cache_entry.proto", package="electra_tf.xla_cache",
        syntax="proto3", dependency=[hlo_pb2.DESCRIPTOR.name])
    key = proto.message_type.add(name="Key")
    for number, (name, kind) in enumerate((
            ("signature_fingerprint", fields.TYPE_UINT64),
            ("cluster_fingerprint", fields.TYPE_UINT64), ("device_type", fields.TYPE_STRING),
            ("prefix", fields.TYPE_STRING), ("compiled_using_pjrt", fields.TYPE_BOOL)), 1):
        key.field.add(name=name, number=number, type=kind, label=fields.LABEL_OPTIONAL)
    entry = proto.message_type.add(name="Entry")
    entry.field.add(name="key", number=1, type=fields.TYPE_MESSAGE,
                    type_name=".electra_tf.xla_cache.Key", label=fields.LABEL_OPTIONAL)
    entry.field.add(name="hlo_module", number=2, type=fields.TYPE_MESSAGE,
                    type_name=".xla.HloModuleProto", label=fields.LABEL_OPTIONAL)
    entry.field.add(name="executable", number=3, type=fields.TYPE_BYTES,
                    label=fields.LABEL_OPTIONAL)
    pool = descriptor_pool.Default()
    pool.AddSerializedFile(proto.SerializeToString())
    return message_factory.GetMessageClass(
        pool.FindMessageTypeByName("electra_tf.xla_cache.Entry"))


def _bound(root: str) -> None:
    """Removes temporary files older than STALE_SECONDS under `root`, then its oldest files
    while it holds more than MAX_BYTES."""
    now = time.time()
    kept = []
    for directory in os.scandir(root):
        if not directory.is_dir(follow_symlinks=False):
            continue
        for entry in os.scandir(directory.path):
            status = entry.stat(follow_symlinks=False)
            if not entry.name.endswith(".pb") and now - status.st_mtime > STALE_SECONDS:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(entry.path)
            else:
                kept.append((status.st_mtime, status.st_size, entry.path))
    total = sum(size for _, size, _ in kept)
    for _, size, path in sorted(kept):
        if total <= MAX_BYTES:
            break
        with contextlib.suppress(FileNotFoundError):  # another process's tidying
            os.remove(path)
        total -= size
