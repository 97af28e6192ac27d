r"""Fine-tuning a real pretrained ELECTRA: ours against Hugging Face torch, and random weights.

  python bench/finetune_reference.py            # ~30 minutes on 2 cores

`../shared/models/electra-small-ref` (a real ELECTRA-Small pretrained by an independent
implementation, Hugging Face layout) is converted once, then fine-tuned on tasks built from
the bundled data, over `--seeds` seeds each:
- ours: `electra_tf.runs.finetune.finetune`, the official recipe (README "ours vs official");
- Hugging Face: the same weights in `transformers.ElectraModel` (CPU torch) with the same
  recipe written out in torch here: dropout + dense on [CLS], AdamW without bias
  correction (eps 1e-6, weight decay 0.01 except LayerNorm and biases), layer-wise decay
  0.8, 10% warmup then linear decay, the loss summed over the batch and gradients clipped
  at global norm 1.0; it reads the very input ids ours reads;
- random init: ours from random weights (same architecture, vocab and recipe).
Prints the main metric's median (min-max) per task and variant, whether ours and Hugging
Face agree within their seed spread, and writes `results.json` in `--output_dir`.

Tasks: `novel_or_speech` (a sentence from Moby-Dick or from a State of the Union address),
`sentiment` and `site` (the UCI sentences' polarity, and the site they come from).
"""

from electra_tf_cli import common

common.import_tensorflow()

import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from absl import app, flags  # noqa: E402

from electra_tf import run_dir  # noqa: E402
from electra_tf.convert import api  # noqa: E402
from electra_tf.finetuning.config import FinetuneConfig  # noqa: E402
from electra_tf.finetuning.features import Encoder  # noqa: E402
from electra_tf.runs.finetune import finetune  # noqa: E402
from electra_tf.text.sentences import split_sentences  # noqa: E402
from electra_tf.text.tokenizer import ElectraTokenizer  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
REFERENCE = ROOT.parent / "shared" / "models" / "electra-small-ref"
TASKS = ("novel_or_speech", "sentiment", "site")

FLAGS = flags.FLAGS
flags.DEFINE_list("tasks", list(TASKS), f"Tasks among {', '.join(TASKS)}.")
flags.DEFINE_integer("seeds", 3, "Fine-tuning seeds per task and variant.")
flags.DEFINE_integer("train_size", 512, "Training examples per task.")
flags.DEFINE_integer("eval_size", 256, "Evaluation examples per task.")
flags.DEFINE_integer("max_seq_length", 32, "Tokens per example.")
flags.DEFINE_integer("epochs", 2, "Fine-tuning epochs.")
flags.DEFINE_float("learning_rate", 3e-4, "Peak learning rate (the paper's Small rate).")
flags.DEFINE_string("output_dir", "runs/finetune_reference", "Runs and results.json.")


