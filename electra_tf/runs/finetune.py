"""A fine-tuning run: restore the pretrained discriminator, train a task head, evaluate.

`finetune.py` is a thin flag layer over `finetune`. The run directory's layout is
`run_dir`'s; the task's kind (`finetuning.kinds`) reads, encodes, trains and decodes.
"""

import dataclasses
import json
import os
import statistics
import sys
from typing import Optional

import keras
import numpy as np
import tensorflow as tf

from electra_tf import run_dir
from electra_tf.tf_runtime import without_autotuning
from electra_tf.errors import ConfigError, TaskDataError
from electra_tf.finetuning import tasks
from electra_tf.finetuning.config import FinetuneConfig
from electra_tf.models.finetuned import build_task_model
from electra_tf.text.tokenizer import ElectraTokenizer
from electra_tf.training import callbacks
from electra_tf.training import runtime as runtime_lib
from electra_tf.training.optimization import create_finetuning_optimizer
from electra_tf.training.runtime_options import RuntimeOptions


def _dataset(train, batch_size, seed):
    inputs, y, weights = train
    data = tf.data.Dataset.from_tensor_slices(
        (inputs, y) if weights is None else (inputs, y, weights))
    data = data.shuffle(len(inputs["input_word_ids"]), seed=seed, reshuffle_each_iteration=True)
    return without_autotuning(data.batch(batch_size).prefetch(tf.data.AUTOTUNE))


class _EvaluateAndKeep(keras.callbacks.Callback):
    """Scores the eval set with the task's official metrics and checkpoints the model kept:
    the one after the last epoch (official), or with `select_best` the epoch with the best
    main metric (scoring every epoch). An eval set without labels is only predicted. A NaN
    or infinite loss stops training; nothing after it is scored or kept."""

    def __init__(self, task, data, manager, batch_size, epochs, select_best):
        super().__init__()
        self.task, self.data, self.manager, self.batch_size = task, data, manager, batch_size
        self.epochs, self.select_best = epochs, select_best
        self.kept = None
        self.non_finite_step = None  # where the loss became NaN or infinite

    def on_train_batch_end(self, batch, logs=None):
        if not callbacks.is_finite_loss(logs) and self.non_finite_step is None:
            self.non_finite_step = int(self.model.optimizer.iterations.numpy())
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        last = epoch + 1 == self.epochs
        if self.non_finite_step is not None or not (last or self.select_best):
            return
        if not self.data.eval_examples:
            if last:
                print(f"  epoch {epoch + 1}: no evaluation data; the model is kept unscored")
                self._keep(epoch, {}, [])
            return
        outputs = self.model.predict(self.data.eval_inputs, batch_size=self.batch_size,
                                     verbose=0)
        predicted, records = self.data.predictions(outputs)
        scores = self.data.score(self.task, predicted)
        if scores is None:  # nothing to score: the last epoch's predictions
            print(f"  epoch {epoch + 1}: predicted {len(records)} unlabelled examples")
            if last:
                self._keep(epoch, {}, records)
            return
        if logs is not None:
            logs.update({f"eval_{k}": v for k, v in scores.items()})
        print(f"  epoch {epoch + 1}: " + ", ".join(f"{k} {v:.4f}" for k, v in scores.items()))
        main = self.task.main_metric
        if not self.select_best or self.kept is None or scores[main] > self.kept["scores"][
                main]:
            self._keep(epoch, scores, records)

    def _keep(self, epoch, scores, records):
        self.manager.save(checkpoint_number=epoch + 1)
        self.kept = {"epoch": epoch + 1, "scores": scores, "records": records}


