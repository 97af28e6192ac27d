r"""Start-up: seconds from a fresh process to its first finished training step, ours against
keras-hub and Hugging Face torch, ELECTRA-Small shapes.

  python bench/startup.py --repeats 2

Each measurement is a fresh process (tracing caches are per process) and reports: the
imports, building the model (and its optimizer), the first step (tracing and graph
optimisation included) and a steady step, each the median over `--repeats` processes.
Fine-tuning: a two-class classifier on [CLS] with the official optimizer, batch 32 x 128
packed ids: ours (`ElectraTextClassifier.fit`), keras-hub's `BertTextClassifier.fit` on a
`BertBackbone` of ELECTRA-Small's discriminator shape (keras-hub has no ELECTRA task model)
and Hugging Face's `ElectraForSequenceClassification` (fused AdamW). Pretraining: ours
(`ElectraPretrainer.fit`, what `electra-pretrain` runs) against the torch RTD step
(`torch_rtd.py`), 32 x 128, ours twice: as a machine's first run, each process
compiling its XLA kernels, and as the runs after it, which load them from disk
(`electra_tf.xla_cache`; one process fills a temporary home first). The command: a whole
`electra-pretrain --preset small` run of one step, each a fresh process (its imports,
reading the shards, building, the first step, the checkpoint), on shards of the demo
corpus with an 8,192-token vocab learned from it, both made beforehand and not timed; the
first compiles its XLA kernels, the others load them. There is no peer command to run
beside it.
"""

import importlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags
from electra_tf import xla_cache  # importing electra_tf: its CPU memory settings too

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # synthetic, torch_rtd

FLAGS = flags.FLAGS
flags.DEFINE_integer("repeats", 2, "Processes per measurement (the median is reported).")
flags.DEFINE_integer("batch_size", 32, "Sequences per step.")
flags.DEFINE_integer("seq_length", 128, "Tokens per sequence.")
flags.DEFINE_bool("command", True, "Also time whole one-step electra-pretrain runs.")
flags.DEFINE_enum("measure", None, ["finetune_ours", "finetune_keras_hub", "finetune_torch",
                                    "pretrain_ours", "pretrain_torch"],
                  "Internal: one measurement in this process; prints its four times.")
STARTED = time.perf_counter()
VOCAB = 30522
MEASUREMENTS = {
    "fine-tuning": ("finetune_ours", "finetune_keras_hub", "finetune_torch"),
    "pretraining": ("pretrain_ours", "pretrain_torch"),
}


# Each builder takes [2 x batch, seq] int32 `ids` and labels, builds its model and returns
# `train()`: two steps (one batch each), returning the time after each.


def small():
    """ELECTRA-Small's config (the sizes every side builds)."""
    from electra_tf.config import ElectraConfig

    return ElectraConfig.preset("small", vocab_size=VOCAB)


def keras_fit(model, *args, **kwargs):
    """train(): `model.fit(*args, **kwargs)`, returning the time after each step."""
    import keras

    def train():
        times = []
        model.fit(*args, **kwargs, verbose=0, callbacks=[keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda *_, **__: times.append(time.perf_counter()))])
        return times

    return train


