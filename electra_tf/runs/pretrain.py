"""A pretraining run: run directory, vocab, data, model, checkpoints, `fit`, final metrics.

`pretrain.py` is a thin flag layer over `prepare_run` and `train`; the run directory's
layout is `run_dir`'s.
"""

import dataclasses
import math
import os
import shutil
import sys
import time
from typing import Optional, Union

import keras
import tensorflow as tf

from electra_tf import files, run_dir
from electra_tf.callbacks import DownstreamProbe, ProbeOptions, default_probe_every
from electra_tf.config import GENERATOR_FIELDS, MODEL_FIELDS, PRESETS, ElectraConfig
from electra_tf.convert.resolve import resolve
from electra_tf.data import build_pretraining_data as builder
from electra_tf.data.dataset import pretraining_dataset
from electra_tf.errors import ConfigError
from electra_tf.pretraining import flops, objectives
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.text import vocab as vocab_lib
from electra_tf.text.tokenizer import ElectraTokenizer
from electra_tf.training import callbacks
from electra_tf.training import runtime as runtime_lib
from electra_tf.training.optimization import create_pretraining_optimizer
from electra_tf.training.runtime_options import RuntimeOptions


@dataclasses.dataclass
class RunInputs:
    """Where a run's text comes from and how its vocab is made."""

    model_dir: str
    corpus: Optional[str] = None  # raw text globs: vocab and shards are built from it
    data: Optional[str] = None  # prebuilt TFRecord shards
    vocab: Optional[str] = None  # an existing vocab file
    vocab_size: int = ElectraConfig.vocab_size  # the most a learned vocab may hold
    num_shards: int = 4
    num_processes: int = 1
    # A model to start from: any source `electra_tf.resolve` takes, or one `open_initial`
    # opened already. It brings its architecture, vocab and weights; the recipe stays
    # the config's.
    init_checkpoint: Union[str, run_dir.Pretrained, None] = None
    init_name: Optional[str] = None  # how the user named it (default: init_checkpoint)


def open_initial(spec: str) -> run_dir.Pretrained:
    """The model a new run starts from (any source `electra_tf.resolve` takes), opened."""
    return run_dir.open_pretrained(resolve(spec))


def initial_config(initial: run_dir.Pretrained, overrides: dict,
                   preset: Optional[str] = None, name: str = "") -> ElectraConfig:
    """The config of a run that starts from `initial` (named `name` in errors): the recipe
    of `preset` (default: the preset of the model's size, else "small") with `overrides`,
    and the model's architecture and vocab. Overrides that would change the model it
    brings are refused."""
    brought = MODEL_FIELDS + (GENERATOR_FIELDS if initial.parts()["generator"] else ())
    clashing = sorted(set(overrides) & set(brought))
    if clashing:
        raise ConfigError(f"--init_checkpoint {name or initial.checkpoint} brings its "
                          f"model's {', '.join(clashing)}: drop "
                          + ", ".join(f"--{field}" for field in clashing) + ".")
    if preset is None:
        preset = initial.config.preset_name
        preset = preset if preset in PRESETS else "small"
    return with_initial_model(ElectraConfig.preset(preset, **overrides), initial)


def with_initial_model(config: ElectraConfig, initial: run_dir.Pretrained) -> ElectraConfig:
    """`config`'s recipe with `initial`'s architecture and tokenization, and its generator's
    shape when it has a generator."""
    with_generator = initial.parts()["generator"]
    if config.tie_embeddings == "gdes" and not with_generator:
        raise ConfigError(f"{initial.directory} has no generator: --tie_embeddings gdes "
                          "needs one trained with it (its word matrix is the shared one). "
                          "Start from a gdes run, or drop --tie_embeddings.")
    fields = MODEL_FIELDS + (GENERATOR_FIELDS if with_generator else ())
    return config.replace(**{field: getattr(initial.config, field) for field in fields})


