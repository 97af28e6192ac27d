"""`ElectraTask`: what every task model shares (keras-hub's `Task`: the preprocessor is
applied by `fit`, `evaluate` and `predict`), plus the official fine-tuning recipe."""

import math

import keras
import keras_hub
import numpy as np
import tensorflow as tf
from keras.src.backend.tensorflow.trainer import (convert_to_np_if_not_ragged,
                                                  potentially_ragged_concat)
from keras.src.models.functional import Functional
from keras.src.trainers.data_adapters.array_slicing import train_validation_split
from keras_hub.src.utils.pipeline_model import PipelineModel

from electra_tf.config import preset_of_size
from electra_tf.tf_runtime import products_run_on_onednn, without_autotuning
from electra_tf.errors import ConfigError
from electra_tf.layers.closed_form_layer_normalization import ONEDNN_LAYER_NORM_MIN_ROWS
from electra_tf.layers.encoder import INPUT_NAMES
from electra_tf.layers.flat_dense import (SPLIT_MAX_ROWS, SPLIT_MAX_ROWS_ACTIVATED,
                                           FlatDense)
from electra_tf.layers.inference import inference_only, onednn_layer_norms, small_forms
from electra_tf.layers.initializers import weight_initializer
from electra_tf.layers.query_first_attention import SMALL_ATTENTION_MAX_SCORES
from electra_tf.models import length_order, serving
from electra_tf.models.finetuned import load_task_model
from electra_tf.models.packed_batches import PackedBatches
from electra_tf.models.preprocessor import ElectraPreprocessor
from electra_tf.models.sources import open_model
from electra_tf.traced import concrete_calls
from electra_tf.training import finetuning_recipe, optimization
from electra_tf.training.graph_optimization import (one_optimization_round,
                                                     optimized_in_one_round)
from electra_tf.training.runtime import (cpu_bfloat16, runs_training_kernels,
                                         training_kernels)
from electra_tf.training.runtime_options import RuntimeOptions

# Keras's default batch size, which `fit` uses when given arrays without one.
KERAS_BATCH_SIZE = 32
# Inputs that `predict` and `evaluate` pack themselves, not through a `tf.data` pipeline.
IN_MEMORY = (list, tuple, dict, np.ndarray, tf.Tensor, tf.RaggedTensor)
# The most rows (examples x positions) a packed batch may give the encoder for every size
# that `inference.form_by_size` reads to be within its limit: the products' rows and the
# attentions' scores per head (at most rows squared): one text of a few dozen tokens.
SMALL_FORMS_MAX_ROWS = min(SPLIT_MAX_ROWS, SPLIT_MAX_ROWS_ACTIVATED,
                           math.isqrt(SMALL_ATTENTION_MAX_SCORES))
# How many such batches `predict` runs through Keras's function before it traces one with
# the small forms for them (`ElectraTask._predict_function_for` says why).
SMALL_FORMS_AFTER_BATCHES = 100
# How many rows of batches of at least `ONEDNN_LAYER_NORM_MIN_ROWS` `predict` runs through
# Keras's function before it traces one with oneDNN's layer norms for them, where oneDNN
# is on (`ElectraTask._predict_function_for` says why).
ONEDNN_NORMS_AFTER_ROWS = 50_000
# `fit` on inputs packed to at least LONG_INPUT_LENGTH positions runs the training kernels,
# each batch's encoder reading a bucketed length (`bucketed_length`; `ElectraTask.fit` says
# why).
LONG_INPUT_LENGTH = 256


# What Keras puts into a class hierarchy to make a subclass of `keras.Model` functional.
FUNCTIONAL_ONLY = frozenset(Functional.__mro__) - frozenset(keras.Model.__mro__)


class SubclassedTaskType(type):
    """Keeps our task models subclassed when a keras-hub functional task is built.

    Building a functional subclass of `keras.Model` (keras-hub's `BertTextClassifier`, ...)
    makes Keras set the bases of every class up to `keras.Model` to put `Functional` first
    (keras#17270), keras-hub's `PipelineModel` included, which ours share: ours would then
    run `Functional`'s methods ("no attribute '_inputs'"). Python asks a class's metaclass
    for its method resolution order whenever the bases of a class above it change.
    """

    def mro(cls):
        return [base for base in super().mro() if base not in FUNCTIONAL_ONLY]


