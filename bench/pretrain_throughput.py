r"""Training throughput of ElectraPretrainer against a plain keras-hub RTD step, same run.

  python bench/pretrain_throughput.py --preset small --batch_size 32 --seq_length 128

Both sides train ELECTRA-Small-shaped towers on the same random token batches, fp32, no XLA.
The baseline is written the straightforward way: keras-hub `ElectraBackbone` generator and
discriminator, the generator's vocabulary projection at every position, a `tf.GradientTape`
step with Keras AdamW. Reported: median tokens/s over `--steps` steps after `--warmup`
steps, and our speed as a ratio of the baseline's.
"""

import statistics
import sys
import time
import pathlib

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import keras  # noqa: E402
import keras_hub  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf.config import ElectraConfig  # noqa: E402
from electra_tf.pretraining.masking import mask_tokens  # noqa: E402
from electra_tf.pretraining import objectives  # noqa: E402
from electra_tf.pretraining.run import build_model  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "small", "Model preset.")
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size.")
flags.DEFINE_integer("warmup", 3, "Untimed steps first (tracing, allocation).")
flags.DEFINE_integer("steps", 10, "Timed steps (the median is reported).")


def random_batch(cfg, batch_size, seq_length, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(200, cfg.vocab_size, (batch_size, seq_length)).astype(np.int32)
    ids[:, 0], ids[:, -1] = cfg.cls_token_id, cfg.sep_token_id
    return {"input_ids": tf.constant(ids), "input_mask": tf.ones_like(ids),
            "segment_ids": tf.zeros_like(ids)}


def time_steps(step, batch, warmup, steps):
    for _ in range(warmup):
        step(batch)
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        step(batch)
        durations.append(time.perf_counter() - start)
    return statistics.median(durations)


def ours(cfg):
    model, _ = build_model(cfg)
    model.make_train_function()
    train_function = model.train_function

    def step(batch):
        logs = train_function(iter([batch]))
        float(logs["loss"])  # wait for the step to finish

    return step


def keras_hub_baseline(cfg):
    def tower(hidden, heads, ffn):
        return keras_hub.models.ElectraBackbone(
            vocab_size=cfg.vocab_size, num_layers=cfg.num_layers, num_heads=heads,
            hidden_dim=hidden, embedding_dim=cfg.embedding_size, intermediate_dim=ffn,
            dropout=cfg.dropout, max_sequence_length=cfg.max_position_embeddings)

    generator = tower(cfg.generator_hidden_size, cfg.generator_num_heads,
                      cfg.generator_intermediate_size)
    discriminator = tower(cfg.hidden_size, cfg.num_heads, cfg.intermediate_size)
    mlm_head = keras_hub.layers.MaskedLMHead(
        token_embedding=generator.token_embedding, intermediate_activation="gelu")
    disc_head = keras.layers.Dense(1)
    optimizer = keras.optimizers.AdamW(learning_rate=1e-4, weight_decay=0.01,
                                       global_clipnorm=1.0)
    seed = keras.random.SeedGenerator(0)
    positions_all = tf.range(cfg.max_seq_length)[None]

    @tf.function
    def train_step(batch):
        ids, mask, segments = batch["input_ids"], batch["input_mask"], batch["segment_ids"]
        masked = mask_tokens(ids, mask, mask_prob=cfg.mask_prob,
                             max_predictions=cfg.max_predictions_per_seq,
                             mask_token_id=cfg.mask_token_id,
                             special_token_ids=(0, cfg.cls_token_id, cfg.sep_token_id,
                                                cfg.mask_token_id), seed=seed)
        with tf.GradientTape() as tape:
            gen = generator({"token_ids": masked["masked_ids"], "segment_ids": segments,
                             "padding_mask": mask}, training=True)["sequence_output"]
            every_position = tf.broadcast_to(positions_all[:, :ids.shape[1]], tf.shape(ids))
            logits = mlm_head(gen, mask_positions=every_position)  # all positions, like HF
            gathered = tf.gather(logits, masked["positions"], batch_dims=1)
            mlm = objectives.mlm_loss(gathered, masked["labels"], masked["weights"])
            sampled = objectives.gumbel_sample(gathered, seed=seed)
            corrupted, labels = objectives.replace_tokens(ids, masked["positions"], sampled,
                                                          masked["weights"])
            disc = discriminator({"token_ids": corrupted, "segment_ids": segments,
                                  "padding_mask": mask}, training=True)["sequence_output"]
            disc_logits = tf.squeeze(disc_head(disc), -1)
            loss = mlm + 50.0 * objectives.discriminator_loss(disc_logits, labels, mask)
        variables = (generator.trainable_variables + discriminator.trainable_variables
                     + mlm_head.trainable_variables + disc_head.trainable_variables)
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    def step(batch):
        float(train_step(batch))

    return step


def main(argv):
    del argv
    special = dict(pad_token_id=0, unk_token_id=100, cls_token_id=101, sep_token_id=102,
                   mask_token_id=103)
    cfg = ElectraConfig.preset(FLAGS.preset, vocab_size=FLAGS.vocab_size,
                               max_seq_length=FLAGS.seq_length, batch_size=FLAGS.batch_size,
                               **special)
    batch = random_batch(cfg, FLAGS.batch_size, FLAGS.seq_length)
    tokens = FLAGS.batch_size * FLAGS.seq_length
    results = {}
    for name, make in (("keras-hub baseline", keras_hub_baseline), ("electra_tf", ours)):
        seconds = time_steps(make(cfg), batch, FLAGS.warmup, FLAGS.steps)
        results[name] = tokens / seconds
        print(f"{name:>20}: {seconds * 1000:8.1f} ms/step  {results[name]:8.0f} tokens/s")
    ratio = results["electra_tf"] / results["keras-hub baseline"]
    print(f"{FLAGS.preset} {FLAGS.batch_size}x{FLAGS.seq_length} fp32: electra_tf is "
          f"{ratio:.2f}x the keras-hub baseline")


if __name__ == "__main__":
    app.run(main)