def prepare_run(config: ElectraConfig, inputs: RunInputs,
                train_flops: Optional[float] = None) -> tuple:
    """Creates/validates the run directory; returns (final config, TFRecord file pattern).

    `train_flops` replaces `config.train_steps` by the most steps that fit in that many
    training FLOPs (`flops.steps_for_budget`; known once the vocab size is). With
    `inputs.init_checkpoint` the model's architecture and vocab replace `config`'s
    (`with_initial_model`) and `train` starts from its weights.
    """
    if not (inputs.corpus or inputs.data):
        raise ConfigError("Give the text to pretrain on: --corpus 'texts/*.txt' (raw text) "
                          "or --data 'shards/*.tfrecord' (built with "
                          "electra_tf.data.build_pretraining_data).")
    os.makedirs(inputs.model_dir, exist_ok=True)
    saved = run_dir.read_config(inputs.model_dir)
    vocab = inputs.vocab
    recorded = run_dir.read_json(inputs.model_dir, run_dir.INIT_FILE)
    if saved is not None and recorded and not inputs.init_checkpoint:
        raise ConfigError(f"{inputs.model_dir} holds a run started from "
                          f"{recorded['init_checkpoint']}: resume it with --init_checkpoint "
                          f"{recorded['init_checkpoint']} and the same flags.")
    if inputs.init_checkpoint:
        if inputs.vocab:
            raise ConfigError("--init_checkpoint brings its model's vocab: drop --vocab.")
        initial = _record_initial(inputs, saved is not None, recorded)
        config, vocab = with_initial_model(config, initial), initial.vocab_path
    vocab_path = os.path.join(inputs.model_dir, run_dir.VOCAB_FILE)
    if vocab:
        tokens = vocab_lib.load_vocab(vocab)
        if os.path.abspath(vocab) != os.path.abspath(vocab_path):
            if os.path.isfile(vocab_path) and vocab_lib.load_vocab(vocab_path) != tokens:
                raise ConfigError(
                    f"{inputs.model_dir} already holds a run with a different vocab; use a "
                    "new --model_dir or drop --vocab to resume with the run's own vocab.")
            # Atomically: the workers of a multi-worker run copy it at the same time, and
            # each reads what the others may be writing (the check above).
            with open(vocab, encoding="utf-8", newline="") as f:
                files.write_text(vocab_path, f.read())
    elif os.path.isfile(vocab_path):
        tokens = vocab_lib.load_vocab(vocab_path)
    elif inputs.corpus:
        tokens = vocab_lib.build_vocab(inputs.corpus, vocab_path, inputs.vocab_size,
                                       config.lower_case, config.strip_accents)
    else:
        raise ConfigError("--data needs the vocab its shards were built with: pass --vocab.")
    config = config.replace(vocab_size=len(tokens), **vocab_lib.special_token_ids(tokens))
    if train_flops:
        config = config.replace(train_steps=flops.steps_for_budget(config, train_flops))

    if saved is not None:
        differences = saved.differences(config)
        if differences:
            shown = ", ".join(f"{k}: run has {a!r}, requested {b!r}"
                              for k, (a, b) in sorted(differences.items()))
            raise ConfigError(
                f"{inputs.model_dir} holds a run with a different config ({shown}); pass the "
                "same flags to resume it, or choose a new --model_dir.")
    run_dir.write_config(inputs.model_dir, config)
    if config.warmup_steps >= config.train_steps:
        print(f"warning: --warmup_steps={config.warmup_steps} >= --train_steps="
              f"{config.train_steps}: the learning rate never leaves its warmup (it stays below "
              f"{config.train_steps / max(config.warmup_steps, 1):.2%} of --learning_rate); "
              "lower --warmup_steps.", file=sys.stderr)

    if inputs.data:
        return config, inputs.data
    return config, _build_data(config, inputs, vocab_path)


def _record_initial(inputs: RunInputs, run_exists: bool,
                    recorded: Optional[dict]) -> run_dir.Pretrained:
    """Opens the model a run starts from and records it in the run directory (`recorded`:
    what is recorded there already); a run already there must have started from the same
    one."""
    initial = inputs.init_checkpoint
    opened = isinstance(initial, run_dir.Pretrained)
    name = inputs.init_name or (initial.directory if opened else initial)
    if run_exists and (recorded or {}).get("init_checkpoint") != name:
        started = (f"from {recorded['init_checkpoint']}" if recorded
                   else "without --init_checkpoint")
        raise ConfigError(f"{inputs.model_dir} holds a run started {started}; resume it with "
                          "the same flags, or choose a new --model_dir.")
    if not opened:
        initial = open_initial(initial)
    run_dir.write_json(inputs.model_dir, run_dir.INIT_FILE,
                       {"init_checkpoint": name,
                        "checkpoint": os.path.abspath(initial.checkpoint)})
    return initial