class ElectraTask(keras_hub.models.Task, metaclass=SubclassedTaskType):
    """An encoder, a task head and (optionally) the preprocessor that feeds them.

    With a preprocessor, `fit`, `evaluate` and `predict` take raw strings (keras-hub's
    pattern); `preprocessor=None` takes packed `input_word_ids`, `input_mask`,
    `input_type_ids`. Calling the model itself always takes packed inputs.

    `compile()` with no optimizer (what a new model is compiled with) makes each `fit`
    train with the official ELECTRA fine-tuning recipe over the steps that `fit` runs
    (`official_optimizer`); `compile(optimizer=...)` trains with yours. `loss` and
    `metrics` default to the task's own.

    Subclasses set `self.encoder` and their head before calling `super().__init__`.
    """

    def __init__(self, *args, **kwargs):
        # keras-hub's `PipelineModel.__init__` resets its own bases (its workaround for
        # keras#17270), which would take `Functional` from keras-hub's functional task
        # models built before this one; ours need no reset (`SubclassedTaskType`).
        bases = PipelineModel.__bases__
        try:
            super().__init__(*args, **kwargs)
        finally:
            PipelineModel.__bases__ = bases
        # The heads' weights now, named as a forward pass would name them: `build` then
        # runs no pass through an encoder built already (eager, ~0.26 s for ELECTRA-Small
        # before a first `predict`, `fit` or `evaluate`; 2-core AMD EPYC, AVX2).
        with keras.name_scope(self.name):
            for head, input_width in self.head_input_widths():
                head.build((None, input_width))
        self.training_kernels = RuntimeOptions()  # unset: on for long inputs, see `fit`

    def head_input_widths(self) -> list:
        """(layer, the width of its inputs) of every layer with weights besides the
        encoder."""
        return [(self.head, self.encoder.hidden_size)]

    @property
    def backbone(self):
        return self.encoder

    @property
    def _backbone(self):  # where keras-hub's Task reads it
        return self.encoder

    @backbone.setter
    def backbone(self, value):
        if value is not None:
            raise AttributeError("ElectraTask's backbone is its `encoder`.")

    def _init_dense_head(self, encoder, preprocessor, num_classes, dropout: float,
                         initializer_range: float, label_names) -> None:
        """Sets the encoder, the preprocessor and a dropout + dense head of `num_classes`
        outputs (default: one per `label_names`), named by `label_names` if given."""
        if num_classes is None:
            if not label_names:
                raise ConfigError("Give num_classes or label_names.")
            num_classes = len(label_names)
        if label_names is not None and len(label_names) != num_classes:
            raise ConfigError(f"{len(label_names)} label_names for num_classes="
                              f"{num_classes}.")
        self.encoder = encoder
        self.preprocessor = preprocessor
        self.num_classes = num_classes
        self.dropout_rate = dropout
        self.initializer_range = initializer_range
        self.label_names = None if label_names is None else [str(n) for n in label_names]
        self.dropout = keras.layers.Dropout(dropout)
        # Heads compute in float32 under mixed precision: logits feed losses and softmaxes.
        self.head = FlatDense(
            num_classes, name="task_head", dtype="float32",
            kernel_initializer=weight_initializer(initializer_range))

    def _dense_head_config(self) -> dict:
        """The constructor arguments `_init_dense_head` took, for `get_config`."""
        return {"num_classes": self.num_classes, "dropout": self.dropout_rate,
                "initializer_range": self.initializer_range, "label_names": self.label_names}

    def task_loss(self):
        raise NotImplementedError

    def task_metrics(self) -> list:
        raise NotImplementedError

    def task_loss_weights(self):
        """The weights of a multi-output task loss; None for one output."""
        return None

    def compile(self, optimizer="auto", loss="auto", metrics="auto", **kwargs):
        self.uses_official_recipe = optimizer == "auto"
        if loss == "auto":
            kwargs.setdefault("loss_weights", self.task_loss_weights())
        loss = self.task_loss() if loss == "auto" else loss
        metrics = self.task_metrics() if metrics == "auto" else metrics
        # Kept for `compile_official_recipe`, outside Keras's tracking of layer state.
        object.__setattr__(self, "_compile_arguments",
                           {"loss": loss, "metrics": metrics, **kwargs})
        # A placeholder until `fit` knows its step count (the schedule spans them).
        optimizer = keras.optimizers.Adam() if self.uses_official_recipe else optimizer
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def fit(self, x=None, y=None, batch_size=None, epochs=1, steps_per_epoch=None,
            shuffle=None, sample_weight=None, validation_split=0.0, validation_data=None,
            validation_batch_size=None, **kwargs):
        """Keras's `fit`; in-memory examples (arrays, lists, of strings or words too) are
        batched as a dataset of examples (lists of words are ragged, which keras-hub's
        pipeline cannot batch) and, with `shuffle`, shuffled every epoch, as Keras does
        (keras-hub's pipeline would feed them in order); so is in-memory `validation_data`
        (in its order, in batches of `validation_batch_size`, else `batch_size`), or
        without it, the last `validation_split` of the in-memory examples, held out before
        shuffling as Keras holds them out. Datasets, given or made here, go without
        `tf.data`'s autotuning (`without_autotuning`). Its functions are optimised in
        `one_optimization_round`. `shuffle`: `optimization.fit_shuffle`'s default.

        Inputs packed to at least `LONG_INPUT_LENGTH` positions (question answering's 384)
        train with the training kernels (`training.runtime.training_kernels`: the GELU,
        dropout and layer norms as small XLA kernels, each unless `self.training_kernels`
        turns it off), and each batch's encoder reads up to its last real token rounded up
        to a `bucketed_length` (`cut_padding_tail`): XLA compiles a kernel for every shape,
        and the buckets bound them (24 lengths at 384). ELECTRA-Small fitting batches of 16
        questions over 100-200-word passages (150-280 positions; 2-core Sapphire Rapids):
        later steps 0.86-0.90x the time, a fresh process's first 8 steps 16.2-16.8 s
        against 17.3-17.6, compilations included; sentences of ~40 positions 0.94-0.97x.
        Shorter packings keep their exact lengths and the layers' own kernels: a short run
        would spend more on compiling than the kernels save. Models computing in bfloat16
        on a CPU take the fused GELU there too, over each batch's rows padded to one of a few sizes
        (`RuntimeOptions.for_run` says why). The kernels are the layers' own again after
        `fit`; its functions keep what they traced."""
        shuffle = optimization.fit_shuffle(x, shuffle)
        if isinstance(validation_data, tuple):
            validation_data = batched(self.examples_dataset(*validation_data),
                                      validation_batch_size or batch_size)
        if x is not None and not isinstance(x, tf.data.Dataset):
            parts = self.example_parts(x, y, sample_weight)
            if validation_split and validation_data is None:
                # Keras's split, on the examples as tensors: its `fit` refuses lists.
                parts, held_out = train_validation_split(parts, validation_split)
                validation_data = batched(examples_as_dataset(held_out),
                                          validation_batch_size or batch_size)
            x = examples_as_dataset(parts)
            if shuffle:
                x = x.shuffle(int(x.cardinality()), reshuffle_each_iteration=True)
            x = batched(x, batch_size)
            y = sample_weight = batch_size = None
            validation_split, shuffle = 0.0, False  # done
        if isinstance(x, tf.data.Dataset) and steps_per_epoch is None:
            x, steps_per_epoch = one_iterator_a_run(x)
        if getattr(self, "uses_official_recipe", False):
            self.compile_official_recipe(epochs * (steps_per_epoch or _steps_per_epoch(x)))
        if (isinstance(validation_data, tf.data.Dataset)
                and kwargs.get("validation_steps") is None):
            validation_data, kwargs["validation_steps"] = one_iterator_a_run(validation_data)
        optimization.build_optimizer_before_fit(self)
        long_inputs = (self.packed_length(x) or 0) >= LONG_INPUT_LENGTH
        kernels = self.training_kernels.for_run(
            few_shapes=long_inputs and not self.jit_compile,
            cpu_bfloat16=cpu_bfloat16(self.encoder.compute_dtype == "bfloat16")
            and not self.jit_compile)
        with one_optimization_round(self.compute_dtype), training_kernels(self, kernels):
            return super().fit(without_autotuning(x), y, batch_size=batch_size, epochs=epochs,
                               steps_per_epoch=steps_per_epoch, shuffle=shuffle,
                               sample_weight=sample_weight, validation_split=validation_split,
                               validation_data=without_autotuning(validation_data),
                               validation_batch_size=validation_batch_size, **kwargs)

    @optimized_in_one_round
    @inference_only()
    def predict(self, x=None, batch_size=None, **kwargs):
        """keras-hub's `predict`, except that
        - in-memory inputs (lists, arrays, tensors, or a tuple / dict of them) are packed
          in eager mode batch by batch (`PackedBatches`): a call on a few texts takes the
          model's time, not ~0.5 s more; more than a batch of them run shortest first
          (`length_order`), each batch's encoder reading up to its own longest example,
          and the outputs come back in the inputs' order (unless `steps` or `callbacks`
          ask for Keras's batches as given);
        - a `tf.data.Dataset`'s batches, in their order, are packed eagerly as they come
          (`_packed_elements`), not by keras-hub's `tf.data` map, and read without
          `tf.data`'s autotuning (`without_autotuning`; in Keras's loop too);
        - both run without Keras's loop (`_predict_batches` says why), with its progress
          bar when `verbose` asks for one (for a single batch, only when it asks
          explicitly), unless `callbacks` or `steps` ask for the loop or the model has
          several replicas.
        The predict function is optimised in `one_optimization_round`, as `fit`'s are, and
        traced `inference_only`."""
        keras_batches_seen = kwargs.get("callbacks") or kwargs.get("steps")
        own_loop = (not keras_batches_seen
                    and self.distribute_strategy.num_replicas_in_sync == 1)
        if isinstance(x, tf.data.Dataset):
            if batch_size is not None:
                raise ConfigError(f"predict got batch_size={batch_size} with a "
                                  "tf.data.Dataset, whose batches are its own: batch the "
                                  "dataset instead.")
            if own_loop:
                count = int(x.cardinality())  # negative: infinite or unknown
                return self._predict_batches(self._packed_elements(x),
                                             count if count >= 0 else None,
                                             kwargs.get("verbose", "auto"))
        if not isinstance(x, IN_MEMORY):
            return super().predict(without_autotuning(x), batch_size=batch_size, **kwargs)
        batch_size = batch_size or KERAS_BATCH_SIZE
        batches = PackedBatches(self.example_parts(x), self.preprocess_samples, batch_size)
        order = None
        if len(batches) > 1 and not keras_batches_seen:
            order = length_order.shortest_first(batches.parts[0])
            if order is not None:
                batches = PackedBatches(length_order.take(batches.parts, order),
                                        self.preprocess_samples, batch_size)
        if own_loop:
            outputs = self._predict_batches(batches, len(batches),
                                            kwargs.get("verbose", "auto"))
        else:
            # Keras's loop splits each batch between replicas, which would each get it
            # whole. Keras's own `predict`: keras-hub's would map the preprocessing over
            # the batches again.
            kwargs.setdefault("steps", len(batches))  # for Keras's progress bar
            outputs = keras.Model.predict(self, batches.dataset(), **kwargs)
        return outputs if order is None else length_order.restore(outputs, order)

    def _predict_batches(self, batches, count, verbose):
        """Keras's `predict` of packed `batches` (an iterable; `count` of them, or None
        where unknown) without callbacks or steps, on one replica: the same predict
        function on the same batches, the outputs concatenated as Keras concatenates them,
        a progress bar as Keras's (none for one batch unless `verbose` is 1 or 2).

        Why not Keras's loop: its data adapter, iterator and callbacks cost ~50 ms a call,
        more than ELECTRA-Small takes on a few texts, and the same batches fed through its
        `tf.data` iterator ran up to 2x slower in some calls, at the same CPU time with the
        two cores less busy, which `tf.data`'s autotuning brings (ELECTRA-Small on demo
        texts, ms a call: 64 texts 352-362 or 654 against 303-313 here, 600 texts
        2,744-2,762 or 5,133-5,135 against 2,701-2,744; 2-core AMD EPYC, AVX2). For a
        dataset the loop also opens a second iterator at the end, for an epoch that
        `predict` never runs (58-121 ms with keras-hub's map of the preprocessing).

        Batches of at most `SMALL_FORMS_MAX_ROWS` rows (single short texts), and where
        oneDNN is on those of at least `ONEDNN_LAYER_NORM_MIN_ROWS`, run through a predict
        function of their own once there have been enough of them
        (`_predict_function_for`)."""
        self.make_predict_function()
        if verbose == "auto":
            verbose = 0 if count == 1 else 1
        progress = (keras.utils.Progbar(count, verbose=verbose, unit_name="step")
                    if verbose else None)
        outputs = []
        for batch in batches:
            outputs.append(self._predict_function_for(batch)([batch]))
            if progress:
                progress.update(len(outputs), finalize=len(outputs) == count)
        if not outputs:
            raise ConfigError("predict got an empty dataset: give it at least one batch.")
        if progress and count is None:
            progress.update(len(outputs), finalize=True)
        # Keras's own concatenation: arrays, ragged where the batches' shapes differ.
        outputs = tf.nest.map_structure(lambda *parts: potentially_ragged_concat(list(parts)),
                                        *outputs)
        return tf.nest.map_structure(convert_to_np_if_not_ragged, outputs)

    def _predict_function_for(self, batch):
        """The predict function for a packed `batch`: Keras's (`make_predict_function`),
        or one of its own for the batches of a form once those batches have lost about
        what its trace costs: traced `small_forms()` (the split products and the small
        attentions) for batches of at most `SMALL_FORMS_MAX_ROWS` rows after the first
        `SMALL_FORMS_AFTER_BATCHES` of them; where oneDNN is on, traced
        `onednn_layer_norms()` for batches of at least `ONEDNN_LAYER_NORM_MIN_ROWS` rows
        after `ONEDNN_NORMS_AFTER_ROWS` rows of them.

        Why: with the sizes unknown when it traces, Keras's function takes the forms for
        large batches, and layer norms as TensorFlow's separate passes, which oneDNN's
        kernel beats only on large batches. The small forms answer one short text in
        7.0-7.1 ms instead of 11.6-11.9; oneDNN's layer norms 32 long texts in 283 ms
        instead of 311, 32 short ones in 66 instead of 72 (~8 µs a row). But a second
        function costs a trace (~0.6 s; ~0.45 s for the layer norms' one) and picking the
        form per call (`tf.cond`, as exports do) ~0.45 s more in the first trace
        (ELECTRA-Small classifier, 2-core Sapphire Rapids). So each trace is bought once
        the batches it serves have lost about what it costs (a ski rental): a process that
        predicts a few texts pays nothing, and none loses more than about twice what the
        right choice, known in advance, would have lost."""
        # Static shapes (`form_by_size` reads the sizes when tracing), or lengths rounded
        # up (`cut_padding_tail`): not the rows the forms are bought for.
        if self.jit_compile or runs_training_kernels(self.encoder):
            return self.predict_function
        rows = _encoder_rows(batch)
        if rows is None:
            return self.predict_function
        if rows <= SMALL_FORMS_MAX_ROWS:
            form, spent, bought_after = small_forms, 1, SMALL_FORMS_AFTER_BATCHES
        elif rows >= ONEDNN_LAYER_NORM_MIN_ROWS and products_run_on_onednn():
            form, spent, bought_after = onednn_layer_norms, rows, ONEDNN_NORMS_AFTER_ROWS
        else:
            return self.predict_function
        rentals = getattr(self, "_predict_rentals", None)
        if rentals is None or rentals.keras_function is not self.predict_function:
            rentals = self._predict_rentals = _PredictRentals(self.predict_function)
        function, lost = rentals.by_form.get(form, (None, 0))
        lost += spent
        if function is None and lost > bought_after:
            function = self.make_predict_function(force=True)
            self.predict_function = rentals.keras_function
        rentals.by_form[form] = (function, lost)
        if function is None:
            return self.predict_function

        def predict_in_form(data):
            with form():  # read by its first call, which traces
                return function(data)

        return predict_in_form

    def _packed_elements(self, dataset: tf.data.Dataset):
        """The batches of `dataset`, read without `tf.data`'s autotuning, each passed
        through `preprocess_samples` eagerly, as a `tf.data` map would pass it (a tuple
        element as its parts).

        Why not keras-hub's map: every call builds a new pipeline, in which `tf.data`
        traces the preprocessing anew and instantiates it with each iterator (66 ms and
        58-121 ms with ELECTRA-Small's tokenizer), more than the model takes on a few
        texts; eager packing traces nothing (`PackedBatches` says more). ELECTRA-Small
        on demo texts in batches of 32, ms a call through Keras's loop and keras-hub's map
        against here: 1 text 215 / 28, 8 texts 248 / 66, 64 texts 590 / 493, 600 texts
        6,692 / 5,128 (2-core AMD EPYC, AVX2)."""
        for element in without_autotuning(dataset):
            yield self.preprocess_samples(*(element if type(element) is tuple
                                            else (element,)))

    @optimized_in_one_round
    @inference_only()
    def evaluate(self, x=None, y=None, batch_size=None, sample_weight=None, **kwargs):
        """keras-hub's `evaluate`, except that in-memory inputs are packed as `predict`
        packs them (in their order: the loss summed per batch, as the official recipe
        sums it, depends on which examples share a batch), with labels as `fit` takes
        them; a dataset without `tf.data`'s autotuning, read by one iterator
        (`one_iterator_a_run`); optimised as `predict`."""
        self.build_weights()  # before Keras traces: as in `make_predict_function`
        if isinstance(x, tf.data.Dataset) and kwargs.get("steps") is None:
            x, kwargs["steps"] = one_iterator_a_run(x)
        if not isinstance(x, IN_MEMORY):
            return super().evaluate(without_autotuning(x), y, batch_size=batch_size,
                                    sample_weight=sample_weight, **kwargs)
        batches = PackedBatches(self.example_parts(x, y, sample_weight),
                                self.preprocess_samples, batch_size or KERAS_BATCH_SIZE)
        kwargs.setdefault("steps", len(batches))  # for Keras's progress bar
        return keras.Model.evaluate(self, batches.dataset(), **kwargs)

    def make_predict_function(self, force=False):
        """Keras's predict function, traced once for every batch size: Keras's own traces
        the first call's exact shapes, then again generalised ones at the next batch size
        (~1.3 s more for ELECTRA-Small); this one traces the generalised ones first, and is
        called through its concrete functions (`traced.concrete_calls`)."""
        if self.predict_function is not None and not force:
            return self.predict_function
        # Weights created while tracing would make TensorFlow trace again, and cannot be
        # created in a trace of unknown shapes under a MirroredStrategy.
        self.build_weights()
        super().make_predict_function(force)
        if self.run_eagerly:
            return self.predict_function
        self.predict_function = concrete_calls(self.predict_function, _any_batch_size)
        return self.predict_function

    def cut_padding_tail(self, inputs: dict, min_length: int = 1) -> dict:
        """The encoder's inputs cut after the batch's last real token
        (`without_padding_tail`; every task model's outputs allow it), at a
        `bucketed_length` where the encoder runs the training kernels (`fit` says why), or
        as they are when XLA compiles the model, whose shapes must be static."""
        if self.jit_compile:
            return inputs
        return without_padding_tail(inputs, min_length,
                                    bucketed=runs_training_kernels(self.encoder))

    def packed_length(self, x) -> int | None:
        """The positions `fit`'s inputs `x` are packed to: the preprocessor's
        `sequence_length`, else a dataset's `input_mask` length where it has one."""
        if self.preprocessor is not None:
            return self.preprocessor.sequence_length
        if not isinstance(x, tf.data.Dataset):
            return None
        spec = x.element_spec[0] if isinstance(x.element_spec, tuple) else x.element_spec
        mask = spec.get("input_mask") if isinstance(spec, dict) else None
        return None if mask is None or mask.shape.rank != 2 else mask.shape[1]

    @tf.autograph.experimental.do_not_convert
    def preprocess_samples(self, x, y=None, sample_weight=None):
        """keras-hub's, traced as written where `fit` maps it over a dataset (see
        `electra_tf.traced`); subclasses that write their own keep the decorator."""
        return super().preprocess_samples(x, y, sample_weight)

    def example_tensors(self, x):
        """In-memory inputs (of `fit`, `evaluate`, `predict`) as tensors, one example per
        row."""
        return _tensors(x)

    def label_tensors(self, y):
        """In-memory labels (of `fit`, `evaluate`) as tensors, one example per row; None
        stays None."""
        return _tensors(y)

    def example_parts(self, x, y=None, sample_weight=None) -> tuple:
        """In-memory inputs, labels and sample weights (of `fit`, `evaluate`, `predict`) as
        tensors, one example per row; None stays None."""
        return self.example_tensors(x), self.label_tensors(y), _tensors(sample_weight)

    def examples_dataset(self, x, y=None, sample_weight=None) -> tf.data.Dataset:
        """One element per example of the arrays (or lists) `fit` was given."""
        return examples_as_dataset(self.example_parts(x, y, sample_weight))

    def compile_official_recipe(self, total_steps: int, **recipe) -> None:
        """Compiles with `official_optimizer(total_steps, **recipe)` and the loss and
        metrics of the last `compile`; a later `fit` keeps this optimizer. Under the
        model's distribution strategy: `fit` calls this outside its scope, and an
        optimizer made outside cannot build the model's variables."""
        self.build_weights()
        if not hasattr(self, "_compile_arguments"):  # built with compile=False
            self.compile()
        with self.distribute_strategy.scope():
            super().compile(optimizer=self.official_optimizer(total_steps, **recipe),
                            **self._compile_arguments)
        self.uses_official_recipe = False

    def official_optimizer(self, total_steps: int, learning_rate=None, layerwise_decay=None,
                           **recipe):
        """The official fine-tuning optimizer (`optimization.create_finetuning_optimizer`)
        for `total_steps`; the learning rate defaults to the paper's for the encoder's
        size (3e-4 Small, 1e-4 Base, 5e-5 Large), the layer-wise decay to 0.8 (0.9 for
        24 layers)."""
        self.build_weights()
        encoder = self.encoder
        size = preset_of_size(encoder.embeddings.embedding_size, encoder.hidden_size,
                              encoder.num_layers, encoder.num_heads,
                              encoder.intermediate_size)
        return optimization.create_finetuning_optimizer(
            self, encoder, total_steps,
            learning_rate or finetuning_recipe.finetuning_learning_rate(size),
            layerwise_decay or finetuning_recipe.finetuning_layerwise_decay(encoder.num_layers),
            **recipe)

    def build_weights(self) -> None:
        """Creates every weight (one forward pass on a dummy packed batch), under the
        model's distribution strategy."""
        if not self.built:
            with self.distribute_strategy.scope():
                self.build()

    def build(self, input_shape=None):
        # keras-hub's Task.build only marks the model built; `load_model` needs every
        # weight created before it restores them: a forward pass creates those of an
        # encoder made from its config.
        if any(not layer.built for layer in self._flatten_layers(include_self=False,
                                                                   recursive=False)
               if layer is not self.preprocessor):
            self.call(self.example_inputs(np.zeros((1, 8), np.int32)))
        self.built = True

    def example_inputs(self, ids) -> dict:
        """Packed inputs of all-`ids` tokens, for building the model."""
        return {"input_word_ids": ids, "input_mask": np.ones_like(ids),
                "input_type_ids": np.zeros_like(ids)}

    def serving_signatures(self) -> dict:
        """{signature name: tf.function}, "serving_default" first: raw strings in,
        predictions out, every tensor dense (as TF Serving needs)."""
        raise ConfigError(f"{type(self).__name__} has no serving export yet: export the "
                          "encoder (electra-export-encoder) and decode its outputs "
                          "client-side.")

    def export_serving(self, output: str, model_name=None, versions: int = 0,
                       constant_weights: bool = False) -> dict:
        """Writes a TF Serving version (raw strings in, see `serving_signatures`) under the
        model base directory `output` (the next version) or into the version directory
        `output/<n>`; as `electra-export-classifier` does. `constant_weights`: the weights
        in the graph, for faster small requests at more memory
        (`serving.weights_as_constants`)."""
        if self.preprocessor is None:
            raise ConfigError("This model has no preprocessor, so it cannot take raw "
                              "strings: give it one (ElectraPreprocessor) to export it.")
        # Every weight before the trace, which reads them as constants (and creates none).
        self.build_weights()
        return serving.write_serving_version(self, self.serving_signatures(),
                                             self.preprocessor.tokenizer, output,
                                             model_name, versions, constant_weights)

    @classmethod
    def from_pretrained(cls, name_or_path: str, sequence_length=128, **kwargs):
        """The task model over a pretrained encoder (any source `electra_tf.resolve`
        takes: catalog name, `hf:ORG/REPO`, URL, local HF / official / keras-hub /
        electra_tf run directory), with its preprocessor packing to `sequence_length`;
        `kwargs` are the class's own (`num_classes`, `label_names`, ...). Given a
        fine-tuned run directory (`electra-finetune --model_dir`), that run's model,
        ready to predict."""
        source = open_model(name_or_path)
        if source.finetuned is not None:
            return load_task_model(source.finetuned, cls)
        return cls(source.encoder(),
                   preprocessor=ElectraPreprocessor.of_model(source, sequence_length),
                   initializer_range=source.config.initializer_range, **kwargs)

    def get_config(self):
        return {"encoder": keras.saving.serialize_keras_object(self.encoder),
                "preprocessor": keras.saving.serialize_keras_object(self.preprocessor),
                "name": self.name}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        for key in ("encoder", "preprocessor"):
            if isinstance(config.get(key), dict):
                config[key] = keras.saving.deserialize_keras_object(config[key])
        return cls(**config)


