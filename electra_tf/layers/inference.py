"""How the layers trace for inference. `inference_only()`: functions traced within take
no gradients, so the layers whose gradient is written by hand trace their forward pass
alone. `forms_per_call()`: functions traced within pick some ops' form per call
(`form_by_size`), by sizes read off the sequences' shape where `sequence_batch` gives it.

Why: `tf.custom_gradient` builds its gradient's graph machinery at every call while
tracing, about 2-5 ms each in Python. ELECTRA-Small's classifier holds 73 (the layer
normalizations' closed-form gradients and the attention's head swaps), about a quarter of
the ~1 s its predict function took to trace. Outputs are the same ops either way, but for
the layer normalizations, which normalize in a cheaper order
(`closed_form_layer_normalization.normalize_for_inference`).
"""

import contextvars

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from electra_tf import traced

_inference_only = contextvars.ContextVar("inference_only", default=False)
_forms_per_call = contextvars.ContextVar("forms_per_call", default=False)
_sequence_batch = contextvars.ContextVar("sequence_batch", default=None)


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
    (`query_first_attention`), the batch whole or in halves (`by_batch_halves`). For
    exports, which answer single short requests; elsewhere such functions keep one form,
    as the conds' tracing (~1.5 s more for an ELECTRA-Small classifier's first `predict`,
    2-core AVX-512 EPYC) costs more than they save."""
    return traced.switched(_forms_per_call, True)


def form_by_size(size, run_time_size, limit, small, large):
    """`small()` if a size is at most `limit`, else `large()`. `size`: the size where it is
    known when tracing (an int), else None; `run_time_size()` gives it as a scalar tensor,
    read only within `forms_per_call()`, where the form is picked per call (a `tf.cond`);
    elsewhere an unknown size takes `large()`."""
    if size is not None:
        return small() if size <= limit else large()
    if not _forms_per_call.get():
        return large()
    return tf.cond(run_time_size() <= limit, small, large)


# Inference batches of at least two sequences and BATCH_HALVES_MIN_POSITIONS positions in
# all run as two halves (`by_batch_halves` says why).
BATCH_HALVES_MIN_POSITIONS = 64


def by_batch_halves(inputs, compute):
    """`compute(inputs)` for a dict of [batch, positions] tensors (an encoder's inputs),
    whose outputs lead with the batch axis: computed for each half of the batch and
    concatenated, within `forms_per_call()` and `inference_only()` (the TF Serving
    exports) when the batch holds at least two sequences and `BATCH_HALVES_MIN_POSITIONS`
    positions in all (picked per call where the shape is unknown until run time); else
    computed whole.

    Why: TensorFlow runs the two halves' ops side by side, so one half's passes over
    memory (the GELU's five over the feed-forward activations, layer norms, softmax,
    transposes) overlap the other half's products, where one batch waits for each in
    turn. An exported ELECTRA-Small classifier on a 2-core AVX2 EPYC (Zen 3; both forms
    loaded in one process, requests alternating): 32 long texts 1.08-1.21x faster, 32
    short ones 1.09-1.13x, 2 to 8 long ones 1.08-1.21x, 4 short ones 1.12-1.14x; 2 short
    ones (40 positions) took 1.13x as long split, hence the least size. The whole batch
    and the halves call one trace of `compute`. Elsewhere (`predict`, `evaluate`) the
    batch stays whole: unmeasured there, and their first call would also optimise the
    graphs of the `If`'s branches."""
    sequences = next(iter(inputs.values()))  # all of one shape
    batch, positions = sequences.shape[0], sequences.shape[1]

    def halves():
        half = (tf.shape(sequences)[0] + 1) // 2 if batch is None else (batch + 1) // 2
        first = compute({name: x[:half] for name, x in inputs.items()})
        second = compute({name: x[half:] for name, x in inputs.items()})
        return tf.nest.map_structure(lambda a, b: tf.concat([a, b], 0), first, second)

    def split_wanted(batch, positions):
        return (batch >= 2) & (batch * positions >= BATCH_HALVES_MIN_POSITIONS)

    if not _forms_per_call.get() or gradients_wanted():
        return compute(inputs)
    if batch is not None and positions is not None:
        return halves() if split_wanted(batch, positions) else compute(inputs)
    # One trace for the whole batch and both halves, called three times: traced apart,
    # an ELECTRA-Small classifier's export took 20.6 s instead of 8.1.
    compute = traced.function(compute).get_concrete_function(
        {name: tf.TensorSpec([None, None], x.dtype) for name, x in inputs.items()})
    shape = tf.shape(sequences)
    return unlowered_cond(split_wanted(shape[0], shape[1]), halves, lambda: compute(inputs))


def unlowered_cond(predicate, true_fn, false_fn):
    """`tf.cond(predicate, true_fn, false_fn)` in a function being traced, kept a
    functional `If` when the graph runs, so that only the branch taken runs.

    Why: TensorFlow lowers a function's conds to `Switch` and `Merge` nodes by default,
    and its executor then passes every node of the branch not taken, as dead. For a
    branch holding a whole encoder that took an exported classifier's single short
    request 1.05-1.11x as long (2-core AVX2 EPYC); kept an `If`, as long as without the
    cond.
    The attribute that says so is private to TensorFlow (pinned in our requirements)."""
    outputs = tf.cond(predicate, true_fn, false_fn)
    operation = tf.nest.flatten(outputs)[0].op
    while operation.type == "Identity":
        operation = operation.inputs[0].op
    if operation.type not in ("If", "StatelessIf"):
        raise AssertionError(f"tf.cond traced a {operation.type}, not an If")
    operation._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))
    return outputs


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
