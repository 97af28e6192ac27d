"""Hugging Face `transformers` ELECTRA directories: read them, and write ones HF loads.

A discriminator directory holds `config.json` (`ElectraForPreTraining` or `ElectraModel`),
`model.safetensors` (or `pytorch_model.bin`, which needs torch) and the tokenizer files; the
generator (`ElectraForMaskedLM`) is a second such directory. HF's parameter names are the
official TF1 names rewritten (HF's own TF1 loader does exactly that), so this module only
translates names and transposes dense kernels; `official_names.py` holds the model map.
"""

import os
import re
from typing import Optional

import numpy as np

from electra_tf import files
from electra_tf.errors import ConfigError
from electra_tf.convert import official_names
from electra_tf.convert.configs import GeneratorShape, make_config
from electra_tf.text import vocab as vocab_lib

# Parameters that are not weights of the model: a buffer, and the generator's output layer
# (tied to its word embeddings, checked separately).
_NOT_WEIGHTS = re.compile(r"(position_ids|generator_lm_head\.weight)$")


def hf_name(official: str) -> str:
    """The HF parameter name of an official TF1 variable name.

    Generator names (`generator/...`, `generator_predictions/...`) are those of the
    `ElectraForMaskedLM` model; the rest, `ElectraForPreTraining`'s. The shared embeddings
    (`electra/embeddings/...`) have the same name in both.
    """
    name = re.sub(r"^generator/", "electra/", official)
    name = name.replace("generator_predictions/output_bias", "generator_lm_head/bias")
    name = name.replace("discriminator_predictions/dense_1/", "discriminator_predictions/"
                                                              "dense_prediction/")
    name = re.sub(r"/layer_(\d+)/", r"/layer/\1/", name)
    name = re.sub(r"/(kernel|gamma)$", "/weight", name)
    name = re.sub(r"/beta$", "/bias", name)
    name = re.sub(r"_embeddings$", "_embeddings/weight", name)
    return name.replace("/", ".")


def _transpose_kernel(official: str, value: np.ndarray) -> np.ndarray:
    """HF <-> official layout of one weight: torch Linear stores [out, in], TF dense kernels
    [in, out]; everything else is the same array. Its own inverse."""
    return np.ascontiguousarray(value.T) if official.endswith("/kernel") else value


def weight_files(directory: str) -> list:
    """The weight files of an HF model directory: model.safetensors, the shards its
    .index.json names (each must be a file inside `directory`), or pytorch_model.bin."""
    single = os.path.join(directory, "model.safetensors")
    index = single + ".index.json"
    if os.path.isfile(single):
        return [single]
    if os.path.isfile(index):
        # By name, not by real path: the Hub's cache links a snapshot's files to its blobs.
        inside = os.path.normpath(directory) + os.sep
        shards = sorted(set(_read_json(index).get("weight_map", {}).values()))
        if not shards:
            raise ConfigError(f"{index} names no weight files.")
        for shard in shards:
            path = os.path.normpath(os.path.join(directory, shard))
            if not (path.startswith(inside) and os.path.isfile(path)):
                raise ConfigError(f"{index} names the shard {shard!r}, which is not a file "
                                  f"inside {directory}.")
        return [os.path.join(directory, shard) for shard in shards]
    binary = os.path.join(directory, "pytorch_model.bin")
    if os.path.isfile(binary):
        return [binary]
    raise ConfigError(f"{directory}: no model.safetensors or pytorch_model.bin.")


def read_state_dict(directory: str) -> dict:
    """{parameter name: float32 array} from model.safetensors(.index.json) or pytorch_model.bin."""
    paths = weight_files(directory)
    if paths[0].endswith(".safetensors"):
        from safetensors.numpy import load_file

        state = {}
        for shard in paths:
            state.update(load_file(shard))
    else:
        try:
            import torch
        except ImportError as e:
            raise ConfigError(f"{directory} holds pytorch_model.bin, which needs torch to read "
                              "(`pip install torch`), or convert it to safetensors.") from e
        loaded = torch.load(os.path.join(directory, "pytorch_model.bin"), map_location="cpu",
                            weights_only=True)
        state = {k: v.float().numpy() for k, v in loaded.items()}
    return {k: np.asarray(v, np.float32) for k, v in state.items()}


