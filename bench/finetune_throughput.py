r"""Fine-tuning speed from Python on short real inputs: seconds per step of our task models'
`fit` against Hugging Face torch's models of the same weights, each padding a batch only
as far as its longest example.

  python bench/finetune_throughput.py --model ../shared/models/electra-small-ref/discriminator

Three tasks, batches of 16 (`--batch_size`), the demo sentiment texts (`--tasks`):
- classify: the texts and their labels, packed to 128 pieces at most;
- tag: their words, with tags drawn at random (the work does not depend on them), 128;
- qa: a question of three words read just before a three-word answer in 100-200-word
  passages of the demo corpus, windows of 384 pieces.
Ours: `ElectraTextClassifier` / `ElectraTokenClassifier` / `ElectraQuestionAnswerer`
`.fit` on the raw inputs (the official recipe's optimizer; the encoder reads each batch up
to its last real token; QA's 384-piece windows with the training kernels, each batch's
length bucketed: `ElectraTask.fit`). Torch: `ElectraForSequenceClassification` /
`...ForTokenClassification` / `...ForQuestionAnswering` with the same encoder weights,
the fast tokenizer padding each batch to its longest example (Hugging Face's
`DataCollatorWithPadding`; its QA example script pads to 384 by default, which would be
slower), fused AdamW and clipping. QA heads differ (ours: the official joint end head and
no-answer classifier; torch: two linear heads), a small share of the work.

`--mixed_precision bf16` times both in bfloat16: ours built under Keras's
`mixed_bfloat16` policy (as `finetune.py --mixed_precision bf16` builds it), torch's
forward and loss under `torch.autocast("cpu", torch.bfloat16)` (weights and optimizer in
float32 on both sides).

`--[no]sixteen_bit_dropout` times ours with or without the 16-bit dropout decisions
(default: ours as it defaults, on in bf16 and off in float32; shorter inputs only: QA's
dropouts are the fused kernels').

Each round times every side in turn (`--rounds`): `--steps` steps after one warm-up call
of `--steps` steps (tracing, first runs); the median step of each side over all rounds
is printed, with the paired ratio torch / ours per round.
"""

import os
import statistics
import sys
import time

from absl import app, flags
import electra_tf  # noqa: F401  (its CPU memory settings)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # demo_data

import demo_data  # noqa: E402

FLAGS = flags.FLAGS
flags.DEFINE_string("model", demo_data.REFERENCE_DISCRIMINATOR, demo_data.MODEL_HELP)
flags.DEFINE_list("tasks", list(demo_data.FINETUNING_TASKS), "Tasks to time.")
flags.DEFINE_integer("batch_size", 16, "Examples per step.")
flags.DEFINE_integer("steps", 6, "Timed steps per side and round.")
flags.DEFINE_integer("rounds", 2, "Rounds (every side in turn in each).")
flags.DEFINE_enum("mixed_precision", "none", ["none", "bf16"], "Both sides' precision "
                  "(below).")
flags.DEFINE_bool("sixteen_bit_dropout", None, "Ours with 16-bit dropout decisions "
                  "(`RuntimeOptions.sixteen_bit_dropout`; default: its own).")
LENGTHS = {"classify": 128, "tag": 128, "qa": 384}


def ours(task, model_dir):
    """fit(inputs, targets) -> the seconds of each step."""
    import keras

    from electra_tf.training.runtime import precision
    from electra_tf.training.runtime_options import RuntimeOptions

    with precision(FLAGS.mixed_precision):
        model = demo_data.task_model(task, model_dir)
    model.training_kernels = RuntimeOptions(sixteen_bit_dropout=FLAGS.sixteen_bit_dropout)

    def fit(inputs, targets):
        ends = [time.perf_counter()]
        model.fit(inputs, targets, batch_size=FLAGS.batch_size, epochs=1, shuffle=False,
                  verbose=0, callbacks=[keras.callbacks.LambdaCallback(
                      on_train_batch_end=lambda *_, **__: ends.append(time.perf_counter()))])
        return [b - a for a, b in zip(ends, ends[1:])]

    return fit


