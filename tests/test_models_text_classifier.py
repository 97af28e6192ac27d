"""`ElectraTextClassifier` from Python: raw strings into `fit` and `predict`, the official
recipe when nothing is compiled, and TF Serving exports that answer as `predict` does
(`.keras` round trips: test_models_keras_files.py)."""

import contextlib
import json
import re
import warnings

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf
from keras.src.trainers.data_adapters.py_dataset_adapter import PyDatasetAdapter

import electra_tf
from conftest import DEMO, autograph_conversions, run_command
from electra_tf.errors import ConfigError
from electra_tf.models.packed_batches import PackedBatches
from electra_tf.training.optimization import AdamWeightDecay
from saved_models import session_predict


def _sentiment(n):
    rows = [json.loads(line) for line in open(DEMO / "sentiment" / "train.jsonl",
                                               encoding="utf-8")][:n]
    return [r["text"] for r in rows], [["neg", "pos"][int(r["label"])] for r in rows]


@contextlib.contextmanager
def predict_traces(clf):
    """Within, with a new Keras predict function: the list that gains an item each time a
    predict function of `clf` traces its `predict_step`."""
    clf.make_predict_function(force=True)
    traces, original_step = [], clf.predict_step
    clf.predict_step = lambda data: traces.append(1) or original_step(data)
    try:
        yield traces
    finally:
        del clf.predict_step


def counted_calls(monkeypatch, module, name):
    """The list that gains an item at each call of `module.name` from now on (for the
    rest of the test)."""
    calls, original = [], getattr(module, name)
    monkeypatch.setattr(module, name, lambda *args: calls.append(1) or original(*args))
    return calls


@pytest.fixture(scope="module")
def fitted(pretrained_dir):
    texts, labels = _sentiment(48)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=32)
    history = clf.fit(texts, labels, batch_size=16, epochs=1, verbose=0)
    return clf, texts, history


def test_fit_takes_a_dataset_as_it_comes(pretrained_dir):
    """Batches of raw texts and label ids, in the dataset's own order: no warning from
    Keras that its default `shuffle=True` is ignored."""
    texts, labels = _sentiment(8)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=32)
    data = tf.data.Dataset.from_tensor_slices((texts, clf.label_ids(labels))).batch(4)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        history = clf.fit(data, epochs=1, verbose=0)
    assert not [w for w in warned if "shuffle" in str(w.message)]
    assert int(clf.optimizer.iterations) == 2 and np.isfinite(history.history["loss"][0])


def test_fit_reads_one_iterator_a_run_and_every_example_each_epoch(pretrained_dir,
                                                                     monkeypatch):
    """Keras's loop opens two iterators an epoch over a dataset of known length (one it never
    reads), each running keras-hub's map of the preprocessing: `fit` gives it the dataset
    repeated with its steps, one iterator for the run (one per evaluation of validation
    data), and every epoch still sees each example once, reshuffled; `evaluate` reads a
    dataset by one iterator, with the same results as on the same examples in memory."""
    from tensorflow.python.data.ops import iterator_ops

    texts, labels = _sentiment(6)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=32)
    opened = []  # iterators over a dataset (not a trace's placeholders)
    original = iterator_ops.OwnedIterator.__init__

    def counted(self, dataset=None, **kwargs):
        opened.extend([dataset] if dataset is not None else [])
        original(self, dataset, **kwargs)

    monkeypatch.setattr(iterator_ops.OwnedIterator, "__init__", counted)
    history = clf.fit(texts, labels, batch_size=2, epochs=3, verbose=0,
                      validation_data=(texts[:4], labels[:4]))
    assert len(opened) == 1 + 3  # the run's, and one per evaluation
    assert len(history.history["val_loss"]) == 3 and int(clf.optimizer.iterations) == 9
    opened.clear()
    data = tf.data.Dataset.from_tensor_slices((texts, clf.label_ids(labels))).batch(4)
    assert clf.evaluate(data, verbose=0) == pytest.approx(
        clf.evaluate(texts, labels, batch_size=4, verbose=0), abs=1e-6)
    assert len(opened) == 1 + 1  # the dataset's, and the in-memory batches'

    given = {}
    monkeypatch.setattr(keras.Model, "fit", lambda self, x, **kwargs: given.update(
        x=x, steps=kwargs["steps_per_epoch"]))
    clf.fit(texts, labels, batch_size=4, epochs=3)  # batches of 4 and 2
    assert given["steps"] == 2
    epochs = [[] for _ in range(3)]
    for step, (inputs, _) in enumerate(given["x"].take(3 * given["steps"])):
        epochs[step // 2].extend(inputs["input_word_ids"][:, 1].numpy())  # first pieces
    assert all(sorted(epoch) == sorted(epochs[0]) and len(epoch) == 6 for epoch in epochs)


def test_fit_and_evaluate_trace_the_packing_once_not_at_every_call(pretrained_dir,
                                                                   monkeypatch):
    """keras-hub maps the preprocessing over the data at every `fit` and `evaluate` call,
    which traced the packing ops anew each time: there they call the graph traced once
    per vocabulary and settings, as eager calls do. An export still traces them into its
    own graph."""
    from electra_tf.layers.export_tracing import export_tracing
    from electra_tf.models import preprocessor

    texts, labels = _sentiment(4)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=32)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        clf.fit(texts, labels, batch_size=2, verbose=0)
    assert not [w for w in warned if "unbuilt state" in str(w.message)]  # the tokenizer's
    packings = counted_calls(monkeypatch, preprocessor, "pack_segments")
    clf.fit(texts, labels, batch_size=2, verbose=0)
    clf.evaluate(tf.data.Dataset.from_tensor_slices((texts, clf.label_ids(labels))).batch(2),
                 verbose=0)
    assert packings == []
    with export_tracing():
        tf.function(lambda t: clf.preprocessor(t)).get_concrete_function(
            tf.TensorSpec([None], tf.string))
    assert packings == [1]


