import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import autograph_conversions
from electra_tf.config import ElectraConfig
from electra_tf.data.dataset import pretraining_dataset
from electra_tf.pretraining.pretrainer import ElectraPretrainer
from electra_tf.training.optimization import create_pretraining_optimizer

SPECIAL = dict(pad_token_id=0, unk_token_id=1, cls_token_id=2, sep_token_id=3, mask_token_id=4)


def tiny(**overrides):
    values = dict(SPECIAL, vocab_size=1500, max_seq_length=64)
    values.update(overrides)
    return ElectraConfig.preset("tiny", **values)


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(1)
    model = ElectraPretrainer(tiny())
    model.build_all()
    return model


def test_one_embedding_block_shared_by_both_towers(model):
    gen, disc = model.generator, model.discriminator
    assert gen.embeddings is disc.embeddings
    shared = {id(v) for v in disc.embeddings.weights}
    assert len(shared) == 5  # word, position, segment, LayerNorm gamma/beta
    assert shared <= {id(v) for v in gen.weights}
    # Each tower has its own projection (embedding 32 -> hidden 64 / generator 32 = none).
    assert disc.embeddings_project is not None
    assert gen.embeddings_project is None  # generator hidden == embedding size here
    all_ids = [id(v) for v in model.trainable_variables]
    assert len(all_ids) == len(set(all_ids))


def test_each_tower_projects_when_its_width_differs_from_the_embedding():
    model = ElectraPretrainer(tiny(embedding_size=48, hidden_size=64, generator_size=0.5))
    model.build_all()
    assert model.discriminator.embeddings_project.kernel.shape == (48, 64)
    assert model.generator.embeddings_project.kernel.shape == (48, 32)
    assert model.generator.embeddings_project is not model.discriminator.embeddings_project


def test_generator_output_layer_is_the_word_matrix_transposed_plus_a_bias(model):
    head = model.generator_head
    assert head.token_embedding is model.discriminator.embeddings.token_embedding
    hidden = tf.random.normal([2, 10, 32])
    positions = tf.constant([[1, 3], [2, 9]])
    logits = head(hidden, mask_positions=positions)
    x = tf.gather(hidden, positions, batch_dims=1)
    x = head._intermediate_layer_norm(head._intermediate_dense(x))
    words = model.discriminator.embeddings.token_embedding.embeddings
    np.testing.assert_allclose(logits, tf.matmul(x, words, transpose_b=True) + head._bias,
                               atol=1e-5)
    assert head._bias.shape == (1500,)


def test_total_loss_is_mlm_plus_fifty_times_disc(model, shards):
    pattern, _ = shards
    batch = next(iter(pretraining_dataset(pattern, 4, 64, seed=0)))
    outputs = model(batch, training=False)
    losses = model.compute_losses(outputs)
    np.testing.assert_allclose(losses["loss"], losses["mlm_loss"] + 50.0 * losses["disc_loss"],
                               rtol=1e-6)
    # Replaced tokens are a subset of the masked positions, and only real tokens.
    labels = outputs["replaced"].numpy()
    assert labels.sum() <= outputs["mlm_weights"].numpy().sum()
    assert np.all(labels[batch["input_mask"].numpy() == 0] == 0)


def config_of(vocab_path, **overrides):
    """The tiny preset with the test vocab's size and special tokens."""
    from electra_tf.text import vocab

    tokens = vocab.load_vocab(vocab_path)
    return ElectraConfig.preset("tiny", vocab_size=len(tokens),
                                **vocab.special_token_ids(tokens), **overrides)


def train_curve(cfg, pattern, epochs, precision="none", evaluate=False):
    """History of `epochs` x 10 steps of the run's model and optimizer (`build_model`), from
    seed 0, on the same batches and masking noise whatever the precision; with
    `evaluate`, also the eval metrics before and after."""
    from electra_tf.runs.pretrain import build_model
    from electra_tf.training.runtime_options import RuntimeOptions

    keras.utils.set_random_seed(0)
    model, _ = build_model(cfg, RuntimeOptions(mixed_precision=precision))
    data = pretraining_dataset(pattern, cfg.batch_size, 64, seed=0,
                               noise_width=model.noise_width)
    evaluation = pretraining_dataset(pattern, 32, 64, training=False,
                                     noise_width=model.noise_width).take(8)
    before = model.evaluate(evaluation, verbose=0, return_dict=True) if evaluate else None
    history = model.fit(data, steps_per_epoch=10, epochs=epochs, verbose=0).history
    after = model.evaluate(evaluation, verbose=0, return_dict=True) if evaluate else None
    return model, history, before, after


