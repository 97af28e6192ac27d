r"""Learns a WordPiece vocabulary from raw text.

  electra-build-vocab --corpus 'texts/*.txt' --output vocab.txt --vocab_size 30522 \
      [--nolower_case]

Uncased (default) lower-cases and strips accents like BERT/ELECTRA English models. For
Korean use --nolower_case (or at least --nostrip_accents): accent stripping decomposes
Hangul syllables into jamo. CJK ideographs are always split into single characters.
"""

import sys

from absl import flags

from electra_tf.config import ElectraConfig
from electra_tf.text import vocab
from electra_tf_cli import common

FLAGS = flags.FLAGS
REQUIRED = ["corpus", "output"]


def define_flags():
    flags.DEFINE_string("corpus", None, "Comma-separated globs/files/dirs of UTF-8 text.")
    flags.DEFINE_string("output", None, "Where to write the vocab (one token per line).")
    flags.DEFINE_integer("vocab_size", ElectraConfig.vocab_size, "Upper bound on the vocab "
                         "size (WordPiece learning picks the largest frequency threshold that "
                         "fits).")
    flags.DEFINE_bool("lower_case", True, "Lower-case text (uncased model).")
    flags.DEFINE_bool("strip_accents", None, "Strip accents; defaults to --lower_case.")


def run(argv):
    del argv
    vocab.build_vocab(FLAGS.corpus, FLAGS.output, FLAGS.vocab_size, FLAGS.lower_case,
                      FLAGS.strip_accents)


def main():
    common.start(sys.modules[__name__])


if __name__ == "__main__":
    main()