def finetune(cfg: FinetuneConfig, init_checkpoint: str, train_file: Optional[str],
             eval_file: Optional[str], model_dir: str, random_init: bool = False,
             runtime: Optional[RuntimeOptions] = None, strategy=None) -> dict:
    """Runs `cfg.num_trials` fine-tuning trials; returns and writes eval_results.json.

    `random_init` keeps the pretrained run's architecture and vocab but not its weights:
    the no-pretraining baseline. `strategy` defaults to the one `runtime` names;
    `cfg.batch_size` is the global batch.
    """
    runtime = (runtime or RuntimeOptions()).validated()
    if runtime.strategy == "multi_worker":
        raise ConfigError("Fine-tuning runs on one machine: use --strategy mirrored (all "
                          "local GPUs) or tpu; multi_worker is for pretraining.")
    task = tasks.get_task(cfg.task)
    if not cfg.tfds_name and not train_file:
        raise TaskDataError("Give --train_file (and --eval_file to score), or --tfds_name (with "
                            "--data_dir) for a prepared TensorFlow Datasets dataset.")
    if not init_checkpoint:
        raise ConfigError("--init_checkpoint is required: a pretraining run directory, a "
                          "converted model, or a model name (`electra-presets`).")
    strategy = strategy or runtime_lib.create_strategy(runtime)
    pretrained = run_dir.open_pretrained(init_checkpoint)
    encoder_config = pretrained.config
    cfg = cfg.resolved(encoder_config, task)
    if cfg.max_seq_length > encoder_config.max_position_embeddings:
        raise ConfigError(f"--max_seq_length={cfg.max_seq_length} exceeds the encoder's "
                          f"{encoder_config.max_position_embeddings} positions.")

    kind = task.kind
    train_examples = kind.read_examples(task, cfg, cfg.train_split if cfg.tfds_name
                                        else train_file, training=True)
    # Without --eval_file the model is trained and kept, and nothing is scored.
    eval_examples = kind.read_examples(task, cfg, cfg.eval_split if cfg.tfds_name
                                       else eval_file, training=False) if (
        cfg.tfds_name or eval_file) else []
    labels = kind.labels(task, train_examples, cfg)
    kind.check_labels(eval_examples, labels, cfg)
    tokenizer = ElectraTokenizer(pretrained.vocab_path, encoder_config.lower_case,
                                 encoder_config.strip_accents)
    data = kind.prepare(task, cfg, tokenizer, pretrained.special_ids, train_examples,
                        eval_examples, labels)
    sequences = len(data.train[0]["input_word_ids"])  # QA: a question's context windows
    if cfg.batch_size > sequences:
        print(f"warning: --batch_size={cfg.batch_size} is larger than the {sequences} "
              "training sequences: each epoch is one smaller step; lower --batch_size.",
              file=sys.stderr)
    model_info = {"class_name": kind.model_class,
                  "head_config": kind.head_config(task, labels, cfg,
                                                  encoder_config.initializer_range, data)}
    run_dir.write_finetuning_setup(
        model_dir, dataclasses.asdict(cfg), pretrained, labels,
        {"task": task.name, "kind": kind.name, "text_pairs": data.text_pairs,
         "model": model_info, **kind.task_info(task, cfg)})

    trials = []
    for trial in range(cfg.num_trials):
        print(f"Trial {trial + 1}/{cfg.num_trials} (seed {cfg.seed + trial})")
        with strategy.scope():
            trials.append(_run_trial(cfg, task, data, None if random_init else pretrained,
                                     encoder_config, model_info,
                                     run_dir.trial_dir(model_dir, trial), cfg.seed + trial,
                                     runtime))
    scored = all(trial["scores"] for trial in trials)
    best_trial = max(range(len(trials)),
                     key=lambda t: trials[t]["scores"][task.main_metric] if scored else 0)
    records = trials[best_trial]["records"]
    if eval_examples:
        _write_predictions(model_dir, kind, data, eval_examples, records)
    for trial in trials:
        trial.pop("records", None)
    results = {"task": task.name, "main_metric": task.main_metric,
               # Which epoch each trial reports (and keeps for export).
               "selection": "best_epoch" if cfg.select_best_epoch else "last_epoch",
               "trials": trials, "best_trial": best_trial,
               "summary": _summary(trials) if scored else {}}
    run_dir.write_json(model_dir, run_dir.EVAL_RESULTS_FILE, results)
    return results


def _write_predictions(model_dir, kind, data, eval_examples, records) -> None:
    with open(os.path.join(model_dir, run_dir.PREDICTIONS_FILE), "w", encoding="utf-8") as f:
        for example, record in zip(eval_examples, records):
            f.write(json.dumps({**data.describe(example), **record}, ensure_ascii=False) + "\n")
    for name, value in kind.prediction_files(data, records).items():
        run_dir.write_json(model_dir, name, value)


def _run_trial(cfg, task, data, pretrained, encoder_config, model_info, trial_dir, seed,
               runtime):
    keras.utils.set_random_seed(seed)
    with runtime_lib.precision(runtime.mixed_precision):
        encoder = run_dir.load_encoder(pretrained, encoder_config, cfg.dropout)
        model = build_task_model(model_info["class_name"], encoder, model_info["head_config"])
        model({k: v[:1] for k, v in data.train[0].items()})  # builds the head
    # The kernels the flags leave unset, `fit` chooses (by the inputs' length); it swaps
    # them in for its run, callbacks included, and out again for the kept model.
    model.training_kernels = runtime
    steps = cfg.epochs * int(np.ceil(len(data.train[0]["input_word_ids"]) / cfg.batch_size))
    optimizer = create_finetuning_optimizer(
        model, encoder, steps, cfg.learning_rate, cfg.layerwise_decay, cfg.warmup_proportion,
        cfg.weight_decay, cfg.adam_bias_correction, cfg.official_layerwise_decay_bug)
    loss, loss_weights = task.kind.loss(task, cfg)
    model.compile(optimizer=runtime_lib.wrap_optimizer(optimizer, runtime.mixed_precision),
                  loss=loss, loss_weights=loss_weights, jit_compile=runtime.jit_compile)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model),
                                         os.path.join(trial_dir, run_dir.KEPT_MODEL_DIR),
                                         max_to_keep=1)
    keeper = _EvaluateAndKeep(task, data, manager, cfg.batch_size, cfg.epochs,
                              cfg.select_best_epoch)
    model.fit(_dataset(data.train, cfg.batch_size, seed), epochs=cfg.epochs, verbose=2,
              shuffle=False,  # the dataset shuffles itself, seeded
              callbacks=[keeper, keras.callbacks.TensorBoard(os.path.join(trial_dir, "logs"))])
    if keeper.non_finite_step is not None:
        raise callbacks.NonFiniteLoss(
            keeper.non_finite_step, manager.latest_checkpoint,
            "Fine-tune again with a lower --learning_rate (or bf16 instead of fp16).")
    return {"seed": seed, "epoch": keeper.kept["epoch"], "scores": keeper.kept["scores"],
            "checkpoint": manager.latest_checkpoint, "records": keeper.kept["records"]}


def _summary(trials):
    summary = {}
    for metric in trials[0]["scores"]:
        values = [t["scores"][metric] for t in trials]
        summary[metric] = {"median": statistics.median(values), "min": min(values),
                           "max": max(values),
                           "std": statistics.pstdev(values) if len(values) > 1 else 0.0}
    return summary