def _read_json(path: str) -> dict:
    value = files.read_json(path, "not a Hugging Face model file; download it again.")
    if value is None:
        raise ConfigError(f"{path} does not exist: not a Hugging Face model directory.")
    return value


_SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
          "intermediate_size", "max_position_embeddings", "type_vocab_size")


def _architecture(hf_config: dict, path: str) -> dict:
    present = [k for k in ("embedding_size",) if k in hf_config]  # optional
    bad = [k for k in (*_SIZES, *present)
           if not (isinstance(hf_config.get(k), int) and hf_config[k] > 0)]
    if bad:
        raise ConfigError(f"{path}: {', '.join(bad)} must be positive integers (got "
                          f"{', '.join(repr(hf_config.get(k)) for k in bad)}).")
    if hf_config.get("model_type") != "electra":
        raise ConfigError(f"{path}: model_type is {hf_config.get('model_type')!r}, not "
                          "'electra'.")
    if hf_config.get("hidden_act", "gelu") != "gelu":
        raise ConfigError(f"{path}: hidden_act={hf_config['hidden_act']!r}; our encoder uses "
                          "the exact (erf) 'gelu' of ELECTRA.")
    if hf_config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(f"{path}: only absolute position embeddings are supported.")
    return hf_config


def read_vocab(directory: str, vocab: Optional[str] = None) -> list:
    """The model's vocab: the `vocab` file when given, else the directory's vocab.txt, else
    the WordPiece vocab of its tokenizer.json."""
    if vocab:
        return vocab_lib.load_vocab(vocab)
    for name, load in (("vocab.txt", vocab_lib.load_vocab),
                       ("tokenizer.json", vocab_lib.load_tokenizer_json)):
        if os.path.isfile(os.path.join(directory, name)):
            return load(os.path.join(directory, name))
    raise ConfigError(f"{directory} has no vocab.txt or tokenizer.json: pass the model's "
                      "vocab with --vocab.")


def read_model(directory: str, generator_directory: Optional[str] = None,
               lower_case: Optional[bool] = None, vocab: Optional[str] = None):
    """(ElectraConfig, {"discriminator"/"generator": HF state dict}, vocab tokens) of HF
    model directories; `vocab` overrides the directory's own (see `read_vocab`)."""
    config_path = os.path.join(directory, "config.json")
    disc = _architecture(_read_json(config_path), config_path)
    tokens = read_vocab(directory, vocab)
    tokenizer_config = os.path.join(directory, "tokenizer_config.json")
    if lower_case is None and os.path.isfile(tokenizer_config):
        lower_case = _read_json(tokenizer_config).get("do_lower_case", True)
    architecture = dict(
        vocab_size=disc["vocab_size"], embedding_size=disc.get("embedding_size", 128),
        hidden_size=disc["hidden_size"], num_layers=disc["num_hidden_layers"],
        num_heads=disc["num_attention_heads"], intermediate_size=disc["intermediate_size"],
        max_position_embeddings=disc["max_position_embeddings"],
        type_vocab_size=disc["type_vocab_size"],
        dropout=disc.get("hidden_dropout_prob", 0.1),
        initializer_range=disc.get("initializer_range", 0.02),
        layer_norm_epsilon=disc.get("layer_norm_eps", 1e-12))
    state = {"discriminator": read_state_dict(directory)}
    _check_config_fits(architecture, state["discriminator"], config_path)
    generator = None
    if generator_directory:
        gen_path = os.path.join(generator_directory, "config.json")
        gen = _architecture(_read_json(gen_path), gen_path)
        generator = GeneratorShape(
            gen["hidden_size"], gen["intermediate_size"], gen["num_attention_heads"],
            gen["num_hidden_layers"],
            untied_embeddings=gen.get("embedding_size", 128) != disc.get("embedding_size", 128))
        state["generator"] = read_state_dict(generator_directory)
    config = make_config(tokens, lower_case, generator, directory, **architecture)
    return config, state, tokens