def test_validation_split_holds_out_the_last_texts_and_the_schedule_spans_the_rest(
        pretrained_dir, monkeypatch):
    """Keras's `validation_split` refuses lists of strings (or words); here the last
    examples are held out before shuffling, as Keras holds out arrays, and the official
    schedule spans the training batches alone."""
    texts, labels = _sentiment(10)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=32)
    given = {}

    def recording(self, x=None, y=None, validation_split=0.0, validation_data=None,
                  steps_per_epoch=None, validation_steps=None, **kwargs):
        given.update(x=x.take(steps_per_epoch), validation_split=validation_split,
                     validation_data=validation_data.take(validation_steps))

    monkeypatch.setattr(keras.Model, "fit", recording)
    clf.fit(texts, labels, batch_size=4, validation_split=0.3)
    held_out = [int(label) for batch in given["validation_data"] for label in batch[1]]
    assert held_out == list(clf.label_ids(labels[7:])) and given["validation_split"] == 0
    assert sum(len(batch[1]) for batch in given["x"]) == 7
    assert clf.optimizer._learning_rate.total_steps == 2  # 7 texts in batches of 4


def test_fit_evaluate_and_predict_give_keras_datasets_without_autotuning(fitted, monkeypatch):
    """In-memory examples reach Keras's `fit` as datasets, validation in batches of
    `validation_batch_size`, and Keras's `evaluate` and `predict` loops as datasets of the
    packed batches; these and the user's datasets go without tf.data's autotuning, whose
    thread holds up the end of each epoch's pass and each evaluation
    (`without_autotuning`), unless the user's options set it."""
    clf, texts, _ = fitted
    given = {}

    def recording(name):
        def record(self, x=None, y=None, validation_data=None, steps=None,
                   validation_steps=None, **kwargs):
            given.update({name: x, f"{name} validation": validation_data,
                          f"{name} steps": steps, f"{name} validation steps": validation_steps})
        return record

    for name in "fit", "evaluate", "predict":
        monkeypatch.setattr(keras.Model, name, recording(name))
    clf.fit(texts[:8], ["neg", "pos"] * 4, batch_size=4, validation_batch_size=3,
            validation_data=(texts[8:14], ["pos", "neg"] * 3))
    clf.evaluate(texts[:5], [0, 1, 0, 1, 0], batch_size=2)
    clf.predict(texts[:5], batch_size=2, steps=2)  # `steps`: Keras's loop
    validation = given["fit validation"].take(given["fit validation steps"])
    assert [len(batch[1]) for batch in validation] == [3, 3]
    assert given["evaluate steps"] == 3 and given["predict steps"] == 2  # the bar's length
    assert [len(batch["input_word_ids"]) for batch in given["predict"]] == [2, 2, 1]
    assert all(isinstance(given[name], tf.data.Dataset)
               and given[name].options().autotune.enabled is False
               for name in ("fit", "fit validation", "evaluate", "predict"))

    chosen = tf.data.Options()
    chosen.autotune.enabled = True
    users = tf.data.Dataset.from_tensor_slices((texts[:4], [0, 1, 0, 1])).batch(2)
    clf.fit(users, validation_data=users.with_options(chosen), verbose=0)
    clf.evaluate(users, verbose=0)
    clf.predict(users.map(lambda x, y: x), steps=2, verbose=0)  # `steps`: Keras's loop
    assert given["fit validation"].options().autotune.enabled  # the user's choice
    assert [given[name].options().autotune.enabled for name in ("fit", "evaluate", "predict")
            ] == [False] * 3


def test_one_packed_batch_reaches_keras_as_its_adapter_gives_it_with_no_function(fitted):
    """Keras's `PyDataset` adapter builds its dataset with `from_generator`, whose
    functions are traced anew for each dataset (~30 ms of a one-batch `evaluate`); one
    batch is sliced from its arrays instead: the same elements and spec, no function."""
    clf, texts, _ = fitted
    batches = PackedBatches(clf.example_parts(texts[:3], [0, 1, 0]), clf.preprocess_samples, 8)
    ours, adapters = batches.dataset(), PyDatasetAdapter(batches).get_tf_dataset()
    assert ours.element_spec == adapters.element_spec
    for mine, theirs in zip(ours, adapters, strict=True):
        tf.nest.map_structure(np.testing.assert_array_equal, mine, theirs)
    graph = tf.compat.v1.GraphDef.FromString(ours._as_serialized_graph().numpy())
    assert not graph.library.function


def test_fit_without_compile_trains_with_the_official_recipe(fitted):
    clf, texts, history = fitted
    optimizer = clf.optimizer
    assert isinstance(optimizer, AdamWeightDecay) and not optimizer.bias_correction
    schedule = optimizer._learning_rate  # the schedule object (`learning_rate`: its value)
    # 48 texts in batches of 16, one epoch: the schedule spans the 3 steps fit ran.
    assert schedule.total_steps == 3 and int(optimizer.iterations) == 3
    assert schedule.peak_learning_rate == 3e-4  # the tiny preset's size: Small's rate
    assert optimizer.clip_norm == 1.0 and optimizer.weight_decay_rate == 0.01
    assert set(history.history) == {"loss", "accuracy"}
    probabilities = clf.predict(texts[:5], verbose=0)
    assert probabilities.shape == (5, 2)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, rtol=1e-5)


