"""XLA's kernels kept on disk (`electra_tf.xla_cache`): a later process loads what an earlier
one compiled, quietly (on AVX-512 CPUs only where TensorFlow's errors are hidden); the
directory is keyed by TensorFlow, CPU and flags, and bounded."""

import os
import time

import pytest
from google.protobuf import text_format

from conftest import run_command
from electra_tf import xla_cache

# A fused GELU (one XLA kernel each way) and its gradient, printed exactly, then the XLA
# flags the process ran with.
GELU_AND_GRADIENT = """
import os
import tensorflow as tf
from electra_tf.layers.activations import fused_gelu
x = tf.reshape(tf.range(96, dtype=tf.float32), [8, 12]) / 25.0 - 2.0
with tf.GradientTape() as tape:
    tape.watch(x)
    y = fused_gelu(x)
print(y.numpy().tobytes().hex(), tape.gradient(y, x).numpy().tobytes().hex())
print(os.environ.get("TF_XLA_FLAGS"))
"""
# As a command starts: TensorFlow's errors hidden unless --verbose.
AS_A_COMMAND = "from electra_tf_cli import common\ncommon.import_tensorflow(verbose=False)\n"
LOADS = {"TF_CPP_VMODULE": "device_executable_persistor=1"}  # logs each kernel it loads
FALSE_ALARM = "could lead to execution errors such as SIGILL"  # XLA's, on AVX-512 CPUs


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    """(home, its kernel directory, the output) of a command-like process that compiled
    the fused GELU's two kernels into a fresh home."""
    home = tmp_path_factory.mktemp("home")
    first = run_command("python", "-c", AS_A_COMMAND + GELU_AND_GRADIENT, fresh=True,
                        env={"ELECTRA_TF_HOME": str(home), "TF_XLA_FLAGS": None,
                             "TF_CPP_MIN_LOG_LEVEL": None})
    (directory,) = (home / "xla").iterdir()
    return home, directory, first.stdout


def test_a_later_command_loads_the_kernels_an_earlier_one_compiled(compiled):
    home, directory, first = compiled
    kernels = sorted(directory.iterdir())
    assert len(kernels) == 2 and all(path.suffix == ".pb" for path in kernels)
    # Rewritten as text protos at exit: TensorFlow reads them without logging an error.
    assert all(path.read_bytes().startswith(xla_cache.TEXT_START) for path in kernels)
    assert f"--{xla_cache.FLAG}={directory} " in first  # on every CPU
    written = {path: path.stat().st_mtime_ns for path in kernels}

    second = run_command("python", "-c", AS_A_COMMAND + GELU_AND_GRADIENT, fresh=True,
                         env={"ELECTRA_TF_HOME": str(home), "TF_XLA_FLAGS": None,
                              "TF_CPP_MIN_LOG_LEVEL": None})
    # The same values, bit for bit, from the same directory, which TensorFlow left as it
    # was: it writes a kernel it compiled, even over one it could not read.
    assert second.stdout == first
    assert {path: path.stat().st_mtime_ns for path in directory.iterdir()} == written


def test_where_errors_show_no_kernel_loads_with_a_false_alarm(compiled):
    """A Python session shows TensorFlow's errors: it loads the kernels quietly, or, on an
    AVX-512 CPU, where XLA would log two errors for each, keeps none on disk."""
    home, directory, first = compiled
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        avx512 = "avx512" in next(line for line in f if line.startswith("flags"))
    session = run_command("python", "-c", GELU_AND_GRADIENT, fresh=True,
                          env={"ELECTRA_TF_HOME": str(home), "TF_XLA_FLAGS": None,
                               "TF_CPP_MIN_LOG_LEVEL": "0", **LOADS})
    assert session.stdout.split("\n")[0] == first.split("\n")[0]
    assert FALSE_ALARM not in session.stderr and "Error parsing text-format" not in session.stderr
    assert session.stderr.count("Loading cached entry") == (0 if avx512 else 2), (
        session.stderr[-3000:])
    assert (xla_cache.FLAG in session.stdout) is not avx512


