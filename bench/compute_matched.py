r"""ELECTRA against BERT-style MLM at the same pretraining FLOPs, then fine-tuned (paper Table 5).

  pip install -r requirements-plots.txt           # matplotlib, once
  python bench/compute_matched.py                 # electra, electra_gdes, mlm: ~110 min
  python bench/compute_matched.py --objectives electra,mlm,electra_15,replace_mlm,all_tokens_mlm

`electra_gdes` is ELECTRA with DeBERTa-v3's gradient-disentangled embedding sharing
(`--tie_embeddings gdes`) instead of the shared embedding block; its FLOPs per step are
ELECTRA's.

The paper's headline comparison in miniature on this machine:
1. one vocab and one set of 128-token shards from the bundled corpus (`data/demo/corpus`);
2. for each objective, one pretraining run of the same encoder (`--num_layers` layers of
   ELECTRA-Small's width) stopped at the same training-FLOPs budget (`pretrain.py
   --train_flops`, counted like the official `flops_computation.py`), with checkpoints at
   every quarter of it;
3. at each budget point of `--budget_points`, the run's encoder fine-tuned on the bundled
   sentiment sentences over `--seeds` seeds (the official small recipe, length 64), and the
   same recipe from a randomly initialised encoder (no pretraining);
4. a table like the paper's (objective, FLOPs, dev accuracy median and spread), written
   with every number to `results.json`, and a plot of dev accuracy against pretraining
   FLOPs (`compute_matched.png`).

Every run directory is kept under `--output_dir`: re-running resumes unfinished
pretraining and reuses finished fine-tuning results. The recipe (flags below) is fixed
before looking at results and is the same for every objective.
"""

from electra_tf_cli import common

common.import_tensorflow()

import json  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import time  # noqa: E402

from absl import flags  # noqa: E402

from electra_tf import files  # noqa: E402
from electra_tf.config import ElectraConfig  # noqa: E402
from electra_tf.data import build_pretraining_data as builder  # noqa: E402
from electra_tf.errors import ConfigError, check_choice  # noqa: E402
from electra_tf.finetuning.config import FinetuneConfig  # noqa: E402
from electra_tf.pretraining import flops  # noqa: E402
from electra_tf.pretraining.objectives import OBJECTIVES  # noqa: E402
from electra_tf.runs import finetune as finetuning  # noqa: E402
from electra_tf.runs import pretrain as pretraining  # noqa: E402
from electra_tf.text import vocab as vocab_lib  # noqa: E402

import plots  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
QUARTERS = 4  # checkpoints at every quarter of the budget

FLAGS = flags.FLAGS
flags.DEFINE_string("output_dir", "runs/compute_matched", "Where runs and results go.")
# Runs besides the objectives: (objective, config overrides).
VARIANTS = {"electra_gdes": ("electra", {"tie_embeddings": "gdes"})}
flags.DEFINE_list("objectives", ["electra", "electra_gdes", "mlm"],
                  f"Runs to compare: objectives ({', '.join(OBJECTIVES)}) or "
                  f"{', '.join(VARIANTS)}.")
flags.DEFINE_float("budget_flops", 6e13, "Pretraining budget per objective, in training "
                   "FLOPs (official convention). The default is 660 ELECTRA steps of "
                   "32 x 128 with the default model and vocab (831 MLM steps).")
flags.DEFINE_list("budget_points", ["0.5", "1"], "Fractions of the budget (multiples of 1/4) "
                  "at which each run's encoder is fine-tuned.")
flags.DEFINE_integer("seeds", 3, "Fine-tuning seeds per point.")
flags.DEFINE_integer("num_layers", 4, "Encoder depth (width is ELECTRA-Small's).")
flags.DEFINE_integer("vocab_size", 8192, "WordPiece vocab learned from the corpus.")
flags.DEFINE_integer("batch_size", 32, "Pretraining batch.")
flags.DEFINE_float("learning_rate", 2e-4, "Pretraining peak learning rate.")
flags.DEFINE_float("warmup_fraction", 1 / 3, "Pretraining warmup, as a fraction of each "
                   "run's steps (a short run at 5e-4 with a short warmup collapses; README).")
flags.DEFINE_string("corpus", str(DEMO / "corpus" / "*.txt"), "Pretraining text.")
flags.DEFINE_string("train_file", str(DEMO / "sentiment" / "train.jsonl"), "Fine-tuning set.")
flags.DEFINE_string("eval_file", str(DEMO / "sentiment" / "dev.jsonl"), "Dev set.")