def write_jsonl(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return str(path)


def task_files(task, directory) -> tuple:
    """(train file, eval file, label field) of `task`, written into `directory`."""
    rng = random.Random(0)
    if task == "novel_or_speech":
        def sentences(paths):
            found = [s for p in paths for line in open(p, encoding="utf-8")
                     for s in split_sentences(line) if 8 <= len(s.split()) <= 30]
            rng.shuffle(found)
            return found

        novel = sentences([DEMO / "corpus" / "moby_dick.txt"])
        speech = sentences(sorted((DEMO / "corpus").glob("sotu_*.txt")))

        def rows(start, n):
            picked = ([{"text": t, "label": "novel"} for t in novel[start:start + n // 2]]
                      + [{"text": t, "label": "speech"}
                         for t in speech[start:start + n // 2]])
            rng.shuffle(picked)
            return picked

        train, evaluation = rows(0, FLAGS.train_size), rows(FLAGS.train_size,
                                                              FLAGS.eval_size)
        label = "label"
    else:
        read = lambda name: [json.loads(line) for line in  # noqa: E731
                             open(DEMO / "sentiment" / name, encoding="utf-8")]
        train = read("train.jsonl")[:FLAGS.train_size]
        evaluation = read("dev.jsonl")[:FLAGS.eval_size]
        label = "source" if task == "site" else "label"
    return (write_jsonl(directory / f"{task}_train.jsonl", train),
            write_jsonl(directory / f"{task}_eval.jsonl", evaluation), label)


def recipe(seed, label_field) -> FinetuneConfig:
    return FinetuneConfig(task="text_classification", label_field=label_field,
                          max_seq_length=FLAGS.max_seq_length, batch_size=32,
                          epochs=FLAGS.epochs, learning_rate=FLAGS.learning_rate, seed=seed)


def ours(run, train, evaluation, label_field, seed, output, random_init=False) -> float:
    results_path = os.path.join(output, "eval_results.json")
    if not os.path.isfile(results_path):
        finetune(recipe(seed, label_field), run, train, evaluation, output,
                 random_init=random_init)
    with open(results_path) as f:
        return json.load(f)["summary"]["accuracy"]["median"]


def huggingface(run, train, evaluation, label_field, seed) -> float:
    """The same recipe in torch on `transformers.ElectraModel`; dev accuracy."""
    import numpy as np
    import torch
    import transformers

    from electra_tf.finetuning import readers, tasks

    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    cfg = recipe(seed, label_field)
    task = tasks.get_task("text_classification")
    read = lambda path: readers.read_sequence_examples(task, path,  # noqa: E731
                                                       label_field=label_field)
    train_examples, eval_examples = read(train), read(evaluation)
    labels = sorted({e.label for e in train_examples})
    pretrained = run_dir.open_pretrained(run)
    encoder = Encoder(ElectraTokenizer.of_model(pretrained), pretrained.special_ids,
                      cfg.max_seq_length)

    def tensors(examples):
        inputs = encoder.encode_pairs([e.text for e in examples])
        return ({k: torch.tensor(v, dtype=torch.long) for k, v in inputs.items()},
                torch.tensor([labels.index(e.label) for e in examples]))

    (train_x, train_y), (eval_x, eval_y) = tensors(train_examples), tensors(eval_examples)
    model = transformers.ElectraModel.from_pretrained(str(REFERENCE / "discriminator"))
    head = torch.nn.Linear(model.config.hidden_size, len(labels))
    torch.nn.init.trunc_normal_(head.weight, std=0.02, a=-0.04, b=0.04)
    torch.nn.init.zeros_(head.bias)
    dropout = torch.nn.Dropout(cfg.dropout)

    layers = model.config.num_hidden_layers
    groups = []
    for name, parameter in list(model.named_parameters()) + [
            ("head." + n, p) for n, p in head.named_parameters()]:
        if name.startswith("head."):
            depth = layers + 1
        elif name.startswith("encoder.layer."):
            depth = int(name.split(".")[2]) + 1
        else:  # embeddings and their projection
            depth = 0
        decays = not ("LayerNorm" in name or name.endswith("bias"))
        groups.append({"params": [parameter], "rate": 0.8 ** (layers + 1 - depth),
                       "decays": decays})
    steps = cfg.epochs * int(np.ceil(len(train_y) / cfg.batch_size))
    warmup = int(cfg.warmup_proportion * steps)
    state = [{"m": torch.zeros_like(g["params"][0]), "v": torch.zeros_like(g["params"][0])}
             for g in groups]

    def learning_rate(step):
        decayed = cfg.learning_rate * (1 - min(step, steps) / steps)
        return decayed * min(1.0, step / warmup) if warmup else decayed

    step = 0
    for _ in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(train_y))
        for start in range(0, len(order), cfg.batch_size):
            batch = order[start:start + cfg.batch_size]
            outputs = model(input_ids=train_x["input_word_ids"][batch],
                            attention_mask=train_x["input_mask"][batch],
                            token_type_ids=train_x["input_type_ids"][batch])
            logits = head(dropout(outputs.last_hidden_state[:, 0]))
            loss = torch.nn.functional.cross_entropy(logits, train_y[batch], reduction="sum")
            model.zero_grad()
            head.zero_grad()
            loss.backward()
            parameters = [g["params"][0] for g in groups]
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            rate = learning_rate(step)
            with torch.no_grad():  # official AdamW: no bias correction, decoupled decay
                for group, slots in zip(groups, state):
                    p, g = group["params"][0], group["params"][0].grad
                    if g is None:
                        continue
                    slots["m"].mul_(0.9).add_(0.1 * g)
                    slots["v"].mul_(0.999).add_(0.001 * g * g)
                    update = slots["m"] / (slots["v"].sqrt() + 1e-6)
                    if group["decays"]:
                        update += cfg.weight_decay * p
                    p.sub_(rate * group["rate"] * update)
            step += 1
    model.eval()
    with torch.no_grad():
        hidden = model(input_ids=eval_x["input_word_ids"], attention_mask=eval_x["input_mask"],
                       token_type_ids=eval_x["input_type_ids"]).last_hidden_state[:, 0]
        predicted = head(hidden).argmax(-1)
    return float((predicted == eval_y).float().mean())


def summary(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "values": values}


def main(argv):
    del argv
    import torch

    torch.set_num_threads(os.cpu_count() or 1)
    output = pathlib.Path(FLAGS.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    run = str(output / "electra-small-ref")
    if run_dir.read_config(run) is None:
        api.from_huggingface(str(REFERENCE / "discriminator"), run,
                             generator=str(REFERENCE / "generator"))
    results = {}
    for task in FLAGS.tasks:
        train, evaluation, label_field = task_files(task, output)
        scores = {"ours": [], "huggingface": [], "random_init": []}
        for seed in range(FLAGS.seeds):
            started = time.time()
            scores["ours"].append(ours(run, train, evaluation, label_field, seed,
                                       str(output / task / f"ours_{seed}")))
            scores["huggingface"].append(huggingface(run, train, evaluation, label_field,
                                                     seed))
            scores["random_init"].append(ours(run, train, evaluation, label_field, seed,
                                              str(output / task / f"random_{seed}"),
                                              random_init=True))
            print(f"{task} seed {seed}: " + ", ".join(
                f"{k} {v[-1]:.3f}" for k, v in scores.items())
                  + f" ({time.time() - started:.0f} s)", flush=True)
        results[task] = {k: summary(v) for k, v in scores.items()}
        ours_s, hf = results[task]["ours"], results[task]["huggingface"]
        # Agreement: each median lies within the other's seed range.
        results[task]["agree"] = (hf["min"] <= ours_s["median"] <= hf["max"]
                                  or ours_s["min"] <= hf["median"] <= ours_s["max"])
    with open(output / "results.json", "w") as f:
        json.dump({"settings": {k: getattr(FLAGS, k) for k in (
            "seeds", "train_size", "eval_size", "max_seq_length", "epochs",
            "learning_rate")}, "results": results}, f, indent=2)
    print("\n| task | ours | Hugging Face (torch) | random init | agree |\n|---|---|---|---|---|")
    for task, row in results.items():
        cells = [f"{row[k]['median']:.3f} ({row[k]['min']:.3f}-{row[k]['max']:.3f})"
                 for k in ("ours", "huggingface", "random_init")]
        print(f"| {task} | " + " | ".join(cells) + f" | {'yes' if row['agree'] else 'no'} |")


if __name__ == "__main__":
    sys.modules["__main__"].__doc__ = __doc__
    app.run(common.wrap(main))
