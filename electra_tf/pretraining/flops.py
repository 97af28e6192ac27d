"""Training FLOPs of a pretraining step, counted like the official `flops_computation.py`.

Conventions (the paper's, so runs compare with its Table 1 / Figure 3): a matmul of
[m, k] x [k, n] is 2mkn FLOPs; element-wise ops count a few FLOPs per activation
(`flop_formulas`); the backward pass costs as much as the forward pass; embedding lookups
count as dense one-hot matmuls (2 x embedding x vocab per token) unless `sparse_embedding`.
The generator's output layer runs on `max_predictions / seq_length` of the tokens.

Each objective counts what it computes: it prices the kept encoder's head
(`Objective.head_flops_per_token`), and only objectives with a learned generator pay
for one (a `uniform` generator costs nothing).

For hardware utilisation use `sparse_embedding=True` and `backward_multiplier=2` instead:
a lookup computes nothing, and a matmul's backward pass is two matmuls.
"""

import math

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.pretraining import flop_formulas, objectives


def forward_flops_per_sequence(config: ElectraConfig, sparse_embedding=False) -> dict:
    """{"generator": ..., "discriminator": ...} forward FLOPs for one sequence
    ("discriminator" is the kept encoder and its pretraining head, whatever the objective)."""
    objective = objectives.of(config)
    seq, vocab, embedding = config.max_seq_length, config.vocab_size, config.embedding_size
    discriminator = seq * (
        config.num_layers * flop_formulas.transformer_block(
            config.hidden_size, config.intermediate_size, config.num_heads, seq)
        + flop_formulas.embeddings(embedding, config.hidden_size, vocab, seq,
                                   sparse_embedding)
        + objective.head_flops_per_token(config))
    generator = 0.0
    if objective.learns_generator(config):
        gen_hidden = config.generator_hidden_size
        # Shared word matrices have the discriminator's width ("gdes" adds its delta once
        # per step, not per token: not counted).
        gen_embedding = (embedding if config.tie_embeddings in ("all", "token", "gdes")
                         else gen_hidden)
        output_fraction = config.max_predictions_per_seq / seq
        generator = seq * (
            config.num_layers * flop_formulas.transformer_block(
                gen_hidden, config.generator_intermediate_size, config.generator_num_heads,
                seq)
            + flop_formulas.embeddings(gen_embedding, gen_hidden, vocab, seq,
                                       sparse_embedding)
            + output_fraction * flop_formulas.mlm_head(gen_embedding, gen_hidden, vocab))
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
