"""Reading pretraining TFRecords into batched `tf.data` pipelines (without `tf.data`'s
autotuning, as every input pipeline of ours: `tf_runtime.without_autotuning`)."""

import tensorflow as tf

from electra_tf.errors import CorpusError
from electra_tf.tf_runtime import without_autotuning

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