class _PredictRentals:
    """For one Keras predict function (`keras_function`; a new one, after `compile` say,
    starts anew), `predict`'s functions of other forms: {form: (its function, or None
    before it is bought, and what Keras's function has lost on its batches so far)}
    (`ElectraTask._predict_function_for`). A plain object: Keras would copy a dict set
    on a model into one it tracks."""

    def __init__(self, keras_function):
        self.keras_function = keras_function
        self.by_form = {}


def _encoder_rows(batch):
    """The rows a packed `batch` gives the encoder: examples x positions up to the batch's
    last real token (as `without_padding_tail` cuts), or None where the batch holds no
    `input_mask`."""
    inputs = batch[0] if isinstance(batch, tuple) else batch
    mask = inputs.get("input_mask") if isinstance(inputs, dict) else None
    if mask is None:
        return None
    mask = np.asarray(mask)
    if not mask.size:
        return 0
    return mask.shape[0] * max(int((np.arange(1, mask.shape[1] + 1) * mask).max()), 1)


def _any_batch_size(value):
    """A batched tensor's (or array's) spec with its batch size left open; anything else
    as it is."""
    if isinstance(value, (tf.Tensor, np.ndarray)) and len(value.shape):
        return tf.TensorSpec([None, *value.shape[1:]], tf.as_dtype(value.dtype))
    return value


