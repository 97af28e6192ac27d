"""`split_words`: BERT's pre-tokenization, the words keras-hub's `pretokenize` gives, split
by TensorFlow's own string ops.

Written here because keras-hub splits with tf-text's `regex_split`, which runs a regex
search per delimiter: the lines of a 12 MB corpus (2.3 M words) took 0.80-0.82 s to
pre-tokenize with it (0.63 s the split alone), 0.40-0.41 s here, and tracing an
`ElectraTokenizer`'s graph took 0.28-0.30 s against 0.11-0.12 s (the ragged tensors
`regex_split` builds are checked op by op; 2-core AMD EPYC, AVX2).
"""

import tensorflow as tf
import tensorflow_text as tf_text
from keras_hub.src.tokenizers.word_piece_tokenizer import (CJK_REGEX, PUNCTUATION_AND_CJK_REGEX,
                                                            PUNCTUATION_REGEX)

# keras-hub's other delimiters, dropped: RE2's `\s` (the ASCII space and control
# characters) and the control and format characters.
_DROPPED = r"\p{Cc}|\p{Cf}"


def split_words(texts, lowercase: bool, strip_accents: bool, split_on_cjk: bool = True):
    """`keras_hub.src.tokenizers.word_piece_tokenizer.pretokenize(texts, lowercase,
    strip_accents, split=True, split_on_cjk=split_on_cjk)`: a string tensor (ragged too)
    to its words, ragged in a last axis; a scalar is a batch of one.

    keras-hub splits at every delimiter character (whitespace, control and format
    characters, punctuation and, with `split_on_cjk`, CJK ideographs), keeping the
    punctuation and ideographs as words of their own. Here each kept delimiter gets a
    space on both sides and each dropped one becomes a space, which leaves ASCII
    whitespace, where `tf.strings.split` splits, only between words: the delimiters are
    single characters, so the words are the same."""
    if texts.shape.rank == 0:
        texts = texts[None]
    # tf-text's `regex_split`, which keras-hub's splits with, ends a text at its first NUL
    # character: so do these words, as keras-hub's vocabs and ids.
    texts = tf.strings.regex_replace(texts, r"\x00\C*", "")
    if split_on_cjk:
        texts = tf.strings.regex_replace(texts, CJK_REGEX, r" \0 ")
    if strip_accents:  # after the ideographs' spaces and before the split, as keras-hub
        texts = tf_text.normalize_utf8(texts, "NFD")
        texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
    kept = PUNCTUATION_AND_CJK_REGEX if split_on_cjk else PUNCTUATION_REGEX
    texts = tf.strings.regex_replace(texts, kept, r" \0 ")
    words = tf.strings.split(tf.strings.regex_replace(texts, _DROPPED, " "))
    return tf_text.case_fold_utf8(words) if lowercase else words