@pytest.fixture(scope="module")
def float32_run(shards, vocab_path):
    """The first 120 of the preset's 300 steps (100 warmup, lr 5e-4) at batch 32, float32,
    and the names of the functions autograph converted for them."""
    with autograph_conversions() as converted:
        run = train_curve(config_of(vocab_path, batch_size=32), shards[0], epochs=12,
                          evaluate=True)
    return (*run, converted)


def test_it_learns(float32_run):
    """A hundred steps of `tiny` raise generator accuracy and discriminator AUC.

    Early in training the discriminator's task gets harder as it learns: a near-uniform
    generator's replacements are rare tokens, easy to spot, while a generator that has
    learned word frequencies replaces with commas and "the". The AUC therefore peaks and
    then eases in a short run; we check the peak and that the end stays clearly above 0.5.
    """
    _, history, before, after, _ = float32_run
    print("before", before, "after", after, "auc by epoch", history["disc_auc"])
    assert abs(before["disc_auc"] - 0.5) < 0.05 and before["gen_acc"] < 0.01
    # The generator first learns word frequencies (predicting "the" alone scores ~0.03).
    assert after["gen_acc"] > max(0.02, 10 * before["gen_acc"])
    assert max(history["disc_auc"]) > before["disc_auc"] + 0.15
    assert after["disc_auc"] > before["disc_auc"] + 0.03
    assert after["disc_loss"] < before["disc_loss"] and after["mlm_loss"] < before["mlm_loss"]


def test_its_data_and_step_are_traced_as_written(float32_run):
    """No function goes through autograph's conversion (CPU at every run's start, 0.8 s
    for a `tiny` run's kernels and data on a 2-core AVX2 EPYC): straight-line code,
    traced as written."""
    assert float32_run[4] == []


def test_bf16_follows_the_float32_loss_curve(float32_run, shards, vocab_path):
    """bf16 mixed precision (float32 variables, heads and losses) follows the float32 run
    over its first 20 steps: within 1% per 10-step mean loss."""
    model, bf16, _, _ = train_curve(config_of(vocab_path, batch_size=32), shards[0],
                                    epochs=2, precision="bf16")
    fp32 = float32_run[1]
    assert model.discriminator.transformer_layers[0].compute_dtype == "bfloat16"
    print("float32", fp32["loss"][:2], "bf16", bf16["loss"])
    np.testing.assert_allclose(bf16["loss"], fp32["loss"][:2], rtol=0.01)
    np.testing.assert_allclose(bf16["disc_auc"], fp32["disc_auc"][:2], atol=0.02)


def test_fp16_with_dynamic_loss_scaling_follows_the_float32_curve(float32_run, shards,
                                                                   vocab_path):
    """fp16 scales the loss (and unscales the gradients) so small gradients survive; it
    trains like float32, loosely (fp16 rounds 8x coarser than float32's bf16 cousin)."""
    model, fp16, _, _ = train_curve(config_of(vocab_path, batch_size=32), shards[0],
                                    epochs=2, precision="fp16")
    fp32 = float32_run[1]
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.discriminator.transformer_layers[0].compute_dtype == "float16"
    # The scale adapts: it started at 2**15 and halved on any overflowing step.
    assert 1 <= float(model.optimizer.dynamic_scale) <= 2 ** 15
    print("float32", fp32["loss"][:2], "fp16", fp16["loss"])
    np.testing.assert_allclose(fp16["loss"], fp32["loss"][:2], rtol=0.03)
    assert fp16["loss"][1] < fp16["loss"][0]


def test_xla_compiled_step_equals_the_eager_step():
    """`jit_compile=True` (the path every TPU run takes) computes the same training steps as
    eager execution: same losses and the same weights after two steps, from the same seed
    and batch. One layer per tower: XLA compiles the whole step, about a quarter less
    work than with the preset's two layers, and a second layer runs the same code."""
    from electra_tf.runs.pretrain import build_model
    from electra_tf.training.runtime_options import RuntimeOptions

    cfg = tiny(batch_size=4, max_seq_length=32, dropout=0.0, num_layers=1)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 1500, (4, 32)).astype(np.int32)
    batch = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids),
             "noise": rng.random((4, ElectraPretrainer(cfg).noise_width), np.float32)}
    runs = {}
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        model, _ = build_model(cfg, RuntimeOptions(jit_compile=jit))
        assert model.jit_compile == jit
        model.run_eagerly = not jit
        history = model.fit(tf.data.Dataset.from_tensors(batch).repeat(2), verbose=0).history
        runs[jit] = history["loss"], [w.numpy() for w in model.weights]
    np.testing.assert_allclose(runs[True][0], runs[False][0], rtol=1e-5)
    for eager, xla in zip(runs[False][1], runs[True][1]):
        np.testing.assert_allclose(xla, eager, atol=1e-6)


