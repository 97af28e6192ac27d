"""WordPiece vocabularies: learning one from raw text, loading and validating one."""

import json
import os
import sys
import time

from electra_tf import files
from electra_tf.errors import VocabError
from electra_tf.text import corpus

# Order of the reserved tokens in vocabularies we learn ([PAD] must be id 0: records are
# padded with 0, as in the official data).
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_LINES_PER_BATCH = 512


def load_vocab(path: str) -> list:
    """Reads a one-token-per-line vocab and checks the special tokens are present."""
    if not os.path.isfile(path):
        raise VocabError(f"Vocab file {path!r} does not exist.")
    with open(path, encoding="utf-8") as f:
        tokens = [line.rstrip("\r\n") for line in f]
    while tokens and not tokens[-1]:
        tokens.pop()
    return checked(tokens, path)


def load_tokenizer_json(path: str) -> list:
    """The vocab of a Hugging Face `tokenizer.json` holding a WordPiece model, in id order
    (many Hub repos ship it without a vocab.txt)."""
    with open(path, encoding="utf-8") as f:
        model = json.load(f).get("model", {})
    if model.get("type") != "WordPiece" or not isinstance(model.get("vocab"), dict):
        raise VocabError(f"{path} does not hold a WordPiece vocab (model type "
                         f"{model.get('type')!r}); pass the model's vocab.txt with --vocab.")
    by_id = {index: token for token, index in model["vocab"].items()}
    if sorted(by_id) != list(range(len(by_id))):
        raise VocabError(f"{path}: the WordPiece ids are not 0..{len(by_id) - 1}.")
    return checked([by_id[i] for i in range(len(by_id))], path)


def checked(tokens: list, path: str) -> list:
    """`tokens`, after checking ELECTRA's special tokens are there and [PAD] is id 0."""
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
        raise VocabError(
            f"Vocab {path!r} lacks the special token(s) {', '.join(missing)}; ELECTRA needs "
            f"{', '.join(SPECIAL_TOKENS)}. Learn one with "
            "`electra-build-vocab` or add the tokens to the file."
        )
    if tokens[0] != "[PAD]":
        raise VocabError(
            f"Vocab {path!r} has {tokens[0]!r} at id 0; [PAD] must be id 0 (padding is 0)."
        )
    return tokens


def special_token_ids(tokens: list) -> dict:
    """{'pad_token_id': 0, 'unk_token_id': ..., ...} for the config."""
    index = {token: i for i, token in enumerate(tokens)}
    return {f"{t.strip('[]').lower()}_token_id": index[t] for t in SPECIAL_TOKENS}


def looks_cased(tokens: list) -> bool:
    """True when the vocab keeps capitals (a lower-cased vocab has none outside `[...]`)."""
    words = [t for t in tokens if not (t.startswith("[") and t.endswith("]"))]
    capitals = sum(1 for t in words if any(ch.isupper() for ch in t))
    return capitals > 0.01 * max(1, len(words))


def contains_hangul(files, max_chars: int = 200_000) -> bool:
    """True when the corpus sample has Hangul syllables (accent stripping would split them)."""
    seen = 0
    stats = corpus.DecodeStats()
    for path in files:
        for line in corpus.read_lines(path, stats):
            if any("\uac00" <= ch <= "\ud7a3" for ch in line):
                return True
            seen += len(line)
            if seen > max_chars:
                return False
    return False


