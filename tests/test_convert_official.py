import json
import logging

import numpy as np
import pytest

import convert_fixtures as fx
from electra_tf.convert import api, huggingface, official, official_names
from electra_tf.errors import ConfigError


def official_checkpoint(models, prefix, untied=False):
    """A TF1 checkpoint with the official variable names, from random HF models, with Adam
    slots and global_step as the official trainer leaves them."""
    disc, gen = models
    weights = {}
    for model, generator in ((disc, False), (gen, True)):
        for key, value in model.state_dict().items():
            if key.endswith("position_ids") or key == "generator_lm_head.weight":
                continue
            weights[(generator, key)] = value.numpy()
    names = {}
    for generator, key in weights:
        names[(generator, key)] = _official_name(key, generator, untied)
    arrays = {}
    for (generator, key), name in names.items():
        if name is None:
            continue
        value = weights[(generator, key)]
        arrays[name] = value.T if name.endswith("/kernel") else value
    for name in list(arrays):
        arrays[name + "/adam_m"] = np.zeros_like(arrays[name])
        arrays[name + "/adam_v"] = np.zeros_like(arrays[name])
    arrays["global_step"] = np.array(1000, np.int64)
    return official.write_checkpoint(arrays, prefix)


def _official_name(key, generator, untied):
    """Official name of an HF parameter (the inverse of huggingface.hf_name)."""
    if generator and key.startswith("electra.embeddings.") and not untied:
        return None  # the generator reuses the discriminator's block
    name = key.replace(".layer.", ".layer_").replace(".", "/")
    name = name.replace("generator_lm_head/bias", "generator_predictions/output_bias")
    name = name.replace("dense_prediction", "dense_1")
    name = name.replace("_embeddings/weight", "_embeddings")
    name = name.replace("LayerNorm/weight", "LayerNorm/gamma").replace("LayerNorm/bias",
                                                                       "LayerNorm/beta")
    name = name[:-len("/weight")] + "/kernel" if name.endswith("/weight") else name
    if generator and name.startswith("electra/"):
        name = "generator/" + name[len("electra/"):]
    assert huggingface.hf_name(name) == key, (name, key)
    return name


def hf_loaded_from(prefix, models):
    """Fresh HF models filled by HF's own TF1 loader."""
    import transformers
    from transformers.models.electra import modeling_electra

    disc_config, gen_config = models[0].config, models[1].config
    disc = transformers.ElectraForPreTraining(disc_config)
    gen = transformers.ElectraForMaskedLM(gen_config)
    logging.getLogger("transformers").setLevel(logging.ERROR)
    modeling_electra.load_tf_weights_in_electra(disc, disc_config, prefix, "discriminator")
    modeling_electra.load_tf_weights_in_electra(gen, gen_config, prefix, "generator")
    return disc.eval(), gen.eval()


def test_official_checkpoint_matches_huggingface_tf1_loader(tmp_path):
    models = fx.random_hf_models(seed=11)
    prefix = official_checkpoint(models, str(tmp_path / "electra" / "model.ckpt-1000"))
    fx.write_vocab(tmp_path / "electra")
    # Shapes cannot tell head counts: the official rule (hidden / 64) would give 1 here.
    report = api.from_official(prefix, str(tmp_path / "ours"), num_heads=2)
    assert report["generator"] and report["discriminator_head"]
    assert report["mapped_variables"] == 80

    reference = hf_loaded_from(prefix, models)
    ids, mask, segments = fx.batch()
    theirs = fx.hf_outputs(reference, ids, mask, segments)
    fx.assert_close(fx.our_outputs(str(tmp_path / "ours"), ids, mask, segments), theirs)
    # HF's loader really filled its model: it agrees with the models the checkpoint came from.
    fx.assert_close(theirs, fx.hf_outputs(models, ids, mask, segments), atol=1e-6)

    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    assert (config["vocab_size"], config["embedding_size"], config["hidden_size"],
            config["num_layers"], config["intermediate_size"],
            config["max_position_embeddings"], config["num_heads"]) == (
        len(fx.VOCAB), 16, 32, 2, 64, 64, 2)
    assert config["generator_size"] == 0.5 and config["tie_embeddings"] == "all"
    assert config["lower_case"] and config["mask_token_id"] == 103


def test_untied_generator_embeddings(tmp_path):
    import torch

    disc, gen = fx.random_hf_models(seed=12)
    with torch.no_grad():
        gen.electra.embeddings.word_embeddings.weight.add_(0.5)  # its own block now
    prefix = official_checkpoint((disc, gen), str(tmp_path / "untied" / "model.ckpt-1"),
                                 untied=True)
    fx.write_vocab(tmp_path / "untied")
    api.from_official(prefix, str(tmp_path / "ours"), num_heads=2)
    assert json.loads((tmp_path / "ours" / "config.json").read_text())[
        "tie_embeddings"] == "none"
    ids, mask, segments = fx.batch()
    fx.assert_close(fx.our_outputs(str(tmp_path / "ours"), ids, mask, segments),
                    fx.hf_outputs(hf_loaded_from(prefix, (disc, gen)), ids, mask, segments))


def test_ours_to_official_and_back_is_exact(tmp_path):
    prefix = official_checkpoint(fx.random_hf_models(seed=13), str(tmp_path / "a" / "m.ckpt"))
    fx.write_vocab(tmp_path / "a")
    api.from_official(prefix, str(tmp_path / "ours"))
    written = api.to_official(str(tmp_path / "ours"), str(tmp_path / "b" / "model.ckpt"))
    api.from_official(written, str(tmp_path / "back"))
    fx.assert_same_weights(tmp_path / "ours", tmp_path / "back")


def test_unknown_and_missing_variables_are_named(tmp_path):
    models = fx.random_hf_models(seed=14)
    prefix = official_checkpoint(models, str(tmp_path / "a" / "m.ckpt"))
    fx.write_vocab(tmp_path / "a")
    weights = official.read_checkpoint(prefix)

    extra = dict(weights, **{"electra/encoder/layer_0/attention/self/rotary/kernel":
                             np.zeros((2, 2), np.float32)})
    official.write_checkpoint(extra, str(tmp_path / "b" / "m.ckpt"))
    fx.write_vocab(tmp_path / "b")
    with pytest.raises(ConfigError, match="attention/self/rotary/kernel"):
        api.from_official(str(tmp_path / "b" / "m.ckpt"), str(tmp_path / "x"))

    missing = dict(weights)
    del missing["generator/encoder/layer_1/output/LayerNorm/beta"]
    official.write_checkpoint(missing, str(tmp_path / "c" / "m.ckpt"))
    fx.write_vocab(tmp_path / "c")
    with pytest.raises(ConfigError, match="generator/encoder/layer_1/output/LayerNorm/beta"):
        api.from_official(str(tmp_path / "c" / "m.ckpt"), str(tmp_path / "y"))
    # The discriminator alone still converts, and says what it left out.
    report = api.from_official(str(tmp_path / "c" / "m.ckpt"), str(tmp_path / "z"),
                               discriminator_only=True)
    assert not report["generator"] and "generator_predictions/output_bias" in report["ignored"]
    assert official_names.is_generator_name("generator_predictions/output_bias")
