r"""Exports a fine-tuned model as a TF Serving model version that takes raw text.

  electra-export-classifier --checkpoint runs/x-sent \
      --output exports/serving/sentiment/1

writes the SavedModel of the run's best trial to exports/serving/sentiment/1 (pass the base
directory exports/serving/sentiment to take the next free version), with TF Serving warm-up
requests in assets.extra/. Classification returns probabilities, label_id and label;
regression a score; tagging tags per word. See export/serving/README.md to serve it.
"""

import sys

from absl import flags

from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["checkpoint", "output"]


def define_flags():
    flags.DEFINE_string("checkpoint", None, "A fine-tuning run directory (finetune.py's "
                        "--model_dir).")
    flags.DEFINE_string("output", None, "A version directory (<base>/<N>) or a model base "
                        "directory (the next version number is used).")
    flags.DEFINE_integer("trial", None, "Trial to export (default: the best one).")
    flags.DEFINE_integer("versions", 0, "Keep this many newest versions under the base "
                         "directory, the new one included, removing older ones (0: keep all).")
    flags.DEFINE_string("model_name", None, "Model name in the warm-up requests (default: the "
                        "base directory's name, as in models.config).")
    flags.DEFINE_bool("constant_weights", False, "Write the weights into the graph as "
                      "constants: small requests 5-10% faster, but the server holds ~10x the "
                      "weights in memory (models of up to 1 GiB of weights).")


def run(argv):
    del argv
    # TensorFlow's side, imported once the flags are parsed (`common.start`).
    from electra_tf.export import classifier as export_lib

    result = export_lib.export_classifier(FLAGS.checkpoint, FLAGS.output, FLAGS.trial,
                                          FLAGS.versions, FLAGS.model_name,
                                          FLAGS.constant_weights)
    print(f"Model {result['model_name']!r} version {result['version']}: {result['path']}")
    print(f"Signatures: {', '.join(result['signatures'])}")
    if result["removed"]:
        print(f"Removed older versions: {', '.join(map(str, result['removed']))}")


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