def _tensors(value):
    """Arrays, lists, tensors, or a tuple / dict of them, as tensors; None stays None."""
    if value is None or isinstance(value, tf.RaggedTensor):
        return value
    if isinstance(value, tuple):
        return tuple(_tensors(part) for part in value)
    if isinstance(value, dict):
        return {name: _tensors(part) for name, part in value.items()}
    return tf.convert_to_tensor(value)


def encoder_inputs(inputs: dict) -> dict:
    """The encoder's three inputs out of a task model's inputs."""
    return {name: inputs[name] for name in INPUT_NAMES}


def without_padding_tail(inputs: dict, min_length: int = 1, bucketed: bool = False) -> dict:
    """The encoder's inputs cut after the batch's last real token (keeping at least
    `min_length` positions, where there are), at its `bucketed_length` if `bucketed`.

    A transformer spends as much on a padding position as on a word, and inputs are padded
    to the full packed length (128 by default) where most sentences fill a fifth of it;
    the outputs at the real positions do not depend on the padding (attention masks it).
    Needs dynamic shapes: not under XLA.
    """
    mask = tf.cast(inputs["input_mask"], tf.int32)
    positions = tf.range(1, tf.shape(mask)[1] + 1)[None]
    length = tf.maximum(tf.reduce_max(positions * mask), min_length)
    if bucketed:
        length = bucketed_length(length, tf.shape(mask)[1])
    return {name: tf.convert_to_tensor(value)[:, :length] for name, value in inputs.items()}


