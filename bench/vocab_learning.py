r"""Learning a WordPiece vocab from raw text: seconds of ours (`electra-build-vocab`'s
learner) against keras-hub's `compute_word_piece_vocabulary`, which must give the same
vocab, and Hugging Face's `tokenizers` (Rust, its own WordPiece trainer: another vocab).

  python bench/vocab_learning.py --corpus '../shared/data/sotu/*.txt' --vocab_size 30522

Every side learns from the same files, lower-cased and accent-stripped (uncased, as
`electra-build-vocab`'s default), with ELECTRA's special tokens reserved, in this process,
the sides in turn for `--rounds` rounds; the median of each side's rounds is printed, with
its corpus rate and vocab size. keras-hub's learner runs the algorithm ours runs, five
times slower or more: leave it out of `--sides` on large corpora.
"""

import os
import statistics
import time

from absl import app, flags
import electra_tf  # noqa: F401  (its CPU memory settings)

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", "data/demo/corpus/*.txt",
                    "Comma-separated globs/files/dirs of UTF-8 text.")
flags.DEFINE_integer("vocab_size", 30522, "Vocab size asked of every side.")
flags.DEFINE_list("sides", ["ours", "tokenizers", "keras_hub"], "Learners to time.")
flags.DEFINE_integer("rounds", 1, "Times each side learns (the sides in turn).")


def ours(paths, vocab_size):
    from electra_tf.text import vocab

    return vocab.learn_vocab(paths, vocab_size, lower_case=True, strip_accents=True)


def keras_hub(paths, vocab_size):
    import keras_hub as hub
    import tensorflow as tf

    from electra_tf.text import corpus, vocab

    stats = corpus.DecodeStats()
    lines = (line for path in paths for line in corpus.read_lines(path, stats)
             if line.strip())
    dataset = tf.data.Dataset.from_generator(
        lambda: lines, output_signature=tf.TensorSpec([], tf.string)).batch(512)
    return hub.tokenizers.compute_word_piece_vocabulary(
        dataset, vocab_size, lowercase=True, strip_accents=True,
        reserved_tokens=list(vocab.SPECIAL_TOKENS))


def tokenizers(paths, vocab_size):
    from tokenizers import BertWordPieceTokenizer

    from electra_tf.text import vocab

    tokenizer = BertWordPieceTokenizer(lowercase=True, strip_accents=True)
    tokenizer.train(paths, vocab_size=vocab_size, show_progress=False,
                    special_tokens=list(vocab.SPECIAL_TOKENS))
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    return [token for token, _ in by_id]


SIDES = {"ours": ours, "keras_hub": keras_hub, "tokenizers": tokenizers}


def main(argv):
    del argv
    # Loaded before any side is timed, so that none pays for another's imports.
    import keras_hub as hub  # noqa: F401
    import tensorflow  # noqa: F401
    import tokenizers as hf_tokenizers  # noqa: F401

    from electra_tf.text import corpus

    unknown = sorted(set(FLAGS.sides) - set(SIDES))
    if unknown:
        raise app.UsageError(f"--sides: unknown {', '.join(unknown)}; choose from "
                             f"{', '.join(SIDES)}.")
    paths = corpus.expand_corpus(FLAGS.corpus)
    megabytes = sum(os.path.getsize(path) for path in paths) / 1e6
    seconds = {name: [] for name in FLAGS.sides}
    vocabs = {}
    for _ in range(FLAGS.rounds):
        for name in FLAGS.sides:
            start = time.perf_counter()
            vocabs[name] = SIDES[name](paths, FLAGS.vocab_size)
            seconds[name].append(time.perf_counter() - start)
    print(f"{len(paths)} file(s), {megabytes:.1f} MB; vocab size asked {FLAGS.vocab_size}; "
          f"median of {FLAGS.rounds} round(s)")
    print(f"{'side':12}{'seconds':>10}{'MB/s':>8}{'tokens':>8}")
    for name in FLAGS.sides:
        median = statistics.median(seconds[name])
        print(f"{name:12}{median:10.1f}{megabytes / median:8.2f}{len(vocabs[name]):8}")
    if "ours" in vocabs and "keras_hub" in vocabs:
        print("ours == keras_hub's, token for token:", vocabs["ours"] == vocabs["keras_hub"])


if __name__ == "__main__":
    app.run(main)
