import pytest

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError


@pytest.mark.parametrize("name, layers, hidden, ffn, heads, emb, gen_hidden, gen_heads, lr, "
                         "batch, seq, steps, mask", [
    ("small", 12, 256, 1024, 4, 128, 64, 1, 5e-4, 128, 128, 1_000_000, 0.15),
    ("base", 12, 768, 3072, 12, 768, 256, 4, 2e-4, 256, 512, 766_000, 0.15),
    ("large", 24, 1024, 4096, 16, 1024, 256, 4, 2e-4, 2048, 512, 400_000, 0.25),
    ("small++", 12, 256, 1024, 4, 128, 256, 4, 5e-4, 128, 512, 1_000_000, 0.15),
])
def test_presets_match_the_paper(name, layers, hidden, ffn, heads, emb, gen_hidden,
                                 gen_heads, lr, batch, seq, steps, mask):
    cfg = ElectraConfig.preset(name)
    assert (cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.num_heads,
            cfg.embedding_size) == (layers, hidden, ffn, heads, emb)
    assert (cfg.generator_hidden_size, cfg.generator_num_heads) == (gen_hidden, gen_heads)
    assert cfg.generator_intermediate_size == 4 * gen_hidden
    assert (cfg.learning_rate, cfg.batch_size, cfg.max_seq_length, cfg.train_steps,
            cfg.mask_prob) == (lr, batch, seq, steps, mask)
    assert (cfg.vocab_size, cfg.max_position_embeddings, cfg.type_vocab_size) == (30522, 512, 2)
    assert (cfg.dropout, cfg.layer_norm_epsilon, cfg.disc_weight) == (0.1, 1e-12, 50.0)
    assert (cfg.weight_decay, cfg.warmup_steps, cfg.clip_norm) == (0.01, 10_000, 1.0)


def test_max_predictions_follows_the_official_formula():
    assert ElectraConfig.preset("small").max_predictions_per_seq == 19
    assert ElectraConfig.preset("large").max_predictions_per_seq == 130


def test_json_round_trip(tmp_path):
    cfg = ElectraConfig.preset("tiny", learning_rate=3e-3, lower_case=False)
    cfg.save(str(tmp_path / "config.json"))
    assert ElectraConfig.load(str(tmp_path / "config.json")) == cfg


def test_bad_values_are_refused_with_the_fix():
    with pytest.raises(ConfigError, match="max_position_embeddings"):
        ElectraConfig.preset("small", max_seq_length=1024)
    with pytest.raises(ConfigError, match="Unknown preset"):
        ElectraConfig.preset("huge")
    with pytest.raises(ConfigError, match="Unknown config fields"):
        ElectraConfig.from_dict({"hidden": 3})


def test_differences_ignore_resumable_fields():
    a = ElectraConfig.preset("tiny")
    assert a.differences(a.replace(train_steps=5000, checkpoint_every=7)) == {}
    assert a.differences(a.replace(hidden_size=128, num_heads=2)) == {"hidden_size": (64, 128)}