def budget_quarters() -> list:
    quarters = []
    for point in FLAGS.budget_points:
        quarter = float(point) * QUARTERS
        if abs(quarter - round(quarter)) > 1e-9 or not 1 <= round(quarter) <= QUARTERS:
            raise ConfigError(f"--budget_points {point}: use multiples of 1/{QUARTERS} in "
                              f"(0, 1], e.g. 0.25,0.5,1.")
        quarters.append(round(quarter))
    return sorted(set(quarters))


def shared_data(output_dir: str) -> tuple:
    """(vocab path, shard pattern) built once from the corpus for every objective."""
    data_dir = os.path.join(output_dir, "data")
    vocab_path = os.path.join(data_dir, "vocab.txt")
    if not os.path.isfile(vocab_path):
        os.makedirs(data_dir, exist_ok=True)
        vocab_lib.build_vocab(FLAGS.corpus, vocab_path, FLAGS.vocab_size, lower_case=True)
    manifest = builder.load_manifest(data_dir)
    if manifest is None:
        manifest = builder.build_pretraining_data(
            FLAGS.corpus, data_dir, builder.BuildOptions(vocab_path=vocab_path), num_shards=4)
    return vocab_path, manifest["file_pattern"]


def base_config(name: str) -> ElectraConfig:
    """The config of run `name` (an objective or a VARIANTS name), before its steps."""
    objective, overrides = VARIANTS.get(name, (name, {}))
    return ElectraConfig.preset(
        "small", objective=objective, num_layers=FLAGS.num_layers,
        batch_size=FLAGS.batch_size, learning_rate=FLAGS.learning_rate, keep_checkpoints=10,
        **overrides)


