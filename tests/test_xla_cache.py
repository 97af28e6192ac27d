"""XLA's kernels kept on disk (`electra_tf.xla_cache`): a later process loads what an earlier
one compiled, quietly; the directory is keyed by TensorFlow, CPU and flags, and bounded."""

import os
import time

from google.protobuf import text_format

from conftest import run_command
from electra_tf import xla_cache

# A fused GELU (one XLA kernel each way) and its gradient, printed exactly.
GELU_AND_GRADIENT = """
import tensorflow as tf
from electra_tf.layers.activations import fused_gelu
x = tf.reshape(tf.range(96, dtype=tf.float32), [8, 12]) / 25.0 - 2.0
with tf.GradientTape() as tape:
    tape.watch(x)
    y = fused_gelu(x)
print(y.numpy().tobytes().hex(), tape.gradient(y, x).numpy().tobytes().hex())
"""


def test_a_later_process_loads_the_kernels_an_earlier_one_compiled(tmp_path):
    home = tmp_path / "home"
    env = {"ELECTRA_TF_HOME": str(home), "TF_XLA_FLAGS": None, "TF_CPP_MIN_LOG_LEVEL": "0",
           "TF_CPP_VMODULE": "device_executable_persistor=1"}
    first = run_command("python", "-c", GELU_AND_GRADIENT, env=env, fresh=True)
    (directory,) = (home / "xla").iterdir()
    kernels = sorted(directory.iterdir())
    assert len(kernels) == 2 and all(path.suffix == ".pb" for path in kernels)
    # Rewritten as text protos at exit: TensorFlow reads them without logging an error.
    assert all(path.read_bytes().startswith(xla_cache.TEXT_START) for path in kernels)
    assert "Loading cached entry" not in first.stderr
    written = {path: path.stat().st_mtime_ns for path in kernels}

    second = run_command("python", "-c", GELU_AND_GRADIENT, env=env, fresh=True)
    assert second.stdout == first.stdout  # the same values, bit for bit
    assert second.stderr.count("Loading cached entry") == 2, second.stderr[-3000:]
    assert "Error parsing text-format" not in second.stderr
    assert {path: path.stat().st_mtime_ns for path in directory.iterdir()} == written


def test_an_entry_becomes_text_only_whole_and_unchanged(tmp_path):
    run_command("python", "-c", GELU_AND_GRADIENT, fresh=True,
                env={"ELECTRA_TF_HOME": str(tmp_path), "TF_XLA_FLAGS": None})
    text = next((tmp_path / "xla").glob("*/*.pb")).read_text()
    binary = text_format.Parse(text, xla_cache._entry_class()()).SerializeToString()
    assert xla_cache.as_text_entry(binary) == text
    assert xla_cache.as_text_entry(binary[:len(binary) // 2]) is None  # cut short
    assert xla_cache.as_text_entry(binary[:-1]) is None


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
