"""Random Hugging Face ELECTRA models and side-by-side outputs for the conversion tests."""

import os

import numpy as np

VOCAB = (["[PAD]"] + [f"tok{i}" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
         + [f"word{i}" for i in range(60)])
# (discriminator, generator) transformers.ElectraConfig fields; embedding size != hidden size.
SHAPES = {
    "tiny": (dict(embedding_size=16, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                  intermediate_size=64, max_position_embeddings=64),
             dict(embedding_size=16, hidden_size=16, num_hidden_layers=2, num_attention_heads=1,
                  intermediate_size=32, max_position_embeddings=64)),
    # ELECTRA-Small's widths; 3 layers instead of 12 (depth only repeats what 3 show).
    "small": (dict(embedding_size=128, hidden_size=256, num_hidden_layers=3,
                   num_attention_heads=4, intermediate_size=1024, max_position_embeddings=128),
              dict(embedding_size=128, hidden_size=64, num_hidden_layers=3,
                   num_attention_heads=1, intermediate_size=256, max_position_embeddings=128)),
}


def write_vocab(directory):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")


def random_hf_models(shape="tiny", seed=0):
    """(ElectraForPreTraining, ElectraForMaskedLM) with every parameter randomised (LayerNorm
    and biases included, so swapped or transposed weights show) and shared embeddings."""
    import torch
    import transformers

    torch.manual_seed(seed)
    disc_shape, gen_shape = SHAPES[shape]
    disc = transformers.ElectraForPreTraining(
        transformers.ElectraConfig(vocab_size=len(VOCAB), **disc_shape)).eval()
    gen = transformers.ElectraForMaskedLM(
        transformers.ElectraConfig(vocab_size=len(VOCAB), **gen_shape)).eval()
    with torch.no_grad():
        for model in (disc, gen):
            for parameter in model.parameters():
                parameter.add_(0.05 * torch.randn_like(parameter))
        gen.electra.embeddings.load_state_dict(disc.electra.embeddings.state_dict())
    return disc, gen


def save_hf(models, directory):
    """Saves (disc, gen) as `directory/disc` and `directory/gen` with the vocab."""
    paths = []
    for model, name in zip(models, ("disc", "gen")):
        path = os.path.join(directory, name)
        model.save_pretrained(path)
        write_vocab(path)
        paths.append(path)
    return paths


def batch(seq_length=24, batch_size=3, seed=1):
    """Random ids with [CLS]/[SEP], two segments and padding (rows of different lengths)."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(104, len(VOCAB), size=(batch_size, seq_length)).astype(np.int32)
    mask = np.zeros_like(ids)
    segments = np.zeros_like(ids)
    for row, length in enumerate(np.linspace(seq_length, seq_length // 2, batch_size).astype(int)):
        mask[row, :length] = 1
        segments[row, length // 2:length] = 1
        ids[row, 0], ids[row, length - 1] = 101, 102
        ids[row, length:] = 0
    return ids, mask, segments


def hf_outputs(models, ids, mask, segments):
    import torch

    disc, gen = models
    args = dict(input_ids=torch.tensor(ids, dtype=torch.long),
                attention_mask=torch.tensor(mask, dtype=torch.long),
                token_type_ids=torch.tensor(segments, dtype=torch.long))
    with torch.no_grad():
        d = disc(**args, output_hidden_states=True)
        outputs = {"sequence_output": d.hidden_states[-1].numpy(),
                   "disc_logits": d.logits.numpy()}
        if gen is not None:
            outputs["mlm_logits"] = gen(**args).logits.numpy()
    return outputs


def our_outputs(run, ids, mask, segments):
    """The same outputs from our model restored from run directory `run`."""
    from electra_tf.convert import weights

    parts, _ = weights.load_run(run)
    inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": segments}
    sequence = parts.discriminator(inputs, training=False)["sequence_output"]
    outputs = {"sequence_output": sequence.numpy()}
    if parts.discriminator_head is not None:
        outputs["disc_logits"] = parts.discriminator_head(sequence).numpy()
    if parts.generator is not None:
        generated = parts.generator(inputs, training=False)["sequence_output"]
        positions = np.tile(np.arange(ids.shape[1], dtype=np.int32), (ids.shape[0], 1))
        outputs["mlm_logits"] = parts.generator_head(generated,
                                                     mask_positions=positions).numpy()
    return outputs


def assert_same_weights(run_a, run_b):
    """Both run directories hold bit-identical weights under the same official names;
    returns them. Runs of one config holding the same parts are read through one model
    (`run_b` restored into `run_a`'s, every weight from its checkpoint), not two: building
    it is most of a read."""
    from electra_tf import run_dir
    from electra_tf.convert import official_names, weights

    parts, pretrained = weights.load_run(str(run_a))
    before = official_names.read(parts.weights())
    other = run_dir.open_pretrained(str(run_b))
    if (other.config, _saved_weights(other)) == (pretrained.config, _saved_weights(pretrained)):
        weights.restore_run(parts, other)
        after = official_names.read(parts.weights())
    else:
        after = weights.read_run(str(run_b))[2]
    assert sorted(before) == sorted(after)
    for name in before:
        np.testing.assert_array_equal(before[name], after[name], err_msg=name)
    return before


def _saved_weights(pretrained):
    """The model parts `pretrained`'s checkpoint holds (an optimizer's state aside)."""
    return {part: held for part, held in pretrained.parts().items() if part != "optimizer"}


def assert_close(ours, theirs, atol=1e-4):
    assert set(theirs) <= set(ours), (sorted(ours), sorted(theirs))
    for key, value in theirs.items():
        np.testing.assert_allclose(ours[key], value, atol=atol, rtol=0, err_msg=key)


def random_keras_hub_backbone(seed=0):
    """A keras-hub ElectraBackbone of the tiny shape with every weight randomised."""
    import keras
    import keras_hub

    keras.utils.set_random_seed(seed)
    backbone = keras_hub.models.ElectraBackbone(
        vocab_size=len(VOCAB), num_layers=2, num_heads=2, hidden_dim=32, embedding_dim=16,
        intermediate_dim=64, max_sequence_length=64)
    rng = np.random.default_rng(seed)
    for variable in backbone.weights:  # LayerNorm and biases too, so swaps would show
        variable.assign(variable.numpy() + rng.normal(0, 0.05, variable.shape))
    return backbone