def finetune_ours(ids, labels):
    from electra_tf.layers.encoder import ElectraEncoder
    from electra_tf.models.text_classifier import ElectraTextClassifier

    encoder = ElectraEncoder.from_electra_config(small())
    model = ElectraTextClassifier(encoder, num_classes=2)
    inputs = {"input_word_ids": ids, "input_mask": ids * 0 + 1, "input_type_ids": ids * 0}
    return keras_fit(model, inputs, labels, batch_size=len(ids) // 2)


def finetune_keras_hub(ids, labels):
    import keras_hub

    cfg = small()
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=VOCAB, num_layers=cfg.num_layers, num_heads=cfg.num_heads,
        hidden_dim=cfg.hidden_size, intermediate_dim=cfg.intermediate_size,
        max_sequence_length=cfg.max_position_embeddings)
    model = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None)
    inputs = {"token_ids": ids, "padding_mask": ids * 0 + 1, "segment_ids": ids * 0}
    return keras_fit(model, inputs, labels, batch_size=len(ids) // 2)


def torch_loop(step, *batches):
    def train():
        times = []
        for batch in batches:
            step(*batch)
            times.append(time.perf_counter())
        return times

    return train


def finetune_torch(ids, labels):
    import torch
    import transformers

    cfg = small()
    model = transformers.ElectraForSequenceClassification(transformers.ElectraConfig(
        vocab_size=VOCAB, embedding_size=cfg.embedding_size, hidden_size=cfg.hidden_size,
        num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
        intermediate_size=cfg.intermediate_size, num_labels=2)).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)

    def step(ids, labels):
        optimizer.zero_grad()
        model(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    ids, labels = torch.from_numpy(ids.astype("int64")), torch.from_numpy(labels)
    return torch_loop(step, *zip(ids.chunk(2), labels.chunk(2)))


def pretrain_ours(ids, labels):
    import tensorflow as tf

    from electra_tf.runs.pretrain import build_model
    from synthetic import preset_config

    cfg = preset_config("small", VOCAB, ids.shape[1], len(ids) // 2)
    model, _ = build_model(cfg)
    data = tf.data.Dataset.from_tensor_slices(
        {"input_word_ids": ids, "input_mask": ids * 0 + 1, "input_type_ids": ids * 0}
    ).batch(cfg.batch_size)
    return keras_fit(model, data)


def pretrain_torch(ids, labels):
    import torch

    from synthetic import preset_config
    from torch_rtd import RtdStep

    cfg = preset_config("small", VOCAB, ids.shape[1], len(ids) // 2)
    step = RtdStep(cfg, cfg.mask_token_id, cfg.sep_token_id, cfg.max_predictions_per_seq)
    ids = torch.from_numpy(ids.astype("int64"))
    return torch_loop(step, *((b, torch.ones_like(b), torch.zeros_like(b))
                              for b in ids.chunk(2)))


def command_runs() -> list:
    """Seconds of whole one-step `electra-pretrain --preset small` runs: the first compiles
    its XLA kernels, the `--repeats` after it load them from disk (`electra_tf.xla_cache`,
    under a home of their own)."""
    from demo_data import ROOT
    from electra_tf.data.build_pretraining_data import SHARD_GLOB

    def command(name, *args):
        return [os.path.join(os.path.dirname(sys.executable), name), *args]

    corpus = f"--corpus={os.path.join(ROOT, 'data', 'demo', 'corpus', '*.txt')}"
    length = f"--max_seq_length={FLAGS.seq_length}"
    seconds = []
    with tempfile.TemporaryDirectory() as work:
        vocab, shards = os.path.join(work, "vocab.txt"), os.path.join(work, "shards")
        subprocess.run(command("electra-build-vocab", corpus, "--vocab_size=8192",
                               f"--output={vocab}"), check=True, capture_output=True)
        subprocess.run(command("electra-build-data", corpus, f"--vocab={vocab}", length,
                               f"--output_dir={shards}"), check=True, capture_output=True)
        environment = {**os.environ, "ELECTRA_TF_HOME": os.path.join(work, "home")}
        for run in range(1 + FLAGS.repeats):
            started = time.perf_counter()
            subprocess.run(command(
                "electra-pretrain", "--preset=small", length, f"--vocab={vocab}",
                f"--data={os.path.join(shards, SHARD_GLOB)}",
                f"--model_dir={os.path.join(work, f'run{run}')}",
                f"--batch_size={FLAGS.batch_size}", "--train_steps=1", "--eval_batches=0"),
                check=True, capture_output=True, env=environment)
            seconds.append(time.perf_counter() - started)
    return seconds


def measure_here(name):
    """Prints: imports, build, first step, steady step (seconds)."""
    import numpy as np

    # Everything a side imports, so that "build" is building only (transformers imports
    # its model classes lazily, on first use).
    for module in (["torch", "transformers.models.electra.modeling_electra"]
                   if name.endswith("torch") else ["keras_hub", "electra_tf.runs.pretrain"]):
        importlib.import_module(module)
    imported = time.perf_counter()
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, VOCAB, (2 * FLAGS.batch_size, FLAGS.seq_length)).astype(np.int32)
    ids[:, 0], ids[:, -1] = 101, 102
    labels = rng.integers(0, 2, 2 * FLAGS.batch_size)
    train = globals()[name](ids, labels)
    built = time.perf_counter()
    first, second = train()
    print(imported - STARTED, built - imported, first - built, second - first)


def main(argv):
    del argv
    if FLAGS.measure:
        measure_here(FLAGS.measure)
        return
    print(f"{FLAGS.batch_size} x {FLAGS.seq_length}, ELECTRA-Small shapes; seconds, median "
          f"of {FLAGS.repeats} fresh processes")
    for title, names in MEASUREMENTS.items():
        print(f"\n{title:<20}{'imports':>9}{'build':>9}{'1st step':>10}{'to 1st step':>13}"
              f"{'steady':>9}")
        for name in names:
            if name != "pretrain_ours":  # fine-tuning's `fit` compiles no XLA kernel
                print_row(name.split("_", 1)[1], measure(name, FLAGS.repeats, {}))
                continue
            # Ours as a machine's first run (each process compiles its XLA kernels) and as
            # the runs after it (they load them from disk, `electra_tf.xla_cache`).
            # Off by the flag set empty after the user's XLA flags, which stay: the last
            # setting of a flag wins.
            cache_off = {"TF_XLA_FLAGS": f"{os.environ.get('TF_XLA_FLAGS', '')} "
                                         f"--{xla_cache.FLAG}=".strip()}
            print_row("ours", measure(name, FLAGS.repeats, cache_off))
            with tempfile.TemporaryDirectory() as home:
                # TensorFlow's errors hidden, as in the commands: on AVX-512 CPUs the
                # kernels are kept on disk only then (`xla_cache.loads_with_false_alarms`).
                from_disk = {"ELECTRA_TF_HOME": home, "TF_CPP_MIN_LOG_LEVEL": "3"}
                measure(name, 1, from_disk)  # compiles them into `home`
                print_row("ours, XLA from disk", measure(name, FLAGS.repeats, from_disk))
    if FLAGS.command:
        first, *later = command_runs()
        print(f"\nelectra-pretrain --preset small --train_steps 1, the whole command: "
              f"{first:.1f} s (its XLA kernels compiled), {statistics.median(later):.1f} s "
              "(from disk)")


def measure(name: str, processes: int, env: dict) -> list:
    """Imports, build, first step and steady step of `name`: each the median of
    `processes` fresh processes given `env`'s variables."""
    runs = []
    for _ in range(processes):
        output = subprocess.run(
            [sys.executable, __file__, f"--measure={name}", f"--batch_size={FLAGS.batch_size}",
             f"--seq_length={FLAGS.seq_length}"], env={**os.environ, **env},
            capture_output=True, text=True, check=True).stdout
        runs.append([float(x) for x in output.split()[-4:]])
    return [statistics.median(column) for column in zip(*runs)]


def print_row(label: str, seconds: list) -> None:
    imports, build, first, steady = seconds
    print(f"{label:<20}{imports:9.1f}{build:9.1f}{first:10.1f}{build + first:13.1f}"
          f"{steady:9.2f}")


if __name__ == "__main__":
    app.run(main)