def to_official(state: dict, names, source: str) -> dict:
    """{official name: array} for the official `names` a model needs, from HF state dicts.

    `state` maps "discriminator" (and optionally "generator") to state dicts. The generator's
    copy of the shared embeddings must equal the discriminator's. Raises ConfigError naming
    any HF parameter nothing maps to, so no weight of the source is silently dropped.
    """
    weights, used = {}, {model: set() for model in state}
    for official in names:
        model = "generator" if official_names.is_generator_name(official) else "discriminator"
        if model not in state:
            continue
        key = _with_prefix(hf_name(official), state[model])
        if key is None:
            continue  # reported as missing by official_names.assign
        used[model].add(key)
        weights[official] = _transpose_kernel(official, state[model][key])
    if "generator" in state:
        used["generator"] |= _check_generator_copies(state, used["generator"], source)
    for model, params in state.items():
        unused = sorted(k for k in params if k not in used[model] and not _NOT_WEIGHTS.search(k))
        if unused:
            raise ConfigError(f"{source}: {len(unused)} {model} parameter(s) have no place in "
                              f"an ELECTRA encoder: {', '.join(unused[:15])}. Task heads "
                              "cannot be converted; give the pretrained model.")
    return weights


def _check_config_fits(architecture: dict, params: dict, path: str) -> None:
    """Compares the config's sizes with the weights' shapes before anything is built: a
    config.json claiming `max_position_embeddings: 400000000` would otherwise make
    TensorFlow allocate that table first (and fail after minutes, or exhaust the memory)."""
    a = architecture
    expected = {
        "embeddings.word_embeddings.weight": ("vocab_size", "embedding_size"),
        "embeddings.position_embeddings.weight": ("max_position_embeddings", "embedding_size"),
        "embeddings.token_type_embeddings.weight": ("type_vocab_size", "embedding_size"),
        "encoder.layer.0.attention.self.query.weight": ("hidden_size", "hidden_size"),
        "encoder.layer.0.intermediate.dense.weight": ("intermediate_size", "hidden_size"),
    }
    for name, fields in expected.items():
        key = _with_prefix("electra." + name, params)
        shape = tuple(a[field] for field in fields)
        if key is not None and tuple(params[key].shape) != shape:
            sizes = ", ".join(f"{field}={a[field]}" for field in dict.fromkeys(fields))
            raise ConfigError(f"{path}: {sizes}, but the weights' {key} is "
                              f"{tuple(params[key].shape)}: the config does not belong to "
                              "these weights.")
    layers = {match.group(1) for match in map(re.compile(r"encoder\.layer\.(\d+)\.").search,
                                              params) if match}
    if layers and len(layers) != a["num_layers"]:
        raise ConfigError(f"{path}: num_hidden_layers={a['num_layers']}, but the weights hold "
                          f"{len(layers)} layers: the config does not belong to these weights.")


def _with_prefix(key: str, params: dict) -> Optional[str]:
    """`key`, or its unprefixed form for a bare `ElectraModel` (saved without `electra.`)."""
    if key in params:
        return key
    bare = key[len("electra."):] if key.startswith("electra.") else key
    return bare if bare in params else None


def _check_generator_copies(state: dict, used: set, source: str) -> set:
    """The generator file repeats the shared embeddings and its tied output layer: both must
    be copies. Returns the repeated parameter names."""
    generator, discriminator = state["generator"], state["discriminator"]
    copies = {k for k in generator if k.startswith("electra.embeddings.") and k not in used
              and not _NOT_WEIGHTS.search(k)}
    differing = sorted(k for k in copies if _with_prefix(k, discriminator) is None or not
                       np.array_equal(generator[k], discriminator[_with_prefix(k, discriminator)]))
    if differing:
        raise ConfigError(f"{source}: the generator's {', '.join(differing)} differ from the "
                          "discriminator's; our model shares the embedding block. Convert "
                          "with --discriminator_only.")
    lm_weight = generator.get("generator_lm_head.weight")
    words = generator.get("electra.embeddings.word_embeddings.weight")
    if lm_weight is not None and words is not None and not np.array_equal(lm_weight, words):
        raise ConfigError(f"{source}: the generator's output layer is not tied to its word "
                          "embeddings; convert with --discriminator_only.")
    return copies


