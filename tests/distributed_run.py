"""Runs tiny pretrainings under given strategies, one after another in this process
(tests/test_distribution.py).

  python tests/distributed_run.py DATA VOCAB RUNS_JSON

RUNS_JSON is a list of {"strategy", "model_dir", "overrides", "eval_batches"}. When one of
them is `mirrored`, the CPU is split into 2 logical devices first (it must happen before
TensorFlow initialises); `multi_worker` reads TF_CONFIG. Dropout is off so runs under
different strategies can agree to rounding; one layer per tower is enough to show how
gradients are summed, scaled and clipped across replicas.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

# The config of every run (over the tiny preset).
RUN = {"num_layers": 1, "dropout": 0.0, "batch_size": 8, "train_steps": 3,
       "checkpoint_every": 1, "keep_checkpoints": 10, "warmup_steps": 2}


def main(data, vocab, runs):
    runs = json.loads(runs)
    if any(r["strategy"] == "mirrored" for r in runs):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from electra_tf.config import ElectraConfig
    from electra_tf.runs import pretrain as run
    from electra_tf.training import runtime
    from electra_tf.training.runtime_options import RuntimeOptions

    for spec in runs:
        options = RuntimeOptions(strategy=spec["strategy"])
        strategy = runtime.create_strategy(options)
        config = ElectraConfig.preset("tiny", **{**RUN, **spec.get("overrides", {})})
        config, pattern = run.prepare_run(config, run.RunInputs(
            model_dir=spec["model_dir"], data=data, vocab=vocab))
        run.train(config, spec["model_dir"], pattern, eval_batches=spec["eval_batches"],
                  verbose=0, runtime=options, strategy=strategy)


if __name__ == "__main__":
    main(*sys.argv[1:])
