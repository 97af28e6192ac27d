r"""Raw text -> packed pretraining examples -> TFRecord shards (and manifest.json).

  electra-build-data --corpus 'texts/*.txt' --vocab vocab.txt --output_dir shards/ \
      --max_seq_length 128 --num_shards 64 [--num_processes 8] [--nolower_case]
  electra-build-data --runner FnApiRunner --corpus 'texts/*.txt' --vocab vocab.txt \
      --output_dir shards/ --num_shards 64      # as an Apache Beam pipeline

Packing follows the official build_pretraining_dataset.py; `electra-pretrain --data
'shards/pretrain_data.tfrecord-*' --vocab vocab.txt` trains on the result.
"""

import os
import sys

from absl import flags

from electra_tf.data import build_pretraining_data as builder
from electra_tf.errors import ConfigError
from electra_tf.text.vocab import strips_accents
from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["corpus", "vocab", "output_dir"]


def define_flags():
    flags.DEFINE_string("corpus", None, "Comma-separated globs/files/dirs of UTF-8 text: one "
                        "sentence or line per line, blank line between documents.")
    flags.DEFINE_string("vocab", None, "WordPiece vocab file (electra-build-vocab writes "
                        "one); pretraining must use the same.")
    flags.DEFINE_string("output_dir", None, "Directory for the TFRecord shards.")
    flags.DEFINE_integer("max_seq_length", 128, "Tokens per example, [CLS]/[SEP] included "
                         "(official: 128 Small, 512 Base/Large); pretraining must use the "
                         "same.")
    flags.DEFINE_integer("num_shards", 16, "Output TFRecord files; at least the number of "
                         "training workers, so each reads its own.")
    flags.DEFINE_integer("num_processes", os.cpu_count() or 1, "Parallel worker processes.")
    flags.DEFINE_bool("lower_case", True, "Lower-case text (must match the vocab).")
    flags.DEFINE_bool("strip_accents", None, "Strip accents; defaults to --lower_case.")
    flags.DEFINE_bool("split_sentences", True, "Split lines into sentences first (for text "
                      "with several sentences per line).")
    flags.DEFINE_integer("seed", builder.BuildOptions.seed,
                         "Seed of the packing's random choices (electra-pretrain --corpus "
                         "builds with the same one).")
    flags.DEFINE_string("runner", None, "Run as an Apache Beam pipeline on this runner "
                        "(FnApiRunner: on this machine; DataflowRunner, FlinkRunner, "
                        "SparkRunner, ...; needs `pip install -r requirements-beam.txt`). "
                        "Default: local processes.")
    flags.DEFINE_string("beam_pipeline_options", "", "With --runner: Beam's own options as "
                        "one string, e.g. '--project=P --region=R --temp_location=gs://b/t'.")


def run(argv):
    del argv
    options = builder.BuildOptions(
        vocab_path=FLAGS.vocab, max_seq_length=FLAGS.max_seq_length,
        lower_case=FLAGS.lower_case,
        strip_accents=strips_accents(FLAGS.lower_case, FLAGS.strip_accents),
        split_sentences=FLAGS.split_sentences, seed=FLAGS.seed)
    if FLAGS.runner:
        try:
            from electra_tf.data import beam_pipeline
        except ImportError as e:
            raise ConfigError(f"--runner={FLAGS.runner} needs Apache Beam ({e}): "
                              "pip install -r requirements-beam.txt") from e
        manifest = beam_pipeline.build_with_beam(
            FLAGS.corpus, FLAGS.output_dir, options, FLAGS.num_shards, FLAGS.runner,
            FLAGS.beam_pipeline_options)
    else:
        manifest = builder.build_pretraining_data(FLAGS.corpus, FLAGS.output_dir, options,
                                                  FLAGS.num_shards, FLAGS.num_processes)
    print(f"Wrote {manifest['num_examples']} examples to {manifest['num_shards']} shard(s) "
          f"in {FLAGS.output_dir} ({manifest['examples_per_second']} examples/s).")


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