def test_the_encoder_reads_up_to_the_last_real_token_with_the_same_logits(fitted):
    """Padding costs as much as words: the classifier cuts the batch after its last real
    token (right- or left-padded) and gets the logits of the whole padded batch."""
    clf = fitted[0]
    packed = clf.preprocessor(tf.constant(["a fine film", "dull"]))  # 32 positions
    lengths = []
    original_call = clf.encoder.call
    clf.encoder.call = lambda inputs, **kw: (lengths.append(inputs["input_mask"].shape[1])
                                             or original_call(inputs, **kw))
    try:
        logits = clf(packed, training=False).numpy()
        # Left padding: the same tokens shifted right (positions differ, so the logits
        # too); the cut must keep every real token.
        shift = 32 - int(packed["input_mask"][0].numpy().sum())
        left = {k: tf.roll(v[:1], shift, axis=1) for k, v in packed.items()}
        clf(left, training=False)
    finally:
        clf.encoder.call = original_call
    assert lengths == [int(packed["input_mask"][0].numpy().sum()), 32]
    full = clf.head(clf.encoder(packed, training=False)["pooled_output"]).numpy()
    np.testing.assert_allclose(logits, full, atol=1e-5)


def test_predict_and_evaluate_pack_texts_in_memory_eagerly_as_a_dataset_would(fitted):
    """In-memory texts are packed eagerly (a `tf.data` map traced the preprocessor anew
    on every call: ~0.5 s), in batches, singles and pairs alike, to the model's own
    answers; labels of `evaluate` may be names, as in `fit`; a dataset to `evaluate`
    still goes through keras-hub's pipeline."""
    clf, texts, _ = fitted
    labels = _sentiment(5)[1]
    eager = []
    original_call = clf.preprocessor.call
    clf.preprocessor.call = lambda *a, **kw: (eager.append(tf.executing_eagerly())
                                               or original_call(*a, **kw))
    try:
        singles = clf.predict(texts[:5], batch_size=2, verbose=0)
        pairs = clf.predict((texts[:5], texts[5:10]), batch_size=2, verbose=0)
        scores = clf.evaluate(texts[:5], labels, batch_size=2, verbose=0, return_dict=True)
    finally:
        clf.preprocessor.call = original_call
    assert eager and all(eager)
    ids = clf.label_ids(labels)
    streamed_scores = clf.evaluate(tf.data.Dataset.from_tensor_slices((texts[:5], ids))
                                   .batch(2), verbose=0, return_dict=True)
    assert scores == pytest.approx(streamed_scores, rel=1e-5)

    def answers(*segments):
        packed = clf.preprocessor(tuple(tf.constant(s) for s in segments), y=None)
        return tf.nn.softmax(clf(packed, training=False)).numpy()
    np.testing.assert_allclose(singles, answers(texts[:5]), atol=1e-6)
    one_batch = clf.predict(texts[:5], verbose=0)  # run without Keras's loop
    assert isinstance(one_batch, np.ndarray)
    np.testing.assert_allclose(one_batch, singles, atol=1e-6)
    np.testing.assert_allclose(pairs, answers(texts[:5], texts[5:10]), atol=1e-6)
    streamed = clf.predict(tf.data.Dataset.from_tensor_slices(texts[:5]).batch(2), verbose=0)
    np.testing.assert_allclose(streamed, singles, atol=1e-6)
    with pytest.raises(ConfigError, match="No examples"):
        clf.predict([])
    with pytest.raises(ConfigError, match=r"different lengths \[2, 3\]"):
        clf.predict((texts[:3], texts[:2]))
    with pytest.raises(ConfigError, match=r"different lengths \[4, 5\]"):  # > a batch
        clf.predict((texts[:5], texts[:4]), batch_size=2)


def test_predict_packs_a_datasets_batches_eagerly_in_order_as_keras_hubs_map_would(
        fitted, capsys):
    """A dataset's batches are packed eagerly as they come (keras-hub's `tf.data` map
    traced and instantiated the preprocessor anew on every call, and Keras's loop opened
    a second iterator: ~0.2 s a call), in their order, read once without `tf.data`'s
    autotuning, to the answers of Keras's loop over keras-hub's map; labelled elements
    and datasets of unknown length too; an empty one is refused, as is a batch size."""
    clf, texts, _ = fitted
    data = tf.data.Dataset.from_tensor_slices(texts[:5]).batch(2)
    keras_loop = clf.predict(data, steps=3, verbose=0)  # `steps`: keras-hub's map
    eager, read = [], []
    original_call, original_iter = clf.preprocessor.call, tf.data.Dataset.__iter__
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(clf.preprocessor, "call", lambda *a, **kw: (
            eager.append(tf.executing_eagerly()) or original_call(*a, **kw)))
        patch.setattr(tf.data.Dataset, "__iter__", lambda self: (
            read.append(self.options().autotune.enabled) or original_iter(self)))
        ours = clf.predict(data, verbose=0)
    assert eager == [True] * 3 and read == [False]
    np.testing.assert_allclose(ours, keras_loop, atol=1e-6)
    labelled = tf.data.Dataset.from_tensor_slices((texts[:5], [0, 1, 0, 1, 0])).batch(2)
    np.testing.assert_allclose(clf.predict(labelled, verbose=0), ours, atol=1e-6)
    unknown_length = data.filter(lambda text: True)
    capsys.readouterr()
    np.testing.assert_allclose(clf.predict(unknown_length, verbose=1), ours, atol=1e-6)
    assert "3/Unknown" in capsys.readouterr().out  # Keras's bar for an unknown length
    with pytest.raises(ConfigError, match="empty dataset"):
        clf.predict(data.take(0), verbose=0)
    with pytest.raises(ConfigError, match="batch_size=2 with a tf.data.Dataset"):
        clf.predict(data, batch_size=2)


