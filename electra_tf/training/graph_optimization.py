"""One round of TensorFlow's graph optimisation for the functions `fit` runs on a CPU.

Written by hand because TensorFlow exposes no switch for it: `tf.config.optimizer` sets
single passes but not how many rounds Grappler's meta-optimizer makes (two by default) nor
its memory pass. Before ELECTRA-Small's first pretraining step could run, Grappler spent
8.2 s on a 2-core AVX2 EPYC: its second round 2.4 s, to remove 232 of 10,100 nodes (mostly
identities), and the memory pass 0.8 s, to change nothing (it swaps and recomputes for
accelerators). Without them the first step came 3.2 s sooner (two fresh processes each) at
the same steady speed. On a CPU the layout pass changes nothing either (it converts
convolutions' layouts for GPUs) and took 0.2 s on the pretraining step (2-core AVX-512
EPYC). Five more passes changed no node and no edge of any function our models run on a
CPU (pretraining steps in float32, in bfloat16 and accumulating gradients, fine-tuning
steps, predictions), yet ran for each: TFG's MLIR round trip, the function, loop and shape
optimisers and the implementation selector (it swaps in a function's GPU version, for
Keras 2's recurrent layers). Without them ELECTRA-Small's first pretraining step came
2.6-3.7 s sooner (22.4-23.3 s -> 18.7-20.7 s, two pairs of fresh processes, 2-core AVX2
EPYC) at the same steady speed (3.97-4.24 s -> 3.89-4.02 s a step). Constant folding is
kept: it changes a few nodes. TensorFlow takes these settings from the configuration each
function call carries, so they hold for the calls `fit` makes inside
`one_optimization_round` only.

A model computing in float16 on a CPU also goes without the remapper, the pass that fuses a
`MatMul` and its `BiasAdd` into one oneDNN kernel: oneDNN has no float16 kernel of that
fused form on CPUs with AVX512_FP16 and runs its reference code instead (Sapphire Rapids,
2 cores: a [2048, 128] x [128, 512] product 3.0 s fused, 7 ms alone; the `tiny` preset's
pretraining step at 32 x 64, 6.0 s against 0.065 s without the remapper).
"""

import contextlib
import functools

from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.eager import context

from electra_tf.tf_runtime import accelerator_visible


def call_config() -> config_pb2.ConfigProto:
    """The configuration the next function call carries (Grappler's settings among it)."""
    return config_pb2.ConfigProto.FromString(
        context.context().function_call_options.config_proto_serialized)


# Passes that changed nothing in our functions on a CPU (see above).
_IDLE_ON_CPU = ("layout_optimizer", "function_optimization", "loop_optimization",
                "shape_optimization", "implementation_selector")


@contextlib.contextmanager
def one_optimization_round(compute_dtype):
    """Functions first called inside are optimised by one Grappler round, without its
    memory pass, TFG and the passes `_IDLE_ON_CPU` when no accelerator is visible, and
    without its remapper when they compute in `compute_dtype` float16 on a CPU. Other
    settings are kept."""
    eager = context.context()
    previous = eager.function_call_options
    config = call_config()
    rewrite = config.graph_options.rewrite_options
    rewrite.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    if not accelerator_visible():
        rewrite.memory_optimization = rewriter_config_pb2.RewriterConfig.NO_MEM_OPT
        rewrite.disable_tfg_optimizer = True
        for name in _IDLE_ON_CPU:
            setattr(rewrite, name, rewriter_config_pb2.RewriterConfig.OFF)
        if compute_dtype == "float16":
            rewrite.remapping = rewriter_config_pb2.RewriterConfig.OFF
    eager.function_call_options = context.FunctionCallOptions(
        executor_type=previous.executor_type, config_proto=config)
    try:
        yield
    finally:
        eager.function_call_options = previous


def optimized_in_one_round(method):
    """A model's method run inside `one_optimization_round` of the model's compute dtype."""

    @functools.wraps(method)
    def wrapper(model, *args, **kwargs):
        with one_optimization_round(model.compute_dtype):
            return method(model, *args, **kwargs)

    return wrapper