def hf_config(config, generator: bool = False) -> dict:
    """transformers' `ElectraConfig` fields for our config (or for its generator)."""
    untied = generator and config.tie_embeddings == "none"
    return {
        "architectures": ["ElectraForMaskedLM" if generator else "ElectraForPreTraining"],
        "model_type": "electra",
        "vocab_size": config.vocab_size,
        "embedding_size": config.generator_hidden_size if untied else config.embedding_size,
        "hidden_size": config.generator_hidden_size if generator else config.hidden_size,
        "num_hidden_layers": config.num_layers,
        "num_attention_heads": (config.generator_num_heads if generator
                                else config.num_heads),
        "intermediate_size": (config.generator_intermediate_size if generator
                              else config.intermediate_size),
        "hidden_act": "gelu",
        "hidden_dropout_prob": config.dropout,
        "attention_probs_dropout_prob": config.dropout,
        "max_position_embeddings": config.max_position_embeddings,
        "type_vocab_size": config.type_vocab_size,
        "initializer_range": config.initializer_range,
        "layer_norm_eps": config.layer_norm_epsilon,
        "pad_token_id": config.pad_token_id,
        "position_embedding_type": "absolute",
        "torch_dtype": "float32",
    }


def write_model(weights: dict, config, vocab_path: str, output: str) -> list:
    """Writes HF directories into the new directory `output`: the discriminator and, with
    generator weights, `generator/` inside it. Returns the directories written."""
    models = {"discriminator": ("", False)}
    if any(official_names.is_generator_name(name) for name in weights):
        models["generator"] = ("generator", True)
    with files.atomic_directory(output) as partial:
        for subdirectory, generator in models.values():
            state = {}
            for official, value in weights.items():
                shared = official.startswith("electra/embeddings/")
                if official_names.is_generator_name(official) == generator or (
                        generator and shared):
                    state[hf_name(official)] = _transpose_kernel(official, value)
            if generator:
                state["generator_lm_head.weight"] = state[
                    "electra.embeddings.word_embeddings.weight"]
            write_directory(os.path.join(partial, subdirectory), state,
                            hf_config(config, generator), config, vocab_path)
    return [os.path.join(output, subdirectory).rstrip(os.sep)
            for subdirectory, _ in models.values()]


def encoder_state(weights: dict) -> dict:
    """{HF name: array} of the discriminator encoder's official `weights`."""
    return {hf_name(name): _transpose_kernel(name, value) for name, value in weights.items()
            if name.startswith(official_names.DISCRIMINATOR_SCOPE + "/")}


def write_directory(directory: str, state: dict, config_json: dict, config, vocab_path: str,
                    max_length: Optional[int] = None) -> None:
    """One HF model directory: `model.safetensors` of `state`, `config.json`, and the
    tokenizer files of our `config`'s vocab (inputs cut at `max_length`, default the
    position table's length)."""
    from safetensors.numpy import save_file

    os.makedirs(directory, exist_ok=True)
    # Contiguous: safetensors writes the buffer as it lies (a transposed view would be
    # written untransposed).
    save_file({name: np.ascontiguousarray(value, np.float32) for name, value in state.items()},
              os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    files.write_json(os.path.join(directory, "config.json"), config_json)
    with open(vocab_path, encoding="utf-8") as f:
        files.write_text(os.path.join(directory, "vocab.txt"), f.read())
    files.write_json(os.path.join(directory, "tokenizer_config.json"), {
        "tokenizer_class": "ElectraTokenizer", "do_lower_case": config.lower_case,
        "strip_accents": config.strip_accents if not config.lower_case else None,
        "model_max_length": max_length or config.max_position_embeddings,
    })
    files.write_json(os.path.join(directory, "special_tokens_map.json"), {
        "unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
        "cls_token": "[CLS]", "mask_token": "[MASK]"})
