import json
import os

import numpy as np
import pytest

import convert_fixtures as fx
from electra_tf.convert import api, official_names
from electra_tf.convert import weights as run_weights
from electra_tf.errors import ConfigError


@pytest.mark.parametrize("shape", ["tiny", "small"])
def test_huggingface_into_ours_matches_huggingface(tmp_path, shape):
    models = fx.random_hf_models(shape)
    disc_dir, gen_dir = fx.save_hf(models, tmp_path / "hf")
    report = api.from_huggingface(disc_dir, str(tmp_path / "ours"), generator=gen_dir)
    assert report["generator"] and report["discriminator_head"]
    ids, mask, segments = fx.batch()
    ours = fx.our_outputs(str(tmp_path / "ours"), ids, mask, segments)
    fx.assert_close(ours, fx.hf_outputs(models, ids, mask, segments))
    config = json.loads((tmp_path / "ours" / "config.json").read_text())
    disc_shape, gen_shape = fx.SHAPES[shape]
    assert (config["hidden_size"], config["embedding_size"], config["num_layers"]) == (
        disc_shape["hidden_size"], disc_shape["embedding_size"],
        disc_shape["num_hidden_layers"])
    assert config["generator_size"] * config["hidden_size"] == gen_shape["hidden_size"]


def test_ours_to_huggingface_loads_in_transformers_and_round_trips_exactly(tmp_path):
    import transformers

    disc_dir, gen_dir = fx.save_hf(fx.random_hf_models(seed=3), tmp_path / "hf")
    api.from_huggingface(disc_dir, str(tmp_path / "ours"), generator=gen_dir)
    written = api.to_huggingface(str(tmp_path / "ours"), str(tmp_path / "out"))
    assert written == [str(tmp_path / "out"), str(tmp_path / "out" / "generator")]

    disc, info = transformers.ElectraForPreTraining.from_pretrained(
        tmp_path / "out", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    gen, info = transformers.ElectraForMaskedLM.from_pretrained(
        tmp_path / "out" / "generator", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    tokenizer = transformers.ElectraTokenizer.from_pretrained(tmp_path / "out")
    assert tokenizer.convert_tokens_to_ids("[MASK]") == 103 and tokenizer.do_lower_case

    ids, mask, segments = fx.batch(seed=5)
    ours = fx.our_outputs(str(tmp_path / "ours"), ids, mask, segments)
    fx.assert_close(ours, fx.hf_outputs((disc.eval(), gen.eval()), ids, mask, segments))

    api.from_huggingface(str(tmp_path / "out"), str(tmp_path / "back"),
                         generator=str(tmp_path / "out" / "generator"))
    fx.assert_same_weights(tmp_path / "ours", tmp_path / "back")


def test_discriminator_only_conversion_feeds_finetuning(tmp_path):
    import transformers

    from electra_tf.run_dir import load_encoder, open_pretrained

    disc, _ = fx.random_hf_models(seed=4)
    base = transformers.ElectraModel(disc.config)
    base.load_state_dict(disc.electra.state_dict())
    base.save_pretrained(tmp_path / "base")
    fx.write_vocab(tmp_path / "base")
    report = api.from_huggingface(str(tmp_path / "base"), str(tmp_path / "ours"))
    assert not report["generator"] and not report["discriminator_head"]
    pretrained = open_pretrained(str(tmp_path / "ours"))
    encoder = load_encoder(pretrained, pretrained.config, dropout=0.0)
    ids, mask, segments = fx.batch()
    ours = encoder({"input_word_ids": ids, "input_mask": mask, "input_type_ids": segments})
    theirs = fx.hf_outputs((disc, None), ids, mask, segments)
    np.testing.assert_allclose(ours["sequence_output"], theirs["sequence_output"], atol=1e-4)


def test_the_vocab_comes_from_the_flag_or_a_tokenizer_json(tmp_path):
    """Many Hub repos ship tokenizer.json without vocab.txt; --vocab must be enough."""
    import transformers

    disc, _ = fx.random_hf_models(seed=5)
    disc.save_pretrained(tmp_path / "hf")
    with pytest.raises(ConfigError, match="no vocab.txt or tokenizer.json: pass the model's "
                                          "vocab with --vocab"):
        api.from_huggingface(str(tmp_path / "hf"), str(tmp_path / "a"))
    fx.write_vocab(tmp_path / "vocab_elsewhere")
    api.from_huggingface(str(tmp_path / "hf"), str(tmp_path / "from_flag"),
                         vocab=str(tmp_path / "vocab_elsewhere" / "vocab.txt"))
    fast = transformers.ElectraTokenizerFast(
        vocab_file=str(tmp_path / "vocab_elsewhere" / "vocab.txt"))
    fast.save_pretrained(tmp_path / "hf")
    (tmp_path / "hf" / "vocab.txt").unlink()
    assert (tmp_path / "hf" / "tokenizer.json").is_file()
    api.from_huggingface(str(tmp_path / "hf"), str(tmp_path / "from_tokenizer_json"))
    for run in ("from_flag", "from_tokenizer_json"):
        assert (tmp_path / run / "vocab.txt").read_text().split("\n")[:-1] == fx.VOCAB, run


def test_generator_with_its_own_embedding_values_is_refused(tmp_path):
    import torch

    disc, gen = fx.random_hf_models(seed=6)
    with torch.no_grad():
        gen.electra.embeddings.LayerNorm.weight.add_(1.0)
    disc_dir, gen_dir = fx.save_hf((disc, gen), tmp_path / "hf")
    with pytest.raises(ConfigError, match="LayerNorm.weight differ.*--discriminator_only"):
        api.from_huggingface(disc_dir, str(tmp_path / "ours"), generator=gen_dir)
    report = api.from_huggingface(disc_dir, str(tmp_path / "ours"), generator=gen_dir,
                                  discriminator_only=True)
    assert not report["generator"]


def test_task_heads_and_missing_weights_are_named(tmp_path):
    import transformers

    disc, _ = fx.random_hf_models(seed=7)
    classifier = transformers.ElectraForSequenceClassification(disc.config)
    classifier.save_pretrained(tmp_path / "cls")
    fx.write_vocab(tmp_path / "cls")
    with pytest.raises(ConfigError, match=r"classifier\.dense\.weight"):
        api.from_huggingface(str(tmp_path / "cls"), str(tmp_path / "a"))

    from safetensors.numpy import load_file, save_file

    disc.save_pretrained(tmp_path / "broken")
    fx.write_vocab(tmp_path / "broken")
    path = tmp_path / "broken" / "model.safetensors"
    state = load_file(path)
    del state["electra.encoder.layer.1.output.dense.weight"]
    save_file(state, path, metadata={"format": "pt"})
    with pytest.raises(ConfigError, match="electra/encoder/layer_1/output/dense/kernel"):
        api.from_huggingface(str(tmp_path / "broken"), str(tmp_path / "b"))


def test_every_variable_of_our_model_has_a_huggingface_name():
    import transformers

    from electra_tf.config import ElectraConfig
    from electra_tf.convert import huggingface

    parts = run_weights.build_parts(ElectraConfig.preset("tiny", vocab_size=len(fx.VOCAB)),
                                    with_generator=True, with_head=True)
    model, names = parts.model, parts.weights()
    covered = {id(v) for v in names.values()}
    assert all(id(v) in covered for v in model.weights if v.trainable)
    hf = transformers.ElectraForPreTraining(transformers.ElectraConfig(
        vocab_size=len(fx.VOCAB), embedding_size=32, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=2, intermediate_size=128, max_position_embeddings=128))
    disc_names = {huggingface.hf_name(n) for n in names
                  if not official_names.is_generator_name(n)}
    assert disc_names == set(hf.state_dict())


def test_pretrained_run_to_huggingface_and_back_continues_pretraining(tmp_path, pretrained_dir,
                                                                       shards):
    from electra_tf.runs import pretrain as run

    api.to_huggingface(str(pretrained_dir), str(tmp_path / "hf"))
    api.from_huggingface(str(tmp_path / "hf"), str(tmp_path / "again"),
                         generator=str(tmp_path / "hf" / "generator"))
    original = fx.assert_same_weights(pretrained_dir, tmp_path / "again")

    config = run_weights.load_run(str(tmp_path / "again"))[1].config.replace(
        max_seq_length=64, batch_size=4, train_steps=2, warmup_steps=1, checkpoint_every=2)
    results = run.train(config, str(tmp_path / "again"), shards[0], eval_batches=0, verbose=0)
    assert results["step"] == 2 and np.isfinite(results["train_history"]["loss"]).all()
    # Two Adam steps at lr <= 5e-4 move each weight by ~1e-3: it continued from the weights.
    trained = run_weights.read_run(str(tmp_path / "again"))[2]
    name = "electra/encoder/layer_1/intermediate/dense/kernel"
    change = np.abs(trained[name] - original[name]).max()
    assert 0 < change < 5e-3, change


@pytest.mark.parametrize("ablation", [dict(objective="mlm"), dict(objective="replace_mlm"),
                                      dict(tie_embeddings="token")])
def test_runs_of_other_objectives_publish_their_encoder_alone(tmp_path, ablation):
    """The official/HF formats have no place for an MLM-trained encoder's head, a
    token-only tied generator or a copy gate: the encoder (what users keep) is written."""
    import torch
    import transformers

    import tensorflow as tf

    from electra_tf.config import ElectraConfig
    from electra_tf.text import vocab as vocab_lib
    from electra_tf.pretraining.pretrainer import ElectraPretrainer
    from electra_tf.run_dir import pretraining_checkpoint

    run = tmp_path / "run"
    fx.write_vocab(run)
    config = ElectraConfig.preset("tiny", vocab_size=len(fx.VOCAB), max_position_embeddings=64,
                                  **vocab_lib.special_token_ids(fx.VOCAB), **ablation)
    config.save(str(run / "config.json"))
    model = ElectraPretrainer(config)
    model.build_all()
    tf.train.CheckpointManager(pretraining_checkpoint(model), str(run / "checkpoints"), 1).save(0)

    assert api.to_huggingface(str(run), str(tmp_path / "hf")) == [str(tmp_path / "hf")]
    hf = transformers.ElectraModel.from_pretrained(str(tmp_path / "hf")).eval()
    ids, mask, segments = fx.batch()
    with torch.no_grad():
        theirs = hf(input_ids=torch.tensor(ids, dtype=torch.long),
                    attention_mask=torch.tensor(mask, dtype=torch.long),
                    token_type_ids=torch.tensor(segments, dtype=torch.long)).last_hidden_state
    ours = model.discriminator({"input_word_ids": ids, "input_mask": mask,
                                "input_type_ids": segments}, training=False)
    np.testing.assert_allclose(ours["sequence_output"].numpy(), theirs.numpy(), atol=1e-4)


def test_configs_that_do_not_fit_their_weights_are_refused_before_building(tmp_path):
    disc, _ = fx.random_hf_models(seed=7)
    directory = tmp_path / "hf"
    disc.save_pretrained(directory)
    fx.write_vocab(directory)
    config_path = directory / "config.json"
    good = json.loads(config_path.read_text())
    for change, message in (({"max_position_embeddings": 400_000_000},
                             r"max_position_embeddings=400000000, embedding_size=16, but the "
                             r"weights' electra.embeddings.position_embeddings.weight is "
                             r"\(64, 16\): the config does not belong"),
                            ({"num_hidden_layers": 3}, "num_hidden_layers=3, but the weights "
                                                       "hold 2 layers"),
                            ({"hidden_size": "32"}, "hidden_size must be positive integers")):
        config_path.write_text(json.dumps(dict(good, **change)))
        with pytest.raises(ConfigError, match=message):
            api.from_huggingface(str(directory), str(tmp_path / "never"))
    config_path.write_text(json.dumps(good)[:-20])  # truncated
    with pytest.raises(ConfigError, match="config.json is damaged"):
        api.from_huggingface(str(directory), str(tmp_path / "never"))
    config_path.write_text(json.dumps(good))
    os.rename(directory / "model.safetensors", directory / "model-00001.safetensors")
    index = directory / "model.safetensors.index.json"
    for shard in ("../../outside.safetensors", "/etc/passwd"):
        index.write_text(json.dumps({"weight_map": {"a": "model-00001.safetensors",
                                                    "b": shard}}))
        with pytest.raises(ConfigError, match="which is not a file inside"):
            api.from_huggingface(str(directory), str(tmp_path / "never"))
    assert not os.path.exists(tmp_path / "never")
