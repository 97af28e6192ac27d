from electra_tf.config import ElectraConfig
from electra_tf.pretraining.flops import forward_flops_per_sequence, training_flops_per_step


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
