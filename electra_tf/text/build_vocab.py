r"""Learns a WordPiece vocabulary from raw text.

Usage:
  python -m electra_tf.text.build_vocab --corpus 'texts/*.txt' --output vocab.txt \
      --vocab_size 30522 [--nolower_case]

Uncased (default) lower-cases and strips accents like BERT/ELECTRA English models. For
Korean use --nolower_case (or at least --nostrip_accents): accent stripping decomposes
Hangul syllables into jamo. CJK ideographs are always split into single characters.
"""

import sys
import time

from absl import app, flags

from electra_tf import cli
from electra_tf.text import corpus, vocab

FLAGS = flags.FLAGS

def build_vocab(corpus_pattern, output, vocab_size, lower_case, strip_accents=None):
    """Learns a vocab from `corpus_pattern`, writes it to `output`; returns the tokens."""
    files = corpus.expand_corpus(corpus_pattern)
    strip_accents = lower_case if strip_accents is None else strip_accents
    if strip_accents and vocab.contains_hangul(files):
        print("warning: the corpus contains Hangul and accent stripping is on, which "
              "decomposes syllables into jamo; pass --nolower_case or --nostrip_accents "
              "for Korean.", file=sys.stderr)
    stats = corpus.DecodeStats()
    start = time.time()
    print(f"Learning a WordPiece vocab (<= {vocab_size}) from {len(files)} file(s)...")
    tokens = vocab.learn_vocab(files, vocab_size, lower_case, strip_accents, stats)
    vocab.write_vocab(tokens, output)
    if stats.summary():
        print(stats.summary(), file=sys.stderr)
    print(f"Wrote {len(tokens)} tokens to {output} in {time.time() - start:.1f}s.")
    return tokens


def define_flags():
    flags.DEFINE_string("corpus", None, "Comma-separated globs/files/dirs of UTF-8 text.")
    flags.DEFINE_string("output", None, "Where to write the vocab (one token per line).")
    flags.DEFINE_integer("vocab_size", 30522, "Upper bound on the vocab size (WordPiece "
                         "learning picks the largest frequency threshold that fits).")
    flags.DEFINE_bool("lower_case", True, "Lower-case text (uncased model).")
    flags.DEFINE_bool("strip_accents", None, "Strip accents; defaults to --lower_case.")


def main(argv):
    del argv
    build_vocab(FLAGS.corpus, FLAGS.output, FLAGS.vocab_size, FLAGS.lower_case,
                FLAGS.strip_accents)


if __name__ == "__main__":
    define_flags()
    flags.mark_flags_as_required(["corpus", "output"])
    app.run(cli.run_main(main))