def test_more_than_a_batch_runs_shortest_first_and_answers_in_order(fitted, monkeypatch):
    """Each batch's encoder reads up to its own longest example: in-memory inputs of more
    than one batch are predicted shortest first (texts by characters, packed inputs by
    tokens, as `electra-finetune` scores its dev set), and the answers come back in the
    inputs' order."""
    clf, texts, _ = fitted
    short, long = min(texts, key=len), max(texts, key=len)
    mixed = [long, short, long, short, short]
    labels = ["pos", "neg", "neg", "pos", "neg"]
    packed = {k: v.numpy() for k, v in clf.preprocessor(tf.constant(mixed)).items()}
    one_by_one = np.concatenate([clf.predict([text], verbose=0) for text in mixed])
    batches = []
    preprocess = clf.preprocess_samples

    def recording(x, *args):
        batches.append([t.decode() for t in x.numpy()] if isinstance(x, tf.Tensor)
                       else x["input_mask"].numpy().sum(1).tolist())
        return preprocess(x, *args)

    monkeypatch.setattr(clf, "preprocess_samples", recording)
    answers = clf.predict(mixed, batch_size=2, verbose=0)
    in_order = [[short, short], [short, long], [long]]
    assert batches[-3:] == in_order
    np.testing.assert_allclose(answers, one_by_one, atol=1e-6)
    monkeypatch.setattr(clf, "preprocessor", None)  # packed inputs
    np.testing.assert_allclose(clf.predict(packed, batch_size=2, verbose=0), one_by_one,
                               atol=1e-6)
    real = packed["input_mask"].sum(1).tolist()
    assert batches[-3:] == [[real[1]] * 2, [real[1], real[0]], [real[0]]]
    # evaluate keeps the order: the loss, summed per batch, depends on the batches.
    clf.evaluate(packed, clf.label_ids(labels), batch_size=2, verbose=0)
    assert batches[-3:] == [[real[0], real[1]], [real[0], real[1]], [real[1]]]


def test_in_memory_predict_runs_without_keras_loop_but_with_its_progress_bar(fitted,
                                                                            monkeypatch,
                                                                            capsys):
    """In-memory inputs are predicted batch by batch without Keras's loop, to the answers
    and the progress bar the loop gives (which runs when a callback asks for it)."""
    clf, texts, _ = fitted

    def last_bar():  # the printed bar's last state, without colours and times
        shown = re.sub(r"\x1b\[[0-9;]*m|\d+m?s", "", capsys.readouterr().out)
        return " ".join(shown.replace("\b", "").split("\r")[-1].split())

    looped = clf.predict(texts[:5], batch_size=2, callbacks=[keras.callbacks.Callback()])
    keras_bar = last_bar()
    assert keras_bar == "3/3 " + "━" * 20 + " /step", keras_bar

    def no_loop(*args, **kwargs):
        raise AssertionError("Keras's loop ran")

    monkeypatch.setattr(keras.Model, "predict", no_loop)
    np.testing.assert_allclose(clf.predict(texts[:5], batch_size=2), looped, atol=1e-6)
    assert last_bar() == keras_bar  # verbose "auto", as Keras's
    clf.predict(texts[:5], batch_size=2, verbose=0)
    clf.predict(texts[:2])  # one batch: no bar unless asked for
    assert last_bar() == ""
    clf.predict(texts[:2], verbose=1)
    assert last_bar() == keras_bar.replace("3/3", "1/1")


def test_predict_and_evaluate_trace_for_inference_optimised_in_one_round(fitted,
                                                                         monkeypatch):
    """Without hand-written gradients (`inference_only`) and, as `fit` does, in one Grappler
    round (`one_optimization_round`): each costs the first call ~0.1-0.2 s for nothing."""
    from tensorflow.core.protobuf import rewriter_config_pb2

    from electra_tf.layers.inference import gradients_wanted
    from electra_tf.training.graph_optimization import call_config

    def rounds():
        return call_config().graph_options.rewrite_options.meta_optimizer_iterations

    clf, texts, _ = fitted
    seen = []
    clf.make_predict_function(), clf.make_test_function()
    for name in ("predict_function", "test_function"):
        monkeypatch.setattr(clf, name, lambda *args, run=getattr(clf, name): (
            seen.append((rounds(), gradients_wanted())) or run(*args)))
    clf.predict(texts[:2], verbose=0)
    clf.evaluate(texts[:2], ["neg", "pos"], verbose=0)
    assert seen == [(rewriter_config_pb2.RewriterConfig.ONE, False)] * 2
    assert rounds() != rewriter_config_pb2.RewriterConfig.ONE and gradients_wanted()


def test_predict_traces_the_model_once_for_every_batch_size(fitted):
    """Keras's predict function traces the first batch's exact shape, then again a
    generalised one at the next size; ours traces the generalised one first."""
    clf, texts, _ = fitted
    with predict_traces(clf) as traces:
        for n in (1, 3, 5):
            clf.predict(texts[:n], verbose=0)
    assert len(traces) == 1


