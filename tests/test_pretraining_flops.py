import pytest

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.pretraining.flops import (forward_flops_per_sequence, steps_for_budget,
                                          training_flops_per_step)


def test_counts_match_the_official_script_and_the_paper():
    # flops_computation.py's formula for ELECTRA-Small (1M steps of 128 x 128, tied
    # embeddings) with our generator output fraction 19/128 instead of its 20/128:
    # 1.2917e18 (1.2937e18 with 20/128). Paper, Table 8: ELECTRA-Base 6.4e19.
    small = ElectraConfig.preset("small")
    assert abs(training_flops_per_step(small) * 1e6 / 1.29168416e18 - 1) < 1e-6
    base = ElectraConfig.preset("base")
    assert abs(training_flops_per_step(base) * base.train_steps / 6.4e19 - 1) < 0.01


def test_sparse_lookups_and_untied_generators_change_the_count_where_expected():
    small = ElectraConfig.preset("small")
    dense, sparse = forward_flops_per_sequence(small), forward_flops_per_sequence(small, True)
    # A dense lookup is 2 x 128 x 30522 FLOPs per token, per tower.
    assert dense["discriminator"] - sparse["discriminator"] == 128 * 2 * 128 * 30522
    untied = forward_flops_per_sequence(small.replace(tie_embeddings="none"))
    assert untied["discriminator"] == dense["discriminator"]
    assert untied["generator"] < dense["generator"]  # its own embeddings are 64 wide
    assert training_flops_per_step(small, 32, backward_multiplier=2) == 3 * 32 * sum(
        dense.values())


def test_each_objective_counts_what_it_computes():
    small = ElectraConfig.preset("small")
    electra = forward_flops_per_sequence(small)
    # BERT-Small as the official script counts it (TransformerHparams(256, 12, e=128,
    # s=128).get_train_flops) with our 19/128 output fraction: 7,627,883,588 per sequence.
    mlm = small.replace(objective="mlm")
    assert training_flops_per_step(mlm, 1) == 7627883588
    assert forward_flops_per_sequence(mlm)["generator"] == 0
    # electra_15 computes exactly what electra does; a uniform generator costs nothing.
    assert forward_flops_per_sequence(small.replace(objective="electra_15")) == electra
    uniform = forward_flops_per_sequence(small.replace(generator="uniform"))
    assert uniform == {"generator": 0, "discriminator": electra["discriminator"]}
    # Replace MLM: the generator plus BERT's encoder; All-Tokens MLM predicts all 128
    # positions (a 128/19 larger output layer) plus the copy gate.
    replace = forward_flops_per_sequence(small.replace(objective="replace_mlm"))
    assert replace == {"generator": electra["generator"],
                       "discriminator": forward_flops_per_sequence(mlm)["discriminator"]}
    all_tokens = forward_flops_per_sequence(small.replace(objective="all_tokens_mlm"))
    output_layer = replace["discriminator"] - electra["discriminator"] + (
        128 * (2 * 256 * 256 + 256 + 8 * 256 + 2 * 256))  # minus the RTD head
    copy_gate = 128 * (2 * 256 + 1 + 5)
    assert abs(all_tokens["discriminator"] - replace["discriminator"]
               - (128 / 19 - 1) * output_layer - copy_gate) < 1e-3 * output_layer
    # Sharing only the word matrix: the generator's embedding block is still 128 wide.
    token = forward_flops_per_sequence(small.replace(tie_embeddings="token"))
    assert token == electra


def test_a_flops_budget_gives_the_most_steps_that_fit():
    small = ElectraConfig.preset("small")
    per_step = training_flops_per_step(small)
    assert steps_for_budget(small, 10.5 * per_step) == 10
    with pytest.raises(ConfigError, match="less than one step"):
        steps_for_budget(small, 0.5 * per_step)