def learn_vocab(files, vocab_size: int, lower_case: bool, strip_accents: bool,
                stats: corpus.DecodeStats = None) -> list:
    """Learns a WordPiece vocab (BERT-style pre-tokenization) from text files: the vocab
    keras-hub's `compute_word_piece_vocabulary` learns (tf-text's learner, run by
    `text.wordpiece_learner` in a fraction of the time), from lines decoded by our corpus
    reader so that bad UTF-8 is counted instead of crashing.
    """
    # Imported here, not at the top: commands import this module to define their flags,
    # before TensorFlow loads (`electra_tf_cli.common.start`).
    import tensorflow as tf
    from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib

    from electra_tf.text import wordpiece_learner
    from electra_tf.text.words import split_words
    from electra_tf.tf_runtime import without_autotuning

    stats = stats if stats is not None else corpus.DecodeStats()

    def batches():
        batch = []
        for path in files:
            for line in corpus.read_lines(path, stats):
                if line.strip():
                    batch.append(line)
                    if len(batch) == _LINES_PER_BATCH:
                        yield batch
                        batch = []
        if batch:
            yield batch

    lines = tf.data.Dataset.from_generator(
        batches, output_signature=tf.TensorSpec([None], tf.string)
    )
    # The words as keras-hub's tokenizers, and its vocab learner, split them.
    words = without_autotuning(lines.map(  # traced as written: see `electra_tf.traced`
        tf.autograph.experimental.do_not_convert(
            lambda text: split_words(text, lower_case, strip_accents)),
        num_parallel_calls=tf.data.AUTOTUNE,
    ))
    try:
        word_counts = wordpiece_tokenizer_learner_lib.count_words(words)
    except StopIteration:  # what tf-text's `count_words` raises when there is no word
        word_counts = {}
    # At most `vocab_size`, as keras-hub cuts it: the learner may return more.
    tokens = (wordpiece_learner.learn(word_counts, vocab_size, list(SPECIAL_TOKENS))[:vocab_size]
              if word_counts else [])
    if len(tokens) <= len(SPECIAL_TOKENS):
        raise VocabError("The corpus produced no word pieces; is it empty or all blank?")
    return tokens


def write_vocab(tokens: list, path: str) -> None:
    """Writes the vocab atomically."""
    files.write_text(path, "".join(f"{t}\n" for t in tokens))


def strips_accents(lower_case: bool, strip_accents=None) -> bool:
    """Whether text is accent-stripped: as `strip_accents` says, else as BERT's uncased
    models do (stripped when lower-cased)."""
    return lower_case if strip_accents is None else strip_accents


def build_vocab(corpus_pattern, output: str, vocab_size: int, lower_case: bool,
                strip_accents=None) -> list:
    """Learns a vocab from `corpus_pattern` (comma-separated globs, files, directories),
    writes it to `output` and returns the tokens, reporting progress and bad input.

    Uncased (`lower_case`) also strips accents unless `strip_accents` says otherwise; for
    Korean that would decompose Hangul syllables into jamo, hence a warning.
    """
    paths = corpus.expand_corpus(corpus_pattern)
    strip_accents = strips_accents(lower_case, strip_accents)
    if strip_accents and contains_hangul(paths):
        print("warning: the corpus contains Hangul and accent stripping is on, which "
              "decomposes syllables into jamo; pass --nolower_case or --nostrip_accents "
              "for Korean.", file=sys.stderr)
    stats = corpus.DecodeStats()
    start = time.time()
    print(f"Learning a WordPiece vocab (<= {vocab_size}) from {len(paths)} file(s)...")
    tokens = learn_vocab(paths, vocab_size, lower_case, strip_accents, stats)
    write_vocab(tokens, output)
    if stats.summary():
        print(stats.summary(), file=sys.stderr)
    print(f"Wrote {len(tokens)} tokens to {output} in {time.time() - start:.1f}s.")
    fewer_note = _fewer_tokens_note(len(tokens), vocab_size)
    if fewer_note:
        print(fewer_note)
    return tokens


def _fewer_tokens_note(learned: int, asked: int):
    """Why the learner wrote fewer tokens than asked, when it fell short of the range it
    aims for (its `slack_ratio` below `asked`); None otherwise."""
    from electra_tf.text import wordpiece_learner

    params = wordpiece_learner.parameters(asked, list(SPECIAL_TOKENS))
    if learned >= asked * (1 - params.slack_ratio):
        return None
    return (f"note: {learned} tokens, fewer than the {asked} asked: the WordPiece learner "
            f"keeps only pieces seen at least {params.lower_thresh} times in the corpus; "
            "more text gives more.")