def test_predict_runs_many_short_single_texts_through_a_function_with_the_small_forms(
        fitted, monkeypatch):
    """After `SMALL_FORMS_AFTER_BATCHES` batches of at most `SMALL_FORMS_MAX_ROWS` rows,
    such batches get a predict function of their own, traced once with the small forms
    (`small_attention`, not picked per call), which answers as Keras's does; larger
    batches keep Keras's."""
    from electra_tf.layers import query_first_attention
    from electra_tf.models import task

    clf, texts, _ = fitted
    short, long = "a fine film .", " ".join(texts[:4])
    assert len(short.split()) + 2 <= task.SMALL_FORMS_MAX_ROWS < len(long.split())
    monkeypatch.setattr(task, "SMALL_FORMS_AFTER_BATCHES", 2)
    small_attentions = counted_calls(monkeypatch, query_first_attention, "small_attention")
    with predict_traces(clf) as traces:
        first = [clf.predict([short], verbose=0) for _ in range(2)]
        assert len(traces) == 1 and not small_attentions  # Keras's function alone
        small = clf.predict([short], verbose=0)
        assert len(traces) == 2 and small_attentions  # traced with the small forms
        attentions = len(small_attentions)
        beside_a_long_text = clf.predict([short, long], verbose=0)
        again = clf.predict([short], verbose=0)
    assert len(traces) == 2 and len(small_attentions) == attentions
    np.testing.assert_array_equal(first[1], first[0])
    np.testing.assert_allclose(small, first[0], atol=1e-5)
    np.testing.assert_allclose(beside_a_long_text[:1], first[0], atol=1e-5)
    np.testing.assert_array_equal(again, small)


def test_predict_runs_large_batches_through_a_function_with_onednns_layer_norms(
        fitted, monkeypatch):
    """Where oneDNN is on, after `ONEDNN_NORMS_AFTER_ROWS` rows of batches of at least
    `ONEDNN_LAYER_NORM_MIN_ROWS` rows, such batches get a predict function of their own,
    traced once with oneDNN's layer norm (`onednn_layer_normalization`), which answers as
    Keras's does; smaller batches keep Keras's. Where oneDNN is off, Keras's alone."""
    from electra_tf.layers import closed_form_layer_normalization
    from electra_tf.models import task
    from electra_tf.tf_runtime import accelerator_visible, onednn_enabled

    clf, texts, _ = fitted
    large = [" ".join(texts[:4])] * 16  # 16 x 32 rows
    assert task.ONEDNN_LAYER_NORM_MIN_ROWS <= 16 * 32
    monkeypatch.setattr(task, "ONEDNN_NORMS_AFTER_ROWS", 16 * 32)  # bought at the second
    norms = counted_calls(monkeypatch, closed_form_layer_normalization,
                          "onednn_layer_normalization")
    with predict_traces(clf) as traces:
        first = clf.predict(large, batch_size=16, verbose=0)
        assert len(traces) == 1 and not norms  # Keras's function alone
        second = clf.predict(large, batch_size=16, verbose=0)
        small = clf.predict(large[:1], verbose=0)
        third = clf.predict(large, batch_size=16, verbose=0)
    if onednn_enabled() and not accelerator_visible():
        # Traced once more, with the embeddings' norm and the two of the one layer traced
        # for the stack's layers as oneDNN's (not the last layer's: its norms take the
        # first position alone).
        assert len(traces) == 2 and len(norms) == 3
    else:
        assert len(traces) == 1 and not norms
    np.testing.assert_allclose(second, first, atol=1e-5)
    np.testing.assert_array_equal(third, second)
    np.testing.assert_allclose(small, first[:1], atol=1e-5)


# The start of a process (`python -c`, given the pretrained directory) whose `clf` is loaded
# into `strategy`, a MirroredStrategy over two logical CPUs, which must be set up before
# TensorFlow starts.
MIRRORED_CLASSIFIER = """
import sys
import numpy as np
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import electra_tf
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    clf = electra_tf.ElectraTextClassifier.from_pretrained(sys.argv[1], num_classes=2,
                                                           sequence_length=16)
"""


def test_predict_under_a_mirrored_strategy_answers_once_per_text(pretrained_dir):
    """Two replicas (logical CPUs: a process of its own): one row per text, the model's
    own answers; the head's weights exist before the generalised trace (created in it,
    MirroredStrategy cannot lift them)."""
    code = MIRRORED_CLASSIFIER + """
texts = ["a fine film", "dull", "it was long", "great fun", "no"]
predicted = clf.predict(texts, batch_size=2, verbose=0)
alone = clf.predict(texts[:1], verbose=0)
direct = tf.nn.softmax(clf(clf.preprocessor(tf.constant(texts)), training=False)).numpy()
assert predicted.shape == (5, 2) and alone.shape == (1, 2), (predicted.shape, alone.shape)
np.testing.assert_allclose(predicted, direct, atol=1e-5)
np.testing.assert_allclose(alone, direct[:1], atol=1e-5)
print("ok")
"""
    result = run_command("python", "-c", code, pretrained_dir)
    assert result.stdout.splitlines()[-1] == "ok"


def test_a_training_step_under_a_mirrored_strategy_computes_with_each_layers_weights(
        pretrained_dir):
    """The transformer layers traced once (`layer_stack`) compute with each layer's
    weights on every replica: a training step's logits and gradients are those of the
    layers traced one by one (dropout off, so that both draw nothing)."""
    code = MIRRORED_CLASSIFIER + """
import keras
from electra_tf.layers import layer_stack
for layer in clf._flatten_layers():
    if isinstance(layer, keras.layers.Dropout):
        layer.rate = 0.0
batch = clf.preprocessor(tf.constant(["a fine film", "dull", "it was long", "great fun"]))

def step(x):
    with tf.GradientTape() as tape:
        logits = clf(x, training=True)
    variables = clf.trainable_variables
    gradients = tape.gradient(tf.reduce_sum(logits ** 2), variables)
    return [logits] + [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g)
                       for g, v in zip(gradients, variables)]  # None: not in the loss

def on_the_replicas():
    data = tf.data.Dataset.from_tensor_slices(batch).batch(4)
    x = next(iter(strategy.experimental_distribute_dataset(data)))
    results = tf.function(lambda x: strategy.run(step, args=(x,)))(x)
    return [np.stack([t.numpy() for t in strategy.experimental_local_results(r)])
            for r in results]

one_trace = on_the_replicas()
layer_stack._all_alike = lambda layers: False  # each layer traced on its own
for mine, each in zip(one_trace, on_the_replicas()):
    np.testing.assert_allclose(mine, each, rtol=1e-5, atol=1e-6)
print("ok")
"""
    result = run_command("python", "-c", code, pretrained_dir)
    assert result.stdout.splitlines()[-1] == "ok"



