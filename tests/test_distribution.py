"""Distributed pretraining: MirroredStrategy over 2 logical CPUs and MultiWorkerMirrored with
2 worker processes train exactly like one device with the same global batch.

Every run happens in its own process (tests/distributed_run.py): logical devices and the
multi-worker runtime must be set up before TensorFlow initialises. Runs compare final
weights AND Adam's moment slots: Adam's update hardly depends on the gradient's scale, its
first moment does, so a wrong division by the number of replicas shows there.
"""

import json
import os
import socket

import numpy as np
import pytest
import tensorflow as tf

import distributed_run
from conftest import ROOT, start_command

HELPER = str(ROOT / "tests" / "distributed_run.py")


@pytest.fixture(scope="module")
def one_file_shards(tmp_path_factory, vocab_path, small_corpus):
    """One shard file: with fewer files than workers, tf.data shards by element (DATA),
    and each worker gets its half of every global batch, as one device would see it."""
    from electra_tf.data import build_pretraining_data as builder

    out = tmp_path_factory.mktemp("one_shard")
    options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=64)
    corpus = ",".join(small_corpus.split(",")[:2])
    manifest = builder.build_pretraining_data(corpus, str(out), options, num_shards=1,
                                              show_progress=False)
    return manifest["file_pattern"]


def pretrain(data, vocab, runs, env=None):
    """Starts one process running `runs` [(strategy, model_dir, config overrides,
    evaluation batches after training)]."""
    specs = [{"strategy": strategy, "model_dir": str(model_dir), "overrides": overrides,
              "eval_batches": eval_batches}
             for strategy, model_dir, overrides, eval_batches in runs]
    return start_command("python", HELPER, data, vocab, json.dumps(specs), env=env)


def finished(*processes):
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    return outputs[0]


def free_ports(n):
    sockets = [socket.socket() for _ in range(n)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def results(model_dir):
    with open(os.path.join(model_dir, "pretrain_results.json")) as f:
        return json.load(f)


def assert_evaluated(model_dir):
    """The run's evaluation under its strategy gave metrics aggregated over the replicas."""
    metrics = results(model_dir)["eval"]
    assert 0 < metrics["disc_auc"] < 1 and np.isfinite(metrics["loss"]), metrics


def checkpoint_values(model_dir):
    reader = tf.train.load_checkpoint(results(model_dir)["checkpoint"])
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def assert_same_training(run_dir, reference_dir):
    ran, reference = results(run_dir), results(reference_dir)
    assert ran["step"] == reference["step"] == 3
    # Step losses: two one-device runs of the same command already differ by up to 3e-4
    # (relative) at step 0 on an AVX2 (AMD EPYC) machine, from threaded float reductions;
    # a strategy's loss is also the mean of per-replica means. The weight and Adam-slot
    # checks below are the sharp ones (a replica-scaling error moves the slots by ~1).
    print("losses", ran["train_history"]["loss"], reference["train_history"]["loss"])
    np.testing.assert_allclose(ran["train_history"]["loss"],
                               reference["train_history"]["loss"], rtol=1e-3)
    values, expected = checkpoint_values(run_dir), checkpoint_values(reference_dir)
    assert values.keys() == expected.keys()
    # Whole-group differences relative to the group's norm. Per tensor they would be
    # noise: weights whose gradient is ~0 in exact arithmetic (attention key biases) take
    # +-lr Adam steps on the sign of rounding noise. Measured: ~4e-3 for the slots and
    # ~3e-4 for the weights; a factor-2 loss-scaling error gives ~1 in the slots.
    for group, tolerance in (("optimizer/_variables/", 2e-2),
                             ("optimizer/_trainable_variables/", 2e-3)):
        names = [name for name in values if name.startswith(group)]
        assert len(names) > 40
        difference = np.sqrt(sum(np.sum((values[n] - expected[n]).astype(np.float64) ** 2)
                                 for n in names))
        norm = np.sqrt(sum(np.sum(expected[n].astype(np.float64) ** 2) for n in names))
        print(f"{group}: relative difference {difference / norm:.2e}")
        assert difference / norm < tolerance, group


@pytest.fixture(scope="module")
def one_device_and_mirrored(tmp_path_factory, one_file_shards, vocab_path):
    """{(strategy, clip_norm): run directory}: one device and MirroredStrategy over 2
    logical CPUs, with clipping at 1.0 (active from the first step: it must follow the
    cross-replica sum) and without (Adam's slots would hide a loss-scaling error behind
    clipping). One process runs all four; only the mirrored run with clipping evaluates
    (an evaluation under a strategy costs more than the 3 steps)."""
    root = tmp_path_factory.mktemp("strategies")
    runs = {(strategy, clip): root / f"{strategy}_{clip}"
            for clip in (1.0, 0.0) for strategy in ("cpu", "mirrored")}
    finished(pretrain(one_file_shards, vocab_path,
                      [(strategy, path, {"clip_norm": clip},
                        int(strategy == "mirrored" and clip == 1.0))
                       for (strategy, clip), path in runs.items()]))
    return runs


@pytest.mark.parametrize("clip_norm", [1.0, 0.0])
def test_mirrored_matches_one_device(one_device_and_mirrored, clip_norm):
    mirrored = one_device_and_mirrored["mirrored", clip_norm]
    assert results(mirrored)["replicas"] == 2
    assert_same_training(mirrored, one_device_and_mirrored["cpu", clip_norm])
    if clip_norm:
        assert_evaluated(mirrored)


def test_multi_worker_matches_one_device_and_resumes_on_one_device(
        tmp_path, one_file_shards, vocab_path, one_device_and_mirrored, capsys):
    from electra_tf.config import ElectraConfig
    from electra_tf.runs import pretrain as run

    ports = free_ports(2)
    workers = [f"localhost:{port}" for port in ports]
    processes = [
        pretrain(one_file_shards, vocab_path, [("multi_worker", tmp_path / "workers", {}, 1)],
                 env={"TF_CONFIG": json.dumps({"cluster": {"worker": workers},
                                               "task": {"type": "worker", "index": index}})})
        for index in range(2)]
    finished(*processes)
    assert results(tmp_path / "workers")["replicas"] == 2
    assert_same_training(tmp_path / "workers", one_device_and_mirrored["cpu", 1.0])
    assert_evaluated(tmp_path / "workers")
    # Only the chief's checkpoints remain; the other worker's scratch copy is gone.
    assert sorted(os.listdir(tmp_path / "workers" / "checkpoints")) == sorted(
        ["checkpoint"] + [f"ckpt-{s}.{e}" for s in (1, 2, 3)
                          for e in ("index", "data-00000-of-00001")])

    # The multi-worker checkpoint resumes under another strategy (here: this process's).
    model_dir = str(tmp_path / "workers")
    config, pattern = run.prepare_run(
        ElectraConfig.preset("tiny", **{**distributed_run.RUN, "train_steps": 5}),
        run.RunInputs(model_dir=model_dir, data=one_file_shards, vocab=vocab_path))
    run.train(config, model_dir, pattern, eval_batches=0, verbose=0)
    assert "at step 3" in capsys.readouterr().out
    assert results(tmp_path / "workers")["step"] == 5
