import numpy as np
import pytest

from electra_tf.errors import ConfigError
from electra_tf.convert import api
import convert_fixtures as fx

# keras-hub's ElectraBackbone uses the tanh approximation of GELU; ELECTRA (and we) use the
# exact erf form. On this random 2-layer model they differ by ~4e-5; we allow 1e-3.
GELU_APPROXIMATION_TOLERANCE = 1e-3


def test_keras_hub_backbone_into_ours(tmp_path):
    import keras

    backbone = fx.random_keras_hub_backbone()
    backbone.save(tmp_path / "backbone.keras")
    fx.write_vocab(tmp_path)

    with pytest.raises(ConfigError, match="no saved tokenizer"):
        api.from_keras_hub(str(tmp_path / "backbone.keras"), str(tmp_path / "x"))
    report = api.from_keras_hub(str(tmp_path / "backbone.keras"), str(tmp_path / "ours"),
                                vocab=str(tmp_path / "vocab.txt"))
    assert not report["generator"] and not report["discriminator_head"]

    ids, mask, segments = fx.batch()
    theirs = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    ours = fx.our_outputs(str(tmp_path / "ours"), ids, mask, segments)
    difference = np.abs(ours["sequence_output"] - theirs["sequence_output"]).max()
    assert 0 < difference < GELU_APPROXIMATION_TOLERANCE, difference
    # With its GELU made exact, keras-hub's backbone is ours to float precision: the whole
    # difference is the approximation, none of it the conversion.
    for layer in backbone.transformer_layers:
        layer._feedforward_intermediate_dense.activation = keras.activations.gelu
    exact = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    np.testing.assert_allclose(ours["sequence_output"], exact["sequence_output"], atol=1e-5)


def test_a_preset_config_that_does_not_fit_its_weights_is_refused(tmp_path):
    import json

    preset = tmp_path / "preset"
    fx.random_keras_hub_backbone().save_to_preset(str(preset))
    config = json.loads((preset / "config.json").read_text())
    config["config"]["max_sequence_length"] = 400_000_000
    (preset / "config.json").write_text(json.dumps(config))
    fx.write_vocab(tmp_path)
    with pytest.raises(ConfigError, match="max_position_embeddings=400000000.*describes"):
        api.from_keras_hub(str(preset), str(tmp_path / "ours"), vocab=str(tmp_path / "vocab.txt"))


def test_ours_to_a_keras_hub_preset_that_from_preset_loads(tmp_path):
    import keras
    import keras_hub

    disc_dir, _ = fx.save_hf(fx.random_hf_models(seed=9), tmp_path / "hf")
    api.from_huggingface(disc_dir, str(tmp_path / "ours"))
    preset = api.to_keras_hub(str(tmp_path / "ours"), str(tmp_path / "preset"))
    backbone = keras_hub.models.ElectraBackbone.from_preset(preset)
    tokenizer = keras_hub.models.ElectraTokenizer.from_preset(preset)
    assert tokenizer.get_vocabulary() == fx.VOCAB

    ids, mask, segments = fx.batch()
    ours = fx.our_outputs(str(tmp_path / "ours"), ids, mask, segments)["sequence_output"]
    theirs = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    assert np.abs(ours - theirs["sequence_output"]).max() < GELU_APPROXIMATION_TOLERANCE
    for layer in backbone.transformer_layers:  # its GELU made exact: ours to float precision
        layer._feedforward_intermediate_dense.activation = keras.activations.gelu
    exact = backbone({"token_ids": ids, "segment_ids": segments, "padding_mask": mask})
    np.testing.assert_allclose(ours, exact["sequence_output"], atol=1e-5)

    from electra_tf.convert.weights import read_run

    api.from_keras_hub(preset, str(tmp_path / "back"))  # and back: the same encoder
    original, back = (read_run(str(tmp_path / run))[2] for run in ("ours", "back"))
    assert sorted(back) == sorted(n for n in original if n.startswith("electra/"))
    for name in back:
        np.testing.assert_array_equal(original[name], back[name], err_msg=name)
    with pytest.raises(ConfigError, match="already exists and is not an empty directory"):
        api.to_keras_hub(str(tmp_path / "ours"), preset)
