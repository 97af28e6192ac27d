"""How the layers trace for inference. `inference_only()`: functions traced within take
no gradients, so the layers whose gradient is written by hand trace their forward pass
alone. `forms_per_call()`: functions traced within pick some ops' form per call
(`form_by_size`), by sizes read off the sequences' shape where `sequence_batch` gives it;
`small_forms()` and `large_forms()`: functions traced within pick the small forms, or the
large ones; `onednn_trial_at_load()`: functions traced within pick some forms per call by
whether oneDNN multiplies where they run.

Why: `tf.custom_gradient` builds its gradient's graph machinery at every call while
tracing, about 2-5 ms each in Python. ELECTRA-Small's classifier holds 73 (the layer
normalizations' closed-form gradients and the attention's head swaps), about a quarter of
the ~1 s its predict function took to trace. Outputs are the same ops either way, but for
the layer normalizations, which normalize in a cheaper order
(`closed_form_layer_normalization.normalize_for_inference`).
"""

import contextlib
import contextvars
import weakref

import tensorflow as tf

from electra_tf import traced

_inference_only = contextvars.ContextVar("inference_only", default=False)
_forms_per_call = contextvars.ContextVar("forms_per_call", default=False)
_small_forms = contextvars.ContextVar("small_forms", default=False)
_sequence_batch = contextvars.ContextVar("sequence_batch", default=None)
_onednn_trial = contextvars.ContextVar("onednn_trial", default=None)
_onednn_layer_norms = contextvars.ContextVar("onednn_layer_norms", default=False)
_onednn_reads = weakref.WeakKeyDictionary()  # graph -> (trial, its read of the answer)


def inference_only():
    """Within, layers trace without their hand-written gradients. For functions that are
    never differentiated (`predict`, `evaluate`, TF Serving signatures); not for the TF
    Hub-style encoder export, whose users fine-tune through it."""
    return traced.switched(_inference_only, True)


def gradients_wanted() -> bool:
    """False within `inference_only()`."""
    return not _inference_only.get()


def forms_per_call():
    """Within, functions traced for inputs whose shapes are unknown until run time pick the
    form of some inference ops per call (`tf.cond`): each large product split or not
    (`flat_dense.flat_matmul`), the attention on TensorFlow's own kernels or on oneDNN's
    (`query_first_attention`). For exports, which answer single short requests; elsewhere
    such functions keep one form, as the conds' tracing (~1.5 s more for an ELECTRA-Small
    classifier's first `predict`, 2-core AVX-512 EPYC) costs more than they save."""
    return traced.switched(_forms_per_call, True)


def small_forms():
    """Within, functions traced pick the small form of every op whose size is unknown when
    tracing (`form_by_size`). For a function that is called only on inputs whose every such
    size is within its limit: `predict`'s function for batches of few rows
    (`ElectraTask._predict_function_for` says when), traced apart from the one for larger
    batches, so that neither pays for a `tf.cond`."""
    return traced.switched(_small_forms, True)


@contextlib.contextmanager
def large_forms():
    """Within, functions traced pick the large form of every op whose size is unknown when
    tracing (`form_by_size`). For a branch taken only for sizes beyond every such op's
    limit."""
    with traced.switched(_forms_per_call, False), traced.switched(_small_forms, False):
        yield


def forms_picked_per_call() -> bool:
    """Whether functions traced here pick the forms of ops whose sizes are unknown when
    tracing per call: within `forms_per_call()`, outside `small_forms()`."""
    return _forms_per_call.get() and not _small_forms.get()


def form_by_size(size, run_time_size, limit, small, large):
    """`small()` if a size is at most `limit`, else `large()`. `size`: the size where it is
    known when tracing (an int), else None; `run_time_size()` gives it as a scalar tensor,
    read only within `forms_per_call()`, where the form is picked per call (a `tf.cond`);
    elsewhere an unknown size takes `small()` within `small_forms()`, else `large()`.
    `limit`: an int, or within `forms_per_call()` a scalar tensor (known at run time)."""
    if size is not None and not tf.is_tensor(limit):
        return small() if size <= limit else large()
    if forms_picked_per_call():
        return tf.cond((run_time_size() if size is None else size) <= limit, small, large)
    return small() if _small_forms.get() else large()


def sequence_batch(sequences):
    """Within, the layers traced take sequences of the batch that `sequences` ([batch,
    positions], e.g. the input mask) holds: their inputs lead with its two axes and their
    attentions attend from and to its positions. For an encoder's transformer layers.

    Why: a size read off an op's own input waits for that input. An export's short request
    ran a `Shape`, a `StridedSlice` and a `LessEqual` after each product's input and before
    its product, 4 of every layer's products in turn, and 6 ops before each attention, and
    3 more ops per product for the shape of its output; read off `sequences`, which the
    tokenizer gives before the first layer, each size, choice and shape is one op that
    TensorFlow's graph optimiser shares between all the layers. An ELECTRA-Small
    classifier's short single request: 3,040 -> 2,370 nodes, 0.86x the time (2-core
    AVX-512 EPYC Zen 5)."""
    return traced.switched(_sequence_batch, sequences)


def sequence_shape():
    """The run-time [batch, positions] of the enclosing `sequence_batch`, or None."""
    sequences = _sequence_batch.get()
    return None if sequences is None else tf.shape(sequences)


def onednn_trial_at_load(trial):
    """Within, functions traced pick forms per call (`forms_per_call`) also by whether
    oneDNN multiplies where they run, which `trial` (a `OneDnnTrialAtLoad` that the
    SavedModel saves) tried when it was loaded. For TF Serving exports, which run on
    whatever server loads them."""
    return traced.switched(_onednn_trial, trial)


def onednn_at_run_time():
    """A scalar bool tensor, whether oneDNN multiplies where the graph runs, within
    `onednn_trial_at_load()` and `forms_per_call()`; else None. One read per graph traced:
    TensorFlow's optimiser does not merge reads of a variable (ELECTRA-Small's 23 layer
    norms would each run their own)."""
    trial = _onednn_trial.get()
    if trial is None or not forms_picked_per_call():
        return None
    graph = tf.compat.v1.get_default_graph()
    read_trial, read = _onednn_reads.get(graph, (None, None))
    if read_trial is not trial:
        read = trial.onednn_multiplies()
        _onednn_reads[graph] = (trial, read)
    return read


def onednn_layer_norms():
    """Within, functions traced normalize sequences as oneDNN's layer norm
    (`closed_form_layer_normalization.onednn_layer_normalization`) where their rows are
    unknown when tracing. For a function called only on batches of at least
    `ONEDNN_LAYER_NORM_MIN_ROWS` rows in a process where oneDNN is on: `predict`'s
    function for large batches (`ElectraTask._predict_function_for` says when)."""
    return traced.switched(_onednn_layer_norms, True)


def onednn_layer_norms_wanted() -> bool:
    """True within `onednn_layer_norms()`."""
    return _onednn_layer_norms.get()
