r"""Training throughput of ElectraPretrainer against its peers, same run: a plain keras-hub
RTD step and Hugging Face's towers in PyTorch.

  python bench/pretrain_throughput.py --preset small --batch_sizes 32,128 --seq_length 128

Every side trains ELECTRA-Small-shaped towers on the same random token batches. The
keras-hub baseline is written the straightforward way: keras-hub `ElectraBackbone`
generator and discriminator, the generator's vocabulary projection at every position, a
`tf.GradientTape` step with Keras AdamW, fp32, no XLA. The torch peer is `torch_rtd.py`
(masked-only generator head, shared embeddings, fused AdamW, clipping). Ours and torch run
in each of `--precisions` (bf16: torch's CPU autocast).

Reported per batch size: median tokens/s over `--rounds` rounds of `--steps` steps of every
side in turn (after `--warmup` steps each), model-FLOPs utilisation (the step's training
FLOPs, `electra_tf.pretraining.flops`, counted like the official flops_computation.py, per
second over this machine's matmul peak, measured here in the same run for fp32 and bf16),
and speed ratios paired within rounds: each side against the keras-hub baseline, our bf16
against our fp32, ours against torch in each precision; the median of the rounds' ratios
and their range. Sides of one round run within a minute of each other, while the machines
this runs on change speed for minutes at a time: a ratio of medians over the whole run
mixes spells (one run gave our bf16 1.32x our fp32 by medians, steps of the two alternating
in one process 1.4-1.6x). Then the peak resident memory of each side training at the
largest batch, each in a fresh process.
"""

import importlib
import statistics
import subprocess
import sys
import time

import electra_tf  # noqa: F401  (its CPU memory settings)
import keras  # noqa: E402
import keras_hub  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402

from electra_tf.pretraining.masking import mask_tokens, noise_width, split_noise  # noqa: E402
from electra_tf.pretraining import losses, sampling  # noqa: E402
from electra_tf.pretraining.flops import training_flops_per_step  # noqa: E402
from electra_tf.training.runtime_options import RuntimeOptions  # noqa: E402
from synthetic import preset_config, pretraining_step, random_batch  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("preset", "small", "Model preset.")
flags.DEFINE_list("batch_sizes", ["32", "128"], "Sequences per step, one run each.")
flags.DEFINE_list("precisions", ["none", "bf16"], "Our mixed precision settings to time.")
flags.DEFINE_enum("memory_only", None, ["keras_hub", "electra_tf", "torch"], "Internal: "
                  "train this side at --batch_sizes[0], --precisions[0] and print the "
                  "process's resident memory before and its peak during training (KiB).")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_integer("vocab_size", 30522, "Vocabulary size.")
flags.DEFINE_integer("warmup", 3, "Untimed steps first (tracing, allocation).")
flags.DEFINE_integer("steps", 4, "Timed steps per side and round.")
flags.DEFINE_integer("rounds", 5, "Rounds over all sides in turn: each side's median over "
                     "all its timed steps is reported, ratios are paired within rounds.")


def time_steps(step, batch, warmup, steps):
    return statistics.median(step_durations(step, batch, warmup, steps))


def step_durations(step, batch, warmup, steps):
    for _ in range(warmup):
        step(batch)
    durations = []
    for _ in range(steps):
        start = time.perf_counter()
        step(batch)
        durations.append(time.perf_counter() - start)
    return durations


def paired_ratio(rounds, faster, slower):
    """How many times faster `faster` ran than `slower`: the median over rounds of the ratio
    of their median steps in the round, and the rounds' range."""
    ratios = sorted(s / f for f, s in zip(rounds[faster], rounds[slower]))
    return (f"{statistics.median(ratios):5.2f}x (rounds {ratios[0]:.2f}-{ratios[-1]:.2f}) "
            "as fast as")