def _build_data(config, inputs, vocab_path) -> str:
    """Builds shards from the corpus once; reuses them when built with the same options."""
    options = builder.BuildOptions(
        vocab_path=vocab_path, max_seq_length=config.max_seq_length,
        lower_case=config.lower_case, strip_accents=config.strip_accents)
    data_dir = os.path.join(inputs.model_dir, run_dir.DATA_DIR)
    manifest = builder.load_manifest(data_dir)
    if (manifest is None or _without_seed(manifest["options"]) != _without_seed(
            dataclasses.asdict(options))
            or manifest["vocab_sha256"] != builder.file_sha256(vocab_path)):
        manifest = builder.build_pretraining_data(
            inputs.corpus, data_dir, options, inputs.num_shards, inputs.num_processes)
        print(f"Built {manifest['num_examples']} examples "
              f"({manifest['examples_per_second']} examples/s).")
    return manifest["file_pattern"]


def _without_seed(options: dict) -> dict:
    # Runs built their shards with the run's seed before they took the builder's: their
    # shards stay valid, and a resumed run keeps reading them.
    return {k: v for k, v in options.items() if k != "seed"}


def build_model(config: ElectraConfig, runtime: Optional[RuntimeOptions] = None):
    """(model, optimizer), compiled and built, in the current strategy's scope.

    `optimizer` is the AdamW that checkpoints hold; under fp16 the model's optimizer wraps
    it for loss scaling (the scale is not saved: it re-adapts within a few steps).
    """
    runtime = runtime or RuntimeOptions()
    on_cpu = runtime_lib.cpu_bfloat16(runtime.mixed_precision == "bf16")
    runtime = runtime.for_run(few_shapes=True, cpu_bfloat16=on_cpu)
    with runtime_lib.precision(runtime.mixed_precision):
        model = ElectraPretrainer(config, activation=runtime.encoder_activation)
        model.build_all()
    runtime_lib.use_training_kernels(model, runtime)
    model.training_kernels = runtime  # for its `fit`: the run's choice, for good
    optimizer = create_pretraining_optimizer(config, model)
    # steps_per_execution stays 1: larger values crash under MirroredStrategy (keras#19246).
    model.compile(optimizer=runtime_lib.wrap_optimizer(optimizer, runtime.mixed_precision),
                  jit_compile=runtime.jit_compile)
    model.optimizer.build(model.trainable_variables)
    return model, optimizer


