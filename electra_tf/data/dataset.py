"""Reading pretraining TFRecords into batched `tf.data` pipelines; the options every input
pipeline of ours, and every dataset our models' `fit`, `evaluate` and `predict` are given,
takes (`without_autotuning`)."""

import tensorflow as tf

from electra_tf.errors import CorpusError

# The TFRecord features (the official `build_pretraining_dataset.py` names) and the names
# the models take them by (TF Hub's BERT inputs, as the encoder's).
FEATURES = {"input_ids": "input_word_ids", "input_mask": "input_mask",
            "segment_ids": "input_type_ids"}


def pretraining_dataset(file_pattern, batch_size: int, max_seq_length: int,
                        training: bool = True, seed: int = 0, shuffle_buffer: int = 10_000,
                        noise_width: int = 0) -> tf.data.Dataset:
    """Batches of {'input_word_ids', 'input_mask', 'input_type_ids'}: int32 [batch,
    max_seq_length], read from the records' `input_ids`, `input_mask`, `segment_ids`.

    Training pipelines shuffle files and examples and repeat forever; files are interleaved
    and parsed in parallel. `seed` makes the order reproducible (change it on resume so a
    restarted run does not replay the same first batches).

    With `noise_width`, each example also gets `noise`: float32 [noise_width] uniform
    draws for its masking (see `electra_tf.pretraining.masking`), seeded by `seed`, the
    example's position in the stream and a hash of its bytes. Under a distribution
    strategy every worker runs this pipeline on its own files (tf.data auto-sharding), and
    the hash keeps workers' draws independent; the position makes every epoch draw anew.

    `batch_size` is the global batch: `tf.distribute` splits it across replicas.
    """
    files = tf.io.gfile.glob(file_pattern)
    if not files:
        raise CorpusError(f"--data pattern {file_pattern!r} matches no TFRecord file.")
    files = tf.data.Dataset.from_tensor_slices(sorted(files))
    if training:
        files = files.shuffle(len(files), seed=seed, reshuffle_each_iteration=True).repeat()
    records = files.interleave(tf.data.TFRecordDataset, cycle_length=8,
                               num_parallel_calls=tf.data.AUTOTUNE,
                               deterministic=True)
    if training:
        records = records.shuffle(shuffle_buffer, seed=seed)
    spec = {name: tf.io.FixedLenFeature([max_seq_length], tf.int64) for name in FEATURES}

    @tf.autograph.experimental.do_not_convert  # traced as written: see `electra_tf.traced`
    def with_noise(index, serialized):
        fingerprint = tf.strings.to_hash_bucket_fast(serialized, 2 ** 62)
        noise = tf.random.stateless_uniform(
            [noise_width], seed=tf.stack([tf.constant(seed, tf.int64), fingerprint + index]))
        return serialized, noise

    @tf.autograph.experimental.do_not_convert
    def parse(serialized, noise=None):
        parsed = tf.io.parse_example(serialized, spec)
        features = {name: tf.cast(parsed[feature], tf.int32)
                    for feature, name in FEATURES.items()}
        if noise is not None:
            features["noise"] = noise
        return features

    if noise_width:
        records = records.enumerate().map(with_noise, num_parallel_calls=tf.data.AUTOTUNE)

    return without_autotuning(records.batch(batch_size, drop_remainder=training)
                              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
                              .prefetch(tf.data.AUTOTUNE))


def without_autotuning(data):
    """`data` with `tf.data`'s autotuning off if it is a dataset whose options leave
    autotuning unset (one that sets it, either way, is the user's choice, kept); anything
    else (arrays, lists, None) as it is. Its `AUTOTUNE` maps and interleaves still make
    calls side by side, as many as autotuning starts them with (the cores, at most 16, or
    `options.autotune.initial_parallelism`), never more (40 calls of 50 ms: 1.03 s on 2
    cores either way), and its prefetches still overlap producing with consuming.

    Why: with autotuning on (TensorFlow 2.21's default), a pass over a finite dataset often
    ends only when autotuning's optimisation thread next wakes, at 10 x (2^k - 1) ms from
    the iterator's start (0.63, 1.27, 2.55, 5.11 s, ...), idle until then: a Keras
    `fit` epoch of 1.6 s took 2.55 s in 2 to 4 epochs of 8, an `evaluate` of ELECTRA-Small
    2.55 s instead of 1.9-2.3 in 6 calls of 10, 40 sequential 50 ms map calls 2.55 s
    instead of 2.06 (2-core AMD EPYC, AVX2; none of it with autotuning off). Each `fit`
    epoch, `evaluate` and `predict` over a dataset is such a pass."""
    if not isinstance(data, tf.data.Dataset) or data.options().autotune.enabled is not None:
        return data
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.with_options(options)