def test_gradient_accumulation_matches_the_large_batch_step():
    """4 micro-batches of 2 give the gradient of one batch of 8 (full-length sequences, so
    every example has as many predictions and tokens and the means weigh them alike).
    Adam's first moment after the step is the gradient x 0.1: compared, it shows scale.
    The reference step runs eagerly (cheap for one step); the accumulated one as `fit`
    traces it, a graph `while_loop`."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 1500, (8, 64)).astype(np.int32)
    batch = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids),
             "noise": rng.random((8, ElectraPretrainer(tiny()).noise_width), np.float32)}
    moments, losses = [], []
    for steps in (1, 4):
        keras.utils.set_random_seed(3)
        cfg = tiny(batch_size=8, dropout=0.0, clip_norm=0.0, grad_accum_steps=steps)
        model = ElectraPretrainer(cfg)
        model.build_all()
        model.compile(optimizer=create_pretraining_optimizer(cfg, model),
                      run_eagerly=steps == 1)
        history = model.fit(tf.data.Dataset.from_tensors(batch), verbose=0).history
        losses.append(history["loss"][0])
        moments.append(np.concatenate([m.numpy().ravel() for m in model.optimizer._momentums]))
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-5)
    assert np.linalg.norm(moments[0]) > 0
    difference = np.linalg.norm(moments[1] - moments[0]) / np.linalg.norm(moments[0])
    assert difference < 1e-4


def test_fit_takes_the_commands_steps_and_gives_the_layers_back():
    """`fit` from Python trains with `electra-pretrain`'s kernels (fused GELU, dropout and
    layer norms): the same losses as the command's model, dropout's random draws included,
    from the same seed and batches; afterwards the layers are Keras's and ours again."""
    from electra_tf.layers.activations import gelu
    from electra_tf.runs.pretrain import build_model

    cfg = tiny(batch_size=4, max_seq_length=32, num_layers=1)
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 1500, (4, 32)).astype(np.int32)
    batch = {"input_word_ids": ids, "input_mask": np.ones_like(ids),
             "input_type_ids": np.zeros_like(ids),
             "noise": rng.random((4, ElectraPretrainer(cfg).noise_width), np.float32)}
    data = tf.data.Dataset.from_tensors(batch).repeat(2)
    keras.utils.set_random_seed(0)
    command, _ = build_model(cfg)
    keras.utils.set_random_seed(0)
    model = ElectraPretrainer(cfg)
    model.compile(optimizer=create_pretraining_optimizer(cfg, model))

    def kernels(model):
        """The classes of its dropouts and norms, the names of its activations."""
        names = set()
        for layer in model._flatten_layers():
            if isinstance(layer, (keras.layers.Dropout, keras.layers.LayerNormalization)):
                names.add(type(layer).__name__)
            activation = getattr(layer, "activation", None)
            names.add(getattr(activation, "__name__", str(activation)))
        return sorted(names)

    before = kernels(model)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        losses = [m.fit(data, verbose=0).history["loss"] for m in (command, model)]
    assert not [w for w in warned if "shuffle" in str(w.message)]  # Keras's, for datasets
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-6)
    assert kernels(model) == before and "FusedDropout" not in before
    assert model.discriminator.transformer_layers[0].activation is gelu
    assert "FusedDropout" in kernels(command)  # the command's model keeps them for good


def test_fit_and_evaluate_give_keras_datasets_without_autotuning(model, monkeypatch):
    """A user's datasets reach Keras without tf.data's autotuning, whose thread holds up the
    end of each epoch's pass and each evaluation (`without_autotuning`), unless their
    options set it."""
    given = {}

    def recording(name):
        def record(self, x=None, *args, validation_data=None, **kwargs):
            given.update({name: x, f"{name} validation": validation_data})
        return record

    for name in "fit", "evaluate":
        monkeypatch.setattr(keras.Model, name, recording(name))
    data = tf.data.Dataset.range(4)
    chosen = tf.data.Options()
    chosen.autotune.enabled = True
    model.fit(data, validation_data=data.with_options(chosen), verbose=0)
    model.evaluate(data, verbose=0)
    assert [given[name].options().autotune.enabled for name in ("fit", "evaluate")
            ] == [False, False]
    assert given["fit validation"].options().autotune.enabled  # the user's choice