def test_fit_under_a_mirrored_strategy_with_the_official_recipe_and_long_inputs(
        pretrained_dir):
    """A model made in a strategy's scope fits outside it with the official recipe (its
    optimizer made in the model's strategy); inputs packed long enough train with the
    training kernels on both replicas, and the model runs its own layers afterwards."""
    code = MIRRORED_CLASSIFIER + """
import keras
from electra_tf.models import task
from electra_tf.training.runtime import runs_training_kernels
task.LONG_INPUT_LENGTH = 16  # the tiny model has 128 positions
during = []
seen = keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: during.append(
    runs_training_kernels(clf.encoder)))
texts = ["a fine film", "dull", "it was long", "great fun"] * 4
history = clf.fit(texts, [1, 0, 0, 1] * 4, batch_size=8, epochs=1, verbose=0,
                  callbacks=[seen])
assert np.isfinite(history.history["loss"][0]) and during == [True, True], during
assert not runs_training_kernels(clf.encoder)
assert clf.optimizer._distribution_strategy is strategy
print("ok")
"""
    result = run_command("python", "-c", code, pretrained_dir)
    assert result.stdout.splitlines()[-1] == "ok"

def test_the_preprocessor_takes_a_list_as_a_batch_and_a_tuple_as_pairs(fitted):
    preprocessor = fitted[0].preprocessor
    batch = preprocessor(["a fine film", "dull"])["input_word_ids"]
    assert batch.shape == (2, 32)
    np.testing.assert_array_equal(
        batch, preprocessor(tf.constant(["a fine film", "dull"]))["input_word_ids"])
    pair = preprocessor((tf.constant(["a fine film"]), tf.constant(["dull"])))
    assert int(tf.reduce_max(pair["input_type_ids"])) == 1
    # (x, y) as keyword arguments still pass the labels through.
    packed, labels = preprocessor(tf.constant(["a fine film"]), y=tf.constant([1]))
    assert packed["input_word_ids"].shape == (1, 32) and labels.numpy().tolist() == [1]
    # Texts and pairs that do not match are refused (they packed the first rows alone).
    with pytest.raises(ConfigError, match=r"different lengths \[1, 2\]"):
        preprocessor((tf.constant(["a fine film", "dull"]), tf.constant(["dull"])))
    # Words with 32-bit row splits pack as with 64-bit ones.
    words = [["a", "fine", "film"], ["dull"]]
    np.testing.assert_array_equal(
        preprocessor.pack_words(tf.ragged.constant(words, row_splits_dtype=tf.int32))[1],
        preprocessor.pack_words(tf.ragged.constant(words))[1])


def test_eager_packing_runs_one_graph_for_any_batch_as_the_graph_path_packs(fitted):
    """Ragged packing ops run one by one from Python cost ~10 ms a call, the tokenizer's
    graph and the packing's as two calls ~1 ms: eager calls run both as one graph, traced
    once per form (single texts, pairs, words) for any batch and shared by the
    preprocessors of one vocabulary, and pack as traced calls do."""
    from electra_tf.text import tokenizer as tokenizer_lib

    preprocessor = fitted[0].preprocessor
    texts, _ = _sentiment(7)
    long = " ".join(texts)  # cut to the sequence length, the pair's longest first
    batches = [texts[:1], texts[:3], texts[2:7] + [long]]
    pairs = [(b, list(reversed(b))) for b in batches] + [([long], ["a fine film"])]
    in_graph = tf.function(lambda x: preprocessor(x))
    preprocessor(batches[0]), preprocessor(tuple(pairs[0]))
    graph = tokenizer_lib._GRAPHS[preprocessor.tokenizer]
    functions = dict(tokenizer_lib._AROUND_GRAPHS[graph])
    # Single texts and pairs (and words, where another test packed them first).
    assert sorted(key[1] for key in functions if key[0] == "pack_segments") == [1, 2]
    for x in batches + [tuple(pair) for pair in pairs]:
        eager, graph_packed = preprocessor(x), in_graph(tf.nest.map_structure(tf.constant, x))
        for key in eager:
            np.testing.assert_array_equal(eager[key], graph_packed[key])
    # Words (a tagger's), the same way.
    words = tf.ragged.constant([long.split(), ["a", "", "film"], []], tf.string)
    eager, graph_packed = preprocessor.pack_words(words), tf.function(
        preprocessor.pack_words)(words)
    for mine, theirs in zip(tf.nest.flatten(eager), tf.nest.flatten(graph_packed)):
        np.testing.assert_array_equal(mine, theirs)
    functions = dict(tokenizer_lib._AROUND_GRAPHS[graph])
    assert sorted(key[0] for key in functions) == ["pack_segments"] * 2 + ["pack_words"]
    tokenizer = tokenizer_lib.ElectraTokenizer.from_config(preprocessor.tokenizer.get_config())
    tokenizer.set_vocabulary(preprocessor.tokenizer.vocabulary)
    another = type(preprocessor)(tokenizer, sequence_length=preprocessor.sequence_length)
    np.testing.assert_array_equal(another(batches[1])["input_word_ids"],
                                  preprocessor(batches[1])["input_word_ids"])
    assert tokenizer_lib._AROUND_GRAPHS[graph] == functions  # nothing traced again