def test_an_entry_becomes_text_only_whole_and_unchanged(compiled):
    text = next(compiled[1].glob("*.pb")).read_text()
    binary = text_format.Parse(text, xla_cache._entry_class()()).SerializeToString()
    assert xla_cache.as_text_entry(binary) == text
    assert xla_cache.as_text_entry(binary[:len(binary) // 2]) is None  # cut short
    assert xla_cache.as_text_entry(binary[:-1]) is None


def test_on_avx512_cpus_kernels_stay_in_memory_unless_errors_are_hidden(tmp_path,
                                                                        monkeypatch):
    avx2 = "flags: fpu avx2 fma\nmodel name: AMD EPYC"
    avx512 = "flags: fpu avx2 avx512f avx512_bf16 fma\nmodel name: AMD EPYC"
    assert not xla_cache.loads_with_false_alarms(avx2, "")
    assert xla_cache.loads_with_false_alarms(avx512, "") and xla_cache.loads_with_false_alarms(
        avx512, "2")
    assert not xla_cache.loads_with_false_alarms(avx512, "3")

    monkeypatch.setattr(xla_cache, "_STATE", {})
    monkeypatch.setattr(xla_cache, "_tidy", lambda: None)  # not at this test process's exit
    monkeypatch.setattr(xla_cache, "_this_cpu", lambda: avx512)
    monkeypatch.setenv("ELECTRA_TF_HOME", str(tmp_path))
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    # A child of a process that kept them, but which shows TensorFlow's errors.
    parent = f"--{xla_cache.FLAG}={tmp_path}/xla/0123456789abcdef {xla_cache.CPU_ONLY}"
    monkeypatch.setenv("TF_XLA_FLAGS", f"--tf_xla_auto_jit=0 {parent}")
    xla_cache.use_on_disk_cache()
    assert os.environ["TF_XLA_FLAGS"] == "--tf_xla_auto_jit=0" and not xla_cache._STATE
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")  # as a command sets it
    xla_cache.use_on_disk_cache()
    assert os.environ["TF_XLA_FLAGS"].startswith(
        f"--tf_xla_auto_jit=0 --{xla_cache.FLAG}={tmp_path / 'xla'}/")


def test_the_directory_is_keyed_by_tensorflow_cpu_and_flags():
    zen3 = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
            "model name\t: AMD EPYC\ncpu MHz\t\t: 2445.406\nflags\t\t: fpu avx2 fma\n\n"
            "processor\t: 1\nvendor_id\t: AuthenticAMD\nflags\t\t: fpu\n")
    cpu = xla_cache.cpu_description(zen3.splitlines())
    assert "AMD EPYC" in cpu and "avx2 fma" in cpu and "2445" not in cpu  # not the clock
    assert cpu != xla_cache.cpu_description(
        zen3.replace("avx2 fma", "avx2 fma avx512f").splitlines())
    arm = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd40\n"
    assert "sve" in xla_cache.cpu_description(arm.splitlines())
    assert xla_cache.cpu_description(["processor\t: 0", "model name\t: unknown"]) is None

    tensorflow = "/venv/tensorflow/libtensorflow_framework.so.2 38213808 1795980000000000000"
    key = xla_cache.directory_key(tensorflow, cpu, "")
    assert key == xla_cache.directory_key(tensorflow, cpu, "")
    for other in ((tensorflow.replace("38213808", "38213816"), cpu, ""), (tensorflow, arm, ""),
                  (tensorflow, cpu, "--xla_cpu_max_isa=AVX2\n")):
        assert xla_cache.directory_key(*other) != key, other


def test_a_directory_the_user_names_or_turns_off_is_theirs(tmp_path, monkeypatch):
    monkeypatch.setattr(xla_cache, "_STATE", {})
    monkeypatch.setenv("ELECTRA_TF_HOME", str(tmp_path))
    for flags in ("--tf_xla_persistent_cache_directory=", "--tf_xla_persistent_cache_"
                  f"directory={tmp_path / 'mine'} --tf_xla_auto_jit=0"):
        monkeypatch.setenv("TF_XLA_FLAGS", flags)
        xla_cache.use_on_disk_cache()
        assert os.environ["TF_XLA_FLAGS"] == flags and not os.listdir(tmp_path)


def test_a_nearly_full_disk_keeps_none(tmp_path, monkeypatch):
    """TensorFlow fails a computation whose kernel it cannot save."""
    monkeypatch.setattr(xla_cache, "_STATE", {})
    monkeypatch.setenv("ELECTRA_TF_HOME", str(tmp_path))
    monkeypatch.delenv("TF_XLA_FLAGS")
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "3")  # as a command sets it, for AVX-512 CPUs
    monkeypatch.setattr(xla_cache, "MIN_FREE_BYTES", 1 << 62)
    xla_cache.use_on_disk_cache()
    assert "TF_XLA_FLAGS" not in os.environ and not xla_cache._STATE
    monkeypatch.setattr(xla_cache, "MIN_FREE_BYTES", 1)
    monkeypatch.setattr(xla_cache, "_tidy", lambda: None)  # not at this test process's exit
    xla_cache.use_on_disk_cache()
    assert os.environ["TF_XLA_FLAGS"].startswith(
        f"--tf_xla_persistent_cache_directory={tmp_path / 'xla'}/")


def test_the_directory_is_bounded_and_left_temporaries_go(tmp_path, monkeypatch):
    now = time.time()
    files = {"old.pb": now - 50, "new.pb": now - 10, "left.pb.tmp": now - 7200,
             "writing.pb.tmp": now - 5, "other-key/older.pb": now - 100}
    for name, mtime in files.items():
        path = tmp_path / ("key/" + name if "/" not in name else name)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"k" * 100)
        os.utime(path, (mtime, mtime))
    monkeypatch.setattr(xla_cache, "MAX_BYTES", 250)
    xla_cache._bound(str(tmp_path))
    left = sorted(str(path.relative_to(tmp_path)) for path in tmp_path.glob("*/*"))
    # 400 bytes kept after the stale temporary: the two oldest go, the newest and the
    # temporary being written stay.
    assert left == ["key/new.pb", "key/writing.pb.tmp"]