def bucketed_length(length, packed_length):
    """`length` (a scalar int32 tensor) rounded up to a multiple of 8 up to 128, of 32
    beyond, and at most `packed_length`: 16 lengths up to 128, and 8 more at 384; 3.5 and
    15.5 positions more on average."""
    step = tf.where(length > 128, 32, 8)
    return tf.minimum((length + step - 1) // step * step, packed_length)


def at_packed_length(values, inputs: dict, fill=0.0):
    """`values` [batch, cut length, ...] computed on `inputs` cut by
    `without_padding_tail`, given back at their packed length, the cut positions `fill`."""
    missing = tf.shape(inputs["input_mask"])[1] - tf.shape(values)[1]
    paddings = [[0, 0], [0, missing]] + [[0, 0]] * (len(values.shape) - 2)
    return tf.pad(values, paddings, constant_values=fill)


def examples_as_dataset(parts: tuple) -> tf.data.Dataset:
    """One element per example of `parts` (inputs, labels, sample weights: tensors, one
    example per row; None where absent)."""
    return tf.data.Dataset.from_tensor_slices(keras.utils.pack_x_y_sample_weight(*parts))


def batched(dataset: tf.data.Dataset, batch_size=None) -> tf.data.Dataset:
    """`dataset` in batches of `batch_size` (Keras's default 32); examples of varying
    length (words of sentences) batch as ragged tensors."""
    variable = any(None in spec.shape for spec in tf.nest.flatten(dataset.element_spec))
    batch_size = batch_size or KERAS_BATCH_SIZE
    return dataset.ragged_batch(batch_size) if variable else dataset.batch(batch_size)


def one_iterator_a_run(dataset: tf.data.Dataset) -> tuple:
    """`dataset` repeated and its batches, as `fit` and `evaluate` take them
    (`steps_per_epoch`, `validation_steps`, `steps`); as it is and None where its length is
    unknown, infinite or 0.

    Why: given a dataset of known length, Keras's loop opens an iterator at each epoch's
    start and another at its end that nothing reads, and each instantiates keras-hub's map
    of the preprocessing and starts reading ahead: 2 of ~49 ms an epoch for an
    ELECTRA-Small classifier (2-core Sapphire Rapids). Repeated, with the steps given, one
    iterator serves the whole `fit` (one per evaluation of validation data) or
    `evaluate`, and a dataset's `shuffle` still reshuffles every epoch."""
    batches = int(dataset.cardinality())
    if batches <= 0:
        return dataset, None
    return dataset.repeat(), batches


def _steps_per_epoch(dataset: tf.data.Dataset) -> int:
    """The batches `fit` draws from `dataset` in one epoch."""
    batches = int(dataset.cardinality())
    if batches < 0:
        raise ConfigError("fit() on a dataset of unknown or infinite length: pass "
                          "steps_per_epoch=N, so the official learning-rate schedule "
                          "can span the run, or compile() your own optimizer first.")
    return batches