def test_keras_hub_functional_task_models_share_the_process_with_ours():
    """Building a keras-hub functional task puts `Functional` into the bases of the class
    ours share with it (keras#17270); building ours made keras-hub take it out again."""
    from keras_hub.src.utils.pipeline_model import PipelineModel

    ids = np.full((2, 8), 7, np.int32)
    ours_x = {"input_word_ids": ids, "input_mask": ids * 0 + 1, "input_type_ids": ids * 0}
    theirs_x = {"token_ids": ids, "segment_ids": ids * 0, "padding_mask": ids * 0 + 1}

    def ours():
        return electra_tf.ElectraTextClassifier(electra_tf.ElectraEncoder.from_electra_config(
            electra_tf.ElectraConfig.preset("tiny", vocab_size=100)), num_classes=2)

    def theirs():
        return keras_hub.models.BertTextClassifier(keras_hub.models.BertBackbone(
            vocabulary_size=100, num_layers=1, num_heads=2, hidden_dim=16,
            intermediate_dim=32, max_sequence_length=16), num_classes=2, preprocessor=None)

    bases = PipelineModel.__bases__
    try:
        first_ours, theirs_between, second_ours = ours(), theirs(), ours()
        for model, x in ((first_ours, ours_x), (theirs_between, theirs_x),
                         (second_ours, ours_x)):
            assert model.predict(x, verbose=0).shape == (2, 2), model
        assert not isinstance(first_ours, keras.src.models.functional.Functional)
        assert isinstance(theirs_between, keras.src.models.functional.Functional)
    finally:
        PipelineModel.__bases__ = bases


def test_one_step_moves_each_depth_by_its_layerwise_rate(pretrained_dir):
    """The wiring, not the multiplier function alone: Adam without bias correction moves
    an undecayed weight by lr x multiplier x ~3.16 on the first step, whatever its
    gradient, so the step sizes of the head, the top layer and the embeddings' LayerNorm
    stand as 1 : 0.8 : 0.8^3 (2 layers)."""
    texts, labels = _sentiment(16)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=16, dropout=0.0)
    clf.build_weights()
    by_path = {v.path: v for v in clf.trainable_variables}
    # Undecayed weights with large gradients (Adam's epsilon does not matter).
    watched = {"head": clf.head.bias,
               "top": by_path["discriminator/layer_1/feedforward_layer_norm/beta"],
               "embeddings": by_path["discriminator/embeddings/layer_norm/beta"]}
    before = {k: v.numpy() for k, v in watched.items()}
    clf.fit(texts, labels, batch_size=16, epochs=1, verbose=0)  # one step, no warmup
    moved = {k: np.abs(v.numpy() - before[k]).max() for k, v in watched.items()}
    assert moved["top"] / moved["head"] == pytest.approx(0.8, rel=0.02)
    assert moved["embeddings"] / moved["head"] == pytest.approx(0.8 ** 3, rel=0.02)


def test_a_pretrained_encoder_loads_whole_under_a_new_head_drawn_at_random(pretrained_dir):
    """Weights a restore overwrites are built as zeros (`initializers.restoring`): every
    encoder weight must still come from the checkpoint (as TensorFlow restores it into an
    encoder built the usual way), the new head from its truncated normal."""
    from electra_tf import run_dir
    from electra_tf.layers.initializers import restoring

    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=16)
    clf.build_weights()
    config = run_dir.read_config(pretrained_dir)
    reference = electra_tf.ElectraEncoder.from_electra_config(config)
    reference.build()
    drawn = reference.embeddings.token_embedding.embeddings.numpy()
    assert 0.015 < drawn.std() < 0.025  # outside a restore: the truncated normal
    tf.train.Checkpoint(discriminator=reference).restore(
        run_dir.latest_checkpoint(pretrained_dir)).expect_partial()
    assert len(reference.weights) == len(clf.encoder.weights) > 30
    for ours, restored in zip(clf.encoder.weights, reference.weights):
        np.testing.assert_array_equal(ours.numpy(), restored.numpy(), err_msg=ours.path)
    head = clf.head.kernel.numpy()
    assert 0.01 < head.std() < 0.03 and np.abs(head).max() <= 0.04 + 1e-6  # 2 stddevs
    with restoring():
        zeros = electra_tf.ElectraEncoder.from_electra_config(config)
        zeros.build()
    assert not np.any(zeros.embeddings.token_embedding.embeddings.numpy())


def test_regression_on_pairs(pretrained_dir):
    texts, _ = _sentiment(16)
    pairs = texts[::-1]
    scores = np.linspace(0.0, 5.0, 16).astype("float32")
    reg = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, num_classes=1, sequence_length=24, label_range=(0.0, 5.0))
    history = reg.fit((texts, pairs), scores, batch_size=8, epochs=1, verbose=0)
    assert "pearson" in history.history and reg.text_pairs
    assert reg.predict((texts[:4], pairs[:4]), verbose=0).shape == (4,)


def test_export_serving_answers_raw_strings_as_predict_does(fitted, tmp_path):
    clf, texts, _ = fitted
    with autograph_conversions() as converted:
        result = clf.export_serving(str(tmp_path / "sentiment"))
    assert result["version"] == 1 and converted == []  # its graphs traced as written
    expected = clf.predict(texts[:4], verbose=0)
    outputs, = session_predict([{"path": result["path"], "feeds": {"text": texts[:4]}}])
    np.testing.assert_allclose(outputs["probabilities"], expected, atol=1e-5)
    assert outputs["label"] == [["neg", "pos"][i] for i in expected.argmax(-1)]