def pretrain(objective: str, vocab_path: str, pattern: str) -> tuple:
    """Pretrains `objective` to the budget; returns (config, {quarter: checkpoint step},
    the run's results)."""
    model_dir = os.path.join(FLAGS.output_dir, objective)
    inputs = pretraining.RunInputs(model_dir=model_dir, data=pattern, vocab=vocab_path)
    # Steps, warmup and checkpoint spacing all follow from the budget: resolve the steps
    # first (they need the vocab size), then fix the rest before the run starts.
    vocab_size = len(vocab_lib.load_vocab(vocab_path))
    steps = flops.steps_for_budget(base_config(objective).replace(vocab_size=vocab_size),
                                   FLAGS.budget_flops)
    config = base_config(objective).replace(
        train_steps=steps, warmup_steps=max(1, round(steps * FLAGS.warmup_fraction)),
        checkpoint_every=max(1, steps // QUARTERS))
    config, pattern = pretraining.prepare_run(config, inputs)
    if config.train_steps != steps:
        raise ConfigError(f"{model_dir}: the vocab changed the step count; remove the run.")
    started = time.time()
    results = pretraining.train(config, model_dir, pattern, eval_batches=20, verbose=2)
    print(f"{objective}: {steps} steps, {results['train_flops']:.3g} FLOPs, "
          f"{time.time() - started:.0f} s, eval {results['eval']}")
    points = {q: q * config.checkpoint_every for q in range(1, QUARTERS)}
    points[QUARTERS] = steps
    return config, points, results


def finetune(name: str, init_checkpoint: str, random_init: bool) -> dict:
    """Median/min/max/std dev accuracy over the seeds (cached in the run's results)."""
    model_dir = os.path.join(FLAGS.output_dir, "finetune", name)
    results_path = os.path.join(model_dir, "eval_results.json")
    if not os.path.isfile(results_path):
        cfg = FinetuneConfig(task="text_classification", max_seq_length=64,
                                        num_trials=FLAGS.seeds)
        finetuning.finetune(cfg, init_checkpoint, FLAGS.train_file, FLAGS.eval_file,
                            model_dir, random_init=random_init)
    with open(results_path, encoding="utf-8") as f:
        results = json.load(f)
    summary = results["summary"]["accuracy"]
    return {**summary, "all": [t["scores"]["accuracy"] for t in results["trials"]]}


def plot(rows: list, baseline: dict, path: str) -> None:
    plt = plots.pyplot()
    figure, axes = plt.subplots(figsize=(7, 4.5))
    for objective in dict.fromkeys(row["objective"] for row in rows):
        mine = [row for row in rows if row["objective"] == objective]
        x = [row["train_flops"] for row in mine]
        median = [row["accuracy"]["median"] for row in mine]
        spread = [[m - row["accuracy"]["min"] for m, row in zip(median, mine)],
                  [row["accuracy"]["max"] - m for m, row in zip(median, mine)]]
        axes.errorbar(x, median, yerr=spread, marker="o", capsize=3, label=objective)
    axes.axhline(baseline["median"], color="grey", linestyle="--",
                 label=f"no pretraining ({baseline['median']:.3f})")
    axes.axhspan(baseline["min"], baseline["max"], color="grey", alpha=0.15)
    axes.set_xscale("log")
    axes.set_xlabel("pretraining FLOPs (official convention)")
    axes.set_ylabel(f"dev accuracy, median of {FLAGS.seeds} seeds (min-max)")
    axes.set_title("Sentiment dev accuracy against pretraining compute")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def print_table(rows: list, baseline: dict) -> None:
    print(f"\n{'objective':<16}{'budget':>8}{'steps':>8}{'train FLOPs':>13}"
          f"{'pretraining metric':>28}   dev accuracy median (min-max)")
    for row in rows:
        accuracy = row["accuracy"]
        print(f"{row['objective']:<16}{row['fraction']:>8.2f}{row['step']:>8}"
              f"{row['train_flops']:>13.3g}{row['pretraining_metric']:>28}   "
              f"{accuracy['median']:.3f} ({accuracy['min']:.3f}-{accuracy['max']:.3f})")
    print(f"{'none':<16}{'-':>8}{'-':>8}{0:>13}{'-':>28}   {baseline['median']:.3f} "
          f"({baseline['min']:.3f}-{baseline['max']:.3f})")


def main(argv):
    del argv
    started = time.time()
    plots.pyplot()  # fails now, not after hours of runs
    for objective in FLAGS.objectives:
        check_choice("--objectives", objective, (*OBJECTIVES, *VARIANTS))
    quarters = budget_quarters()
    os.makedirs(FLAGS.output_dir, exist_ok=True)
    vocab_path, pattern = shared_data(FLAGS.output_dir)

    rows, pretraining_runs = [], {}
    for objective in FLAGS.objectives:
        config, points, results = pretrain(objective, vocab_path, pattern)
        pretraining_runs[objective] = {"steps": config.train_steps,
                                       "flops_per_step": results["flops_per_step"],
                                       "eval": results["eval"]}
        metric = ("disc_auc", "main_acc")["disc_auc" not in results["eval"]]
        for quarter in quarters:
            step = points[quarter]
            checkpoint = os.path.join(FLAGS.output_dir, objective, "checkpoints",
                                      f"ckpt-{step}")
            rows.append({"objective": objective, "fraction": quarter / QUARTERS,
                         "step": step, "train_flops": step * results["flops_per_step"],
                         "pretraining_metric": f"{metric} {results['eval'][metric]:.3f} "
                                               f"(end)" if quarter == QUARTERS else "",
                         "accuracy": finetune(f"{objective}_q{quarter}", checkpoint, False)})
    first_run = os.path.join(FLAGS.output_dir, FLAGS.objectives[0])
    baseline = finetune("random_init", first_run, random_init=True)

    print_table(rows, baseline)
    plot_path = os.path.join(FLAGS.output_dir, "compute_matched.png")
    plot(rows, baseline, plot_path)
    files.write_json(os.path.join(FLAGS.output_dir, "results.json"), {
        "budget_flops": FLAGS.budget_flops, "seeds": FLAGS.seeds,
        "model": {"num_layers": FLAGS.num_layers, "hidden_size": 256, "vocab_size":
                  FLAGS.vocab_size, "batch_size": FLAGS.batch_size, "max_seq_length": 128,
                  "learning_rate": FLAGS.learning_rate,
                  "warmup_fraction": FLAGS.warmup_fraction},
        "pretraining": pretraining_runs, "rows": rows, "no_pretraining": baseline,
        "wall_seconds": round(time.time() - started)})
    print(f"\nResults: {FLAGS.output_dir}/results.json, plot: {plot_path} "
          f"({(time.time() - started) / 60:.0f} min)")


if __name__ == "__main__":
    from absl import app

    app.run(common.wrap(main))