def ours(cfg, mixed_precision="none"):
    return pretraining_step(cfg, RuntimeOptions(mixed_precision=mixed_precision))


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
    width = noise_width(cfg.max_seq_length, cfg.max_predictions_per_seq)

    @tf.function
    def train_step(batch):
        ids, mask, segments = batch["input_word_ids"], batch["input_mask"], batch["input_type_ids"]
        scores, keep, draws = split_noise(keras.random.uniform([ids.shape[0], width], seed=seed),
                                          ids.shape[1], cfg.max_predictions_per_seq)
        masked = mask_tokens(ids, mask, mask_prob=cfg.mask_prob,
                             max_predictions=cfg.max_predictions_per_seq,
                             mask_token_id=cfg.mask_token_id,
                             special_token_ids=(0, cfg.cls_token_id, cfg.sep_token_id,
                                                cfg.mask_token_id),
                             position_scores=scores, keep_draws=keep)
        with tf.GradientTape() as tape:
            gen = generator({"token_ids": masked["masked_ids"], "segment_ids": segments,
                             "padding_mask": mask}, training=True)["sequence_output"]
            every_position = tf.broadcast_to(positions_all[:, :ids.shape[1]], tf.shape(ids))
            logits = mlm_head(gen, mask_positions=every_position)  # all positions, like HF
            gathered = tf.gather(logits, masked["positions"], batch_dims=1)
            mlm = losses.mlm_loss(gathered, masked["labels"], masked["weights"])
            sampled = sampling.sample_tokens(gathered, draws)
            corrupted, labels = sampling.replace_tokens(ids, masked["positions"], sampled,
                                                          masked["weights"])
            disc = discriminator({"token_ids": corrupted, "segment_ids": segments,
                                  "padding_mask": mask}, training=True)["sequence_output"]
            disc_logits = tf.squeeze(disc_head(disc), -1)
            loss = mlm + 50.0 * losses.discriminator_loss(disc_logits, labels, mask)
        variables = (generator.trainable_variables + discriminator.trainable_variables
                     + mlm_head.trainable_variables + disc_head.trainable_variables)
        optimizer.apply(tape.gradient(loss, variables), variables)
        return loss

    def step(batch):
        float(train_step(batch))

    return step


def matmul_peak(dtype, size=2048, repeats=10):
    """Measured FLOP/s of chained large square matmuls (the ceiling for utilisation)."""
    a = tf.cast(tf.random.normal([size, size]), dtype)
    b = tf.cast(tf.random.normal([size, size]) / size ** 0.5, dtype)

    @tf.function
    def multiply():
        out = a
        for _ in range(repeats):  # each depends on the last: none can be merged or skipped
            out = tf.linalg.matmul(out, b)
        return tf.reduce_sum(tf.cast(out[:1, :1], tf.float32))

    seconds = time_steps(lambda _: float(multiply()), None, 2, 5)
    return 2 * size ** 3 * repeats / seconds


def torch_peer(cfg, mixed_precision="none"):
    import torch

    from torch_rtd import RtdStep

    train = RtdStep(cfg, cfg.mask_token_id, cfg.sep_token_id, cfg.max_predictions_per_seq,
                    bf16=mixed_precision == "bf16")

    def step(batch):
        train(*(torch.from_numpy(batch[k].numpy().astype("int64"))
                for k in ("input_word_ids", "input_mask", "input_type_ids")))

    return step


SIDES = {"keras_hub": lambda cfg, precision: keras_hub_baseline(cfg),
         "electra_tf": ours, "torch": torch_peer}


def config_for(batch_size):
    return preset_config(FLAGS.preset, FLAGS.vocab_size, FLAGS.seq_length, batch_size)


def memory_kib(field):
    """A memory figure of this process from /proc/self/status (VmRSS, VmHWM: its peak)."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))


def peak_memory_mib(side, precision, batch_size):
    """(resident after the imports, peak above that while building and training three
    steps) of a fresh process training `side`, in MiB: the imports (TensorFlow, and torch
    too for the torch side) are not the model's."""
    output = subprocess.run(
        [sys.executable, __file__, f"--memory_only={side}", f"--preset={FLAGS.preset}",
         f"--batch_sizes={batch_size}", f"--seq_length={FLAGS.seq_length}",
         f"--vocab_size={FLAGS.vocab_size}", f"--precisions={precision}"],
        capture_output=True, text=True, check=True).stdout
    before, peak = (int(kib) / 1024 for kib in output.split()[-2:])
    return before, peak - before