def test_export_serving_builds_a_model_made_from_a_config_first(fitted, tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    from electra_tf.models import serving

    clf, texts, _ = fitted
    fresh = electra_tf.ElectraTextClassifier(
        electra_tf.ElectraEncoder.from_config(clf.encoder.get_config()), 2, clf.preprocessor)
    assert not fresh.built
    result = fresh.export_serving(str(tmp_path / "fresh"), constant_weights=True)
    # Its weights as constants of the graph, not their initializers traced into it.
    graph = saved_model_pb2.SavedModel.FromString(
        open(f"{result['path']}/saved_model.pb", "rb").read()).meta_graphs[0].graph_def
    assert sum(len(node.attr["value"].tensor.tensor_content) for node in graph.node
               if node.op == "Const") >= serving.weights_bytes(fresh)
    outputs, = session_predict([{"path": result["path"], "feeds": {"text": texts[:4]}}])
    np.testing.assert_allclose(outputs["probabilities"], fresh.predict(texts[:4], verbose=0),
                               atol=1e-5)


def test_a_fine_tuned_run_loads_ready_to_predict(finetuned):
    clf = electra_tf.ElectraTextClassifier.from_pretrained(str(finetuned / "cls"))
    assert clf.label_names == ["neg", "pos"] and clf.text_pairs
    probabilities = clf.predict((["a fine film"], ["it was"]), verbose=0)
    assert probabilities.shape == (1, 2)
    with pytest.raises(ConfigError, match="TokenClassifier"):
        electra_tf.ElectraTextClassifier.from_pretrained(str(finetuned / "ner"))


def test_user_compiled_optimizer_is_kept(pretrained_dir):
    import keras

    texts, labels = _sentiment(8)
    clf = electra_tf.ElectraTextClassifier.from_pretrained(
        pretrained_dir, label_names=["neg", "pos"], sequence_length=16)
    clf.compile(optimizer=keras.optimizers.SGD(0.01))
    clf.fit(texts, labels, batch_size=8, verbose=0)
    assert isinstance(clf.optimizer, keras.optimizers.SGD)
    assert isinstance(clf.predict(tf.constant(texts[:2]), verbose=0), np.ndarray)


def test_long_inputs_train_with_the_training_kernels_at_bucketed_lengths(pretrained_dir,
                                                                          monkeypatch):
    """Inputs packed to `LONG_INPUT_LENGTH` positions or more: `fit` runs the training
    kernels (XLA), each batch cut at a bucketed length, and trains as the layers' own
    kernels do on exact lengths; after `fit` the layers are their own again. Shorter
    packings keep their kernels and lengths."""
    from electra_tf.layers import activations, fused_layer_normalization
    from electra_tf.models import task
    from electra_tf.training.runtime import runs_training_kernels
    from electra_tf.training.runtime_options import RuntimeOptions
    from conftest import traces

    monkeypatch.setattr(task, "LONG_INPUT_LENGTH", 48)  # the tiny model has 128 positions
    texts, labels = _sentiment(16)
    kernels = (activations._gelu, fused_layer_normalization._forward)
    during = []

    def trained(sequence_length, training_kernels=None):
        keras.utils.set_random_seed(0)
        clf = electra_tf.ElectraTextClassifier.from_pretrained(
            pretrained_dir, label_names=["neg", "pos"], sequence_length=sequence_length,
            dropout=0.0)
        for layer in clf.encoder._flatten_layers():
            if isinstance(layer, keras.layers.Dropout):
                layer.rate = 0.0  # the kernels' dropout draws other masks
        if training_kernels is not None:
            clf.training_kernels = training_kernels
        nine = {"input_mask": tf.constant([[1] * 9 + [0] * (sequence_length - 9)])}
        seen = keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_, **__: during.append(
            (runs_training_kernels(clf.encoder),
             clf.cut_padding_tail(nine)["input_mask"].shape[1])))
        history = clf.fit(texts, labels, batch_size=8, epochs=2, verbose=0, callbacks=[seen])
        assert not runs_training_kernels(clf.encoder)
        return clf, history.history["loss"]

    before = traces(*kernels)
    reference, reference_loss = trained(48, RuntimeOptions(
        fused_gelu=False, fused_dropout=False, fused_layer_norm=False))
    assert traces(*kernels) == before and during == [(False, 9)] * 4  # turned off
    short, _ = trained(40)
    assert traces(*kernels) == before and during[4:] == [(False, 9)] * 4  # too short
    long, long_loss = trained(48)
    assert all(now > then for now, then in zip(traces(*kernels), before))
    assert during[8:] == [(True, 16)] * 4
    np.testing.assert_allclose(long_loss, reference_loss, rtol=1e-4)
    batch = reference.preprocessor(texts[:4])
    np.testing.assert_allclose(long(batch), reference(batch), atol=1e-4)

    # The lengths: the last real token's position rounded up to a multiple of 8 up to
    # 128, of 32 beyond, within the packed length.
    lengths = {1: 8, 8: 8, 9: 16, 128: 128, 129: 160, 250: 256, 383: 384, 290: 300}
    for last, expected in lengths.items():
        full = 300 if last == 290 else 384
        mask = tf.constant([[1] * last + [0] * (full - last)])
        cut = task.without_padding_tail({"input_mask": mask}, bucketed=True)["input_mask"]
        assert cut.shape[1] == expected, last
    assert task.without_padding_tail({"input_mask": mask})["input_mask"].shape[1] == 290
