r"""Plots a pretraining run's downstream probe (`electra-pretrain --probe_task`): probe
accuracy against steps, beside the random encoder's.

  pip install -r requirements-plots.txt   # matplotlib, once
  python bench/probe_curve.py --run runs/demo --output docs/probe_curve.png
"""

import json
import os

from absl import app, flags

import plots

FLAGS = flags.FLAGS
flags.DEFINE_string("run", "runs/demo", "A pretraining run directory with a probe.json.")
flags.DEFINE_string("output", "probe_curve.png", "Where to write the plot (PNG).")


def main(argv):
    del argv
    plt = plots.pyplot()

    with open(os.path.join(FLAGS.run, "probe.json"), encoding="utf-8") as f:
        probe = json.load(f)
    steps = [point["step"] for point in probe["history"]]
    accuracy = [point["accuracy"] for point in probe["history"]]
    figure, axes = plt.subplots(figsize=(6, 3.8))
    axes.plot(steps, accuracy, marker="o", label="pretrained discriminator")
    axes.axhline(probe["random_accuracy"], color="grey", linestyle="--",
                 label=f"random encoder ({probe['random_accuracy']:.3f})")
    axes.set_xlabel("pretraining step")
    axes.set_ylabel(f"probe dev accuracy ({probe['eval_examples']} examples)")
    task = os.path.join(*probe["task"].split(os.sep)[-2:])
    axes.set_title(f"Downstream probe during pretraining: {task}")
    axes.legend()
    figure.tight_layout()
    figure.savefig(FLAGS.output, dpi=110)
    print(f"Wrote {FLAGS.output}: {list(zip(steps, accuracy))}")


if __name__ == "__main__":
    app.run(main)
