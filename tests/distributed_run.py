"""Runs a tiny pretraining under one strategy, in its own process (tests/test_distribution.py).

  python tests/distributed_run.py STRATEGY DATA VOCAB MODEL_DIR [CONFIG_JSON]

STRATEGY `mirrored` splits the CPU into 2 logical devices first (it must happen before
TensorFlow initialises); `multi_worker` reads TF_CONFIG. Dropout is off so runs under
different strategies can agree to rounding.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402


def main(strategy_name, data, vocab, model_dir, overrides="{}"):
    if strategy_name == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from electra_tf.config import ElectraConfig
    from electra_tf.runs import pretrain as run
    from electra_tf.training import runtime

    options = runtime.RuntimeOptions(strategy=strategy_name)
    strategy = runtime.create_strategy(options)
    config = ElectraConfig.preset("tiny", **{
        "dropout": 0.0, "batch_size": 8, "train_steps": 3, "checkpoint_every": 1,
        "keep_checkpoints": 10, "warmup_steps": 2, **json.loads(overrides)})
    config, pattern = run.prepare_run(config, run.RunInputs(
        model_dir=model_dir, data=data, vocab=vocab))
    run.train(config, model_dir, pattern, eval_batches=1, verbose=0, runtime=options,
              strategy=strategy)


if __name__ == "__main__":
    main(*sys.argv[1:])
