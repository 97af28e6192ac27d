"""Training FLOPs of a pretraining step, counted like the official `flops_computation.py`.

Conventions (the paper's, so runs compare with its Table 1 / Figure 3): a matmul of
[m, k] x [k, n] is 2mkn FLOPs; element-wise ops count a few FLOPs per activation
(constants below); the backward pass costs as much as the forward pass; embedding lookups
count as dense one-hot matmuls (2 x embedding x vocab per token) unless `sparse_embedding`.
The generator's output layer runs on `max_predictions / seq_length` of the tokens.

Each objective counts what it computes: `mlm` has no generator and an MLM head (at the
masked positions) on the kept encoder instead of the discriminator head; `replace_mlm`
adds that head to the generator; `all_tokens_mlm` runs it at every position, plus the
copy gate; a `uniform` generator costs nothing.

For hardware utilisation use `sparse_embedding=True` and `backward_multiplier=2` instead:
a lookup computes nothing, and a matmul's backward pass is two matmuls.
"""

import math

from electra_tf.config import RTD_OBJECTIVES, ElectraConfig
from electra_tf.errors import ConfigError

# FLOPs per activation of the small element-wise ops (official constants).
DROPOUT = 4  # random number, compare, mask, rescale
LAYER_NORM = 5
GELU = 8
SOFTMAX = 5


def _block_flops_per_token(hidden, intermediate, heads, seq):
    attention = (3 * 2 * hidden * hidden + 3 * hidden  # q, k, v projections and biases
                 + 2 * hidden * seq  # scores
                 + (SOFTMAX + DROPOUT + 1) * seq * heads  # softmax, dropout, scaling
                 + 2 * hidden * seq  # weighted sum of values
                 + 2 * hidden * hidden + hidden  # output projection and bias
                 + (DROPOUT + 1) * hidden + LAYER_NORM)  # the official omits "* hidden" here
    feed_forward = (2 * hidden * intermediate + (GELU + 1) * intermediate
                    + 2 * hidden * intermediate + hidden
                    + (DROPOUT + 1) * hidden + LAYER_NORM * hidden)
    return attention + feed_forward


def _embedding_flops_per_token(embedding, hidden, vocab, seq, sparse_embedding):
    flops = 0 if sparse_embedding else 2 * embedding * vocab
    flops += (2 * embedding * (seq + 2)  # position and segment lookups, as official
              + 2 * embedding + (LAYER_NORM + DROPOUT) * embedding)
    if embedding != hidden:
        flops += 2 * hidden * embedding + hidden  # projection to the tower's width
    return flops


def _mlm_head_flops_per_token(embedding, hidden, vocab):
    return (2 * hidden * embedding + embedding + (GELU + LAYER_NORM) * embedding
            + 2 * embedding * vocab + (SOFTMAX + 2) * vocab)


def _rtd_head_flops_per_token(hidden):
    return 2 * hidden * hidden + hidden + GELU * hidden + 2 * hidden


def _copy_gate_flops_per_token(hidden):
    return 2 * hidden + 1 + SOFTMAX  # dense(1), its bias, the sigmoid


def forward_flops_per_sequence(config: ElectraConfig, sparse_embedding=False) -> dict:
    """{"generator": ..., "discriminator": ...} forward FLOPs for one sequence
    ("discriminator" is the kept encoder and its pretraining head, whatever the objective)."""
    seq, vocab, embedding = config.max_seq_length, config.vocab_size, config.embedding_size
    output_fraction = config.max_predictions_per_seq / seq
    disc_hidden, gen_hidden = config.hidden_size, config.generator_hidden_size
    if config.objective in RTD_OBJECTIVES:
        head = _rtd_head_flops_per_token(disc_hidden)
    elif config.objective == "all_tokens_mlm":
        head = (_mlm_head_flops_per_token(embedding, disc_hidden, vocab)
                + _copy_gate_flops_per_token(disc_hidden))
    else:
        head = output_fraction * _mlm_head_flops_per_token(embedding, disc_hidden, vocab)
    discriminator = seq * (
        config.num_layers * _block_flops_per_token(
            disc_hidden, config.intermediate_size, config.num_heads, seq)
        + _embedding_flops_per_token(embedding, disc_hidden, vocab, seq, sparse_embedding)
        + head)
    generator = 0.0
    if config.has_learned_generator:
        gen_embedding = embedding if config.tie_embeddings in ("all", "token") else gen_hidden
        generator = seq * (
            config.num_layers * _block_flops_per_token(
                gen_hidden, config.generator_intermediate_size, config.generator_num_heads,
                seq)
            + _embedding_flops_per_token(gen_embedding, gen_hidden, vocab, seq,
                                         sparse_embedding)
            + output_fraction * _mlm_head_flops_per_token(gen_embedding, gen_hidden, vocab))
    return {"generator": generator, "discriminator": discriminator}


def training_flops_per_step(config: ElectraConfig, batch_size=None, sparse_embedding=False,
                            backward_multiplier=1) -> float:
    """FLOPs of one optimizer step (forward + backward) at `batch_size` (default: config's)."""
    forward = sum(forward_flops_per_sequence(config, sparse_embedding).values())
    return (1 + backward_multiplier) * forward * (batch_size or config.batch_size)


def steps_for_budget(config: ElectraConfig, train_flops: float) -> int:
    """The most optimizer steps whose training FLOPs (this module's convention) fit in
    `train_flops`; raises ConfigError when not even one does."""
    per_step = training_flops_per_step(config)
    steps = math.floor(train_flops / per_step)
    if steps < 1:
        raise ConfigError(f"train_flops={train_flops:.3g} is less than one step of this "
                          f"model and batch ({per_step:.3g} FLOPs); raise the budget.")
    return steps