def torch_peer(task, model_dir):
    """fit(inputs, targets) -> the seconds of each step."""
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    kind = {"classify": transformers.ElectraForSequenceClassification,
            "tag": transformers.ElectraForTokenClassification,
            "qa": transformers.ElectraForQuestionAnswering}[task]
    tags = demo_data.TAGS
    model = kind.from_pretrained(model_dir, num_labels=len(tags) if task == "tag" else 2)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)

    def batch(inputs, targets):
        if task == "classify":
            encoded = tokenizer(inputs, padding="longest", truncation=True,
                                max_length=LENGTHS[task], return_tensors="pt")
            return {**encoded, "labels": torch.tensor(targets)}
        if task == "tag":
            encoded = tokenizer(inputs, is_split_into_words=True, padding="longest",
                                truncation=True, max_length=LENGTHS[task],
                                return_tensors="pt")
            labels = []
            for row, row_tags in enumerate(targets):  # first pieces carry the tags
                words = encoded.word_ids(row)
                labels.append([-100 if w is None or w == previous else tags.index(row_tags[w])
                               for w, previous in zip(words, [None] + words)])
            return {**encoded, "labels": torch.tensor(labels)}
        questions, contexts = inputs
        encoded = tokenizer(questions, contexts, padding="longest", truncation="only_second",
                            max_length=LENGTHS[task], return_tensors="pt")
        length = encoded["input_ids"].shape[1]
        positions = torch.randint(0, length, (len(questions),))  # the work is the same
        return {**encoded, "start_positions": positions, "end_positions": positions}

    def fit(inputs, targets):
        times = []
        size = len(targets)
        for begin in range(0, size, FLAGS.batch_size):
            start = time.perf_counter()
            part = slice(begin, begin + FLAGS.batch_size)
            optimizer.zero_grad()
            with torch.autocast("cpu", torch.bfloat16,
                                enabled=FLAGS.mixed_precision == "bf16"):
                loss = model(**batch(demo_data.rows(inputs, part), targets[part])).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            times.append(time.perf_counter() - start)
        return times

    return fit


def main(argv):
    del argv
    import subprocess

    cpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    model_name = next((line.split(":", 1)[1].strip() for line in cpu.splitlines()
                       if line.startswith("Model name")), "?")
    print(f"CPU: {model_name}; batch {FLAGS.batch_size}, {FLAGS.steps} steps x "
          f"{FLAGS.rounds} rounds per side, {FLAGS.mixed_precision}")
    per_step = FLAGS.batch_size * FLAGS.steps
    for task in FLAGS.tasks:
        inputs, targets = demo_data.finetuning_examples(task, per_step * (FLAGS.rounds + 1))
        sides = {"ours": ours(task, FLAGS.model), "torch": torch_peer(task, FLAGS.model)}
        warm = slice(0, per_step)
        for fit in sides.values():
            fit(demo_data.rows(inputs, warm), targets[warm])
        steps = {name: [] for name in sides}
        ratios = []
        for r in range(FLAGS.rounds):
            part = slice(per_step * (r + 1), per_step * (r + 2))
            medians = {}
            for name, fit in sides.items():
                times = fit(demo_data.rows(inputs, part), targets[part])
                steps[name] += times
                medians[name] = statistics.median(times)
            ratios.append(medians["torch"] / medians["ours"])
        print(f"{task} ({LENGTHS[task]} pieces at most): ours "
              f"{statistics.median(steps['ours']):.3f} s/step, torch "
              f"{statistics.median(steps['torch']):.3f} s/step; torch / ours per round "
              + ", ".join(f"{x:.2f}" for x in ratios))


if __name__ == "__main__":
    app.run(main)