def main(argv):
    del argv
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    if FLAGS.memory_only:
        cfg = config_for(batch_sizes[0])
        batch = random_batch(cfg, batch_sizes[0], FLAGS.seq_length)
        if FLAGS.memory_only == "torch":
            importlib.import_module("torch")  # its import is not the model's memory
        before = memory_kib("VmRSS")
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # restarts the peak (VmHWM) from the current resident size
        time_steps(SIDES[FLAGS.memory_only](cfg, FLAGS.precisions[0]), batch, 1, 2)
        print(before, memory_kib("VmHWM"))
        return
    peaks = {"none": matmul_peak(tf.float32), "bf16": matmul_peak(tf.bfloat16)}
    peaks["fp16"] = peaks["none"]  # no fp16 matmul units on CPUs
    print(f"matmul peak: fp32 {peaks['none'] / 1e9:.0f} GFLOP/s, "
          f"bf16 {peaks['bf16'] / 1e9:.0f} GFLOP/s")
    runs = [("keras_hub", "none")] + [(side, p) for p in FLAGS.precisions
                                      for side in ("electra_tf", "torch")]
    for batch_size in batch_sizes:
        cfg = config_for(batch_size)
        batch = random_batch(cfg, batch_size, FLAGS.seq_length)
        tokens = batch_size * FLAGS.seq_length
        # Real work: lookups compute nothing; a matmul's backward is two matmuls.
        step_flops = training_flops_per_step(cfg, batch_size, sparse_embedding=True,
                                             backward_multiplier=2)
        print(f"\n{FLAGS.preset} {batch_size}x{FLAGS.seq_length} "
              f"({step_flops / 1e9:.0f} GFLOP per step)")
        steps = {run: SIDES[run[0]](cfg, run[1]) for run in runs}
        for step in steps.values():
            step_durations(step, batch, FLAGS.warmup, 0)
        # Every side in turn, round after round, so that a machine slowing down for a while
        # (as shared ones do) slows every side alike instead of whichever ran then.
        rounds = {run: [] for run in runs}  # per run: each round's median step, seconds
        durations = {run: [] for run in runs}
        for _ in range(FLAGS.rounds):
            for run, step in steps.items():
                timed = step_durations(step, batch, 0, FLAGS.steps)
                durations[run] += timed
                rounds[run].append(statistics.median(timed))
        baseline = ("keras_hub", "none")
        for run in runs:
            seconds = statistics.median(durations[run])
            utilisation = step_flops / seconds / peaks[run[1]]
            print(f"{' '.join(run):>20}: {seconds * 1000:8.1f} ms/step "
                  f"{tokens / seconds:8.0f} tokens/s MFU {utilisation:6.1%}  "
                  f"{paired_ratio(rounds, run, baseline)} keras-hub")
        pairs = [(("electra_tf", p), ("electra_tf", "none")) for p in FLAGS.precisions
                 if p != "none" and "none" in FLAGS.precisions]
        pairs += [(("electra_tf", p), ("torch", p)) for p in FLAGS.precisions]
        for faster, slower in pairs:
            print(f"{' '.join(faster):>20}: {paired_ratio(rounds, faster, slower)} "
                  f"{' '.join(slower)}")
    print(f"\nmemory at {max(batch_sizes)}x{FLAGS.seq_length}, each side in a fresh process:")
    for side, precision in runs:
        before, training = peak_memory_mib(side, precision, max(batch_sizes))
        print(f"{side + ' ' + precision:>20}: peak {training:6.0f} MiB above the "
              f"{before:.0f} MiB resident after the imports")


if __name__ == "__main__":
    app.run(main)