def train(config: ElectraConfig, model_dir: str, file_pattern: str, eval_batches: int = 20,
          verbose: int = 1, runtime: Optional[RuntimeOptions] = None,
          strategy=None, extra_callbacks=(), probe: Optional[ProbeOptions] = None) -> dict:
    """Trains to `config.train_steps` (resuming from the latest checkpoint), then evaluates
    `eval_batches` batches (0: no evaluation); returns the results (pretrain_results.json).

    `strategy` defaults to the one `runtime.strategy` names. Under several workers only the
    chief writes checkpoints, logs and results (the others write theirs to a scratch
    directory that is removed). SIGTERM saves a checkpoint and raises
    `callbacks.Preempted`; a NaN or infinite loss stops the run before anything saves the
    damaged weights and raises `callbacks.NonFiniteLoss`. `extra_callbacks` (Keras
    callbacks: your own logging, ...) run after ours. `verbose=1` shows a progress bar per
    checkpoint interval on a terminal and one line per interval elsewhere (a log file).
    """
    runtime = (runtime or RuntimeOptions()).validated()
    strategy = strategy or runtime_lib.create_strategy(runtime)
    replicas = strategy.num_replicas_in_sync
    if config.batch_size % (replicas * config.grad_accum_steps):
        raise ConfigError(
            f"batch_size={config.batch_size} (the global batch) must split evenly over "
            f"{replicas} replicas x grad_accum_steps={config.grad_accum_steps}.")
    chief = runtime_lib.is_chief(strategy)
    flops_per_step = flops.training_flops_per_step(config)
    run_checkpoints = run_dir.checkpoints_dir(model_dir)
    checkpoint_dir = run_checkpoints if chief else os.path.join(
        run_checkpoints, f".worker_{runtime_lib.worker_id(strategy)}")

    keras.utils.set_random_seed(config.seed)
    with strategy.scope():
        model, optimizer = build_model(config, runtime)
        checkpoint = run_dir.pretraining_checkpoint(model, optimizer)
        manager = tf.train.CheckpointManager(checkpoint, checkpoint_dir,
                                             max_to_keep=config.keep_checkpoints)
        restore_from = run_dir.latest_checkpoint(model_dir)
        initial = run_dir.read_json(model_dir, run_dir.INIT_FILE)
        if restore_from:
            if "optimizer" in run_dir.saved_objects(restore_from):
                checkpoint.restore(restore_from).assert_existing_objects_matched()
            else:  # converted weights (electra_tf.convert): continue with a new optimizer
                print(f"Continuing pretraining from the weights in {restore_from}.")
                pretrained = run_dir.open_pretrained(restore_from)
                run_dir.restore_pretrainer(model, pretrained, pretrained.parts())
        elif initial:
            _start_from(model, initial)
    start_step = int(optimizer.iterations.numpy())
    if start_step:
        print(f"Resuming from {restore_from} at step {start_step}.")

    data_options = dict(batch_size=config.batch_size, max_seq_length=config.max_seq_length,
                        noise_width=model.noise_width)
    history, prober, probed_before, probe_share = {}, None, 0.0, None
    if start_step < config.train_steps:
        steps_per_epoch = min(config.checkpoint_every, config.train_steps)
        dataset = pretraining_dataset(file_pattern, training=True,
                                      seed=config.seed + start_step, **data_options)
        checkpointer = callbacks.CheckpointEvery(manager, config.checkpoint_every)
        with strategy.scope():
            preemption = callbacks.SaveOnPreemption(manager, strategy)
        run_callbacks = [callbacks.StopAtStep(config.train_steps), checkpointer, preemption,
                         callbacks.StepsProgbar(steps_per_epoch, config.train_steps)]
        if verbose == 1 and not (sys.stdout.isatty() or "ipykernel" in sys.modules):
            verbose = 2  # a log file gets a line per interval, not the bar's terminal codes
        if chief:
            log_every = max(1, steps_per_epoch // 10)
            logs = os.path.join(model_dir, run_dir.LOGS_DIR)
            run_callbacks += [keras.callbacks.TensorBoard(logs, update_freq=log_every),
                              callbacks.LogTrainFlops(os.path.join(logs, "train"),
                                                      flops_per_step, log_every)]
            if probe:
                prober = _probe_callback(probe, config, model_dir, logs)
                probed_before = prober.seconds
                run_callbacks.append(prober)
        started = time.time()
        try:
            history = model.fit(
                dataset, steps_per_epoch=steps_per_epoch, shuffle=False,
                epochs=math.ceil(config.train_steps / steps_per_epoch),
                initial_epoch=start_step // steps_per_epoch, verbose=verbose if chief else 0,
                callbacks=run_callbacks + list(extra_callbacks)).history
        finally:
            preemption.close()
        elapsed = time.time() - started
        if prober:  # the speed is training's
            probe_share = (prober.seconds - probed_before) / elapsed
            elapsed -= prober.seconds - probed_before
        steps = int(optimizer.iterations.numpy()) - start_step
        tokens_per_second = steps * config.batch_size * config.max_seq_length / elapsed
        if preemption.preempted:
            _remove_scratch(chief, checkpoint_dir)
            raise callbacks.Preempted(int(optimizer.iterations.numpy()),
                                          manager.latest_checkpoint)
        if checkpointer.non_finite_step is not None:
            _remove_scratch(chief, checkpoint_dir)
            raise callbacks.NonFiniteLoss(
                checkpointer.non_finite_step, manager.latest_checkpoint,
                "Run the same command with a lower --learning_rate (or bf16 instead of "
                "fp16) to resume from it.")
    else:
        tokens_per_second = None
        print(f"The run is already at step {start_step} >= train_steps={config.train_steps}.")

    metrics = {}
    if eval_batches:
        # Full batches, as in training: with the same static shapes the evaluation reuses
        # the training graph's compiled XLA kernels (a partial batch at the end of the data
        # left the batch size unknown and compiled them all again: ~1 s per run).
        eval_data = pretraining_dataset(file_pattern, training=False, seed=config.seed,
                                        **data_options).repeat().rebatch(
                                            config.batch_size, drop_remainder=True)
        metrics = model.evaluate(eval_data, steps=eval_batches, verbose=0, return_dict=True)
    step = int(optimizer.iterations.numpy())
    results = {"step": step,
               "objective": config.objective,
               # Forward + backward, counted like the official flops_computation.py.
               "train_flops": step * flops_per_step,
               "flops_per_step": flops_per_step,
               "eval": {k: round(float(v), 4) for k, v in metrics.items()},
               "train_tokens_per_second": tokens_per_second and round(tokens_per_second, 1),
               "replicas": replicas,
               # The metrics of each fit epoch (one epoch = checkpoint_every steps).
               "train_history": {k: [round(float(x), 6) for x in v]
                                 for k, v in history.items()},
               "checkpoint": tf.train.latest_checkpoint(run_checkpoints)}
    probed = run_dir.read_json(model_dir, run_dir.PROBE_FILE) if probe else None
    if probed:
        results["probe"] = {**probed, "share_of_training": probe_share and round(probe_share, 4)}
    _remove_scratch(chief, checkpoint_dir)
    if chief:
        run_dir.write_json(model_dir, run_dir.RESULTS_FILE, results)
    return results


def _probe_callback(probe: ProbeOptions, config: ElectraConfig, model_dir: str,
                    logs: str) -> DownstreamProbe:
    """The run's `DownstreamProbe`, its history resumed from the run directory."""
    tokenizer = ElectraTokenizer(os.path.join(model_dir, run_dir.VOCAB_FILE),
                                 lowercase=config.lower_case,
                                 strip_accents=config.strip_accents)
    task = probe.read(tokenizer, config.seed)
    every = probe.every or default_probe_every(config, task)
    length = task.train_inputs["input_word_ids"].shape[1]
    print(f"Probing {probe.task_file} ({len(task.train_labels)} examples to fit, "
          f"{len(task.eval_labels)} to score, {length} tokens) every {every} steps.")
    return DownstreamProbe(task, every, os.path.join(logs, "probe"),
                           os.path.join(model_dir, run_dir.PROBE_FILE), seed=config.seed)


def _remove_scratch(chief: bool, checkpoint_dir: str) -> None:
    """Non-chief workers' checkpoints only serve the collective save; drop them."""
    if not chief:
        shutil.rmtree(checkpoint_dir, ignore_errors=True)


def _start_from(model, initial: dict) -> None:
    """Loads the weights of the model a new run starts from (`init_checkpoint.json`); the
    parts it cannot give start fresh, with a warning."""
    pretrained = run_dir.open_pretrained(initial["checkpoint"])
    name = initial["init_checkpoint"]
    parts = _transferable_parts(model, pretrained)
    if model.generator is not None and not parts["generator"]:
        print(f"warning: {name} gives no generator for this run: a fresh generator "
              f"(generator_size={model.config.generator_size}) learns from scratch, so its "
              "replacements are easy to spot at first.", file=sys.stderr)
    fresh = [head for head in model.head_names
             if not (parts["generator"] or parts.get(head))]
    if fresh:
        print(f"warning: {name} gives no {' or '.join(fresh)}: "
              f"{'they start' if len(fresh) > 1 else 'it starts'} from random weights.",
              file=sys.stderr)
    print(f"Starting from the weights of {name} ({pretrained.checkpoint}) with a new "
          "optimizer and schedule.")
    run_dir.restore_pretrainer(model, pretrained, parts)


def _transferable_parts(model, pretrained: run_dir.Pretrained) -> dict:
    """The parts of `pretrained` (see `Pretrained.parts`) that `model` takes over: always
    the discriminator encoder; the generator and the encoder's heads when `model` has the
    same kind (the same objective; a learned generator, whose shape the run took over)."""
    saved = pretrained.parts()
    same_objective = pretrained.config.objective == model.config.objective
    whole = saved["generator"] and same_objective and model.generator is not None
    # A converted encoder keeps its replaced-token-detection head beside it, which a run
    # with that head takes without the generator.
    head_alone = (not saved["generator"] and saved["discriminator_head"]
                  and "discriminator_head" in model.head_names)
    return {"generator": whole, "discriminator_head": whole and saved["discriminator_head"]
            or head_alone}


def print_summary(model_dir: str, results: dict) -> None:
    evals = results["eval"]
    shown = ((("loss", "loss"), ("gen_acc", "generator accuracy"))
             + objectives.get(results["objective"]).summary_metrics)
    print(f"\nRun directory: {os.path.abspath(model_dir)}", file=sys.stdout)
    print(f"Step {results['step']} ({results['objective']}, {results['train_flops']:.3g} "
          "training FLOPs): " + (", ".join(f"{name} {evals[key]:.3f}"
                                           for key, name in shown if key in evals)
                                 or "not evaluated (--eval_batches 0)"))
    if results["train_tokens_per_second"]:
        print(f"Training speed: {results['train_tokens_per_second']:.0f} tokens/s")
    probe = results.get("probe")
    if probe and probe["history"]:
        last = probe["history"][-1]
        print(f"Probe ({os.path.basename(probe['task'])}): accuracy {last['accuracy']:.3f} at "
              f"step {last['step']} (random encoder {probe['random_accuracy']:.3f}); probing "
              f"took {probe['seconds']:.0f} s" + (
                  f", {probe['share_of_training']:.1%} of the training time"
                  if probe.get("share_of_training") is not None else "") + ".")
    print(f"Latest checkpoint: {results['checkpoint']}")
