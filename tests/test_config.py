import json

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
    expected = {
        "preset_name": "tiny", "vocab_size": 30522, "embedding_size": 32, "hidden_size": 64,
        "num_layers": 2, "num_heads": 2, "intermediate_size": 128,
        "max_position_embeddings": 128, "type_vocab_size": 2, "dropout": 0.1,
        "initializer_range": 0.02, "layer_norm_epsilon": 1e-12, "generator_size": 0.5,
        "tie_embeddings": "all", "objective": "electra", "generator": "transformer",
        "lower_case": False, "strip_accents": True, "pad_token_id": 0, "unk_token_id": 100,
        "cls_token_id": 101, "sep_token_id": 102, "mask_token_id": 103,
        "max_seq_length": 64, "batch_size": 16, "grad_accum_steps": 1, "train_steps": 300,
        "learning_rate": 3e-3, "warmup_steps": 100, "lr_decay_power": 1.0,
        "weight_decay": 0.01, "adam_bias_correction": False, "clip_norm": 1.0,
        "mask_prob": 0.15, "mlm_weight": 1.0, "disc_weight": 50.0, "temperature": 1.0,
        "seed": 0, "checkpoint_every": 100, "keep_checkpoints": 3}
    assert json.loads((tmp_path / "config.json").read_text()) == expected
    assert ElectraConfig.load(str(tmp_path / "config.json")) == cfg


def test_converted_sizes_find_their_preset():
    assert ElectraConfig(hidden_size=768, embedding_size=768, num_heads=12,
                         intermediate_size=3072).matching_preset() == "base"
    assert ElectraConfig().matching_preset() == "small"  # small++ has small's size
    assert ElectraConfig(num_layers=4).matching_preset() is None


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
