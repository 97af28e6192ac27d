"""Our `ElectraConfig` for a model described elsewhere (checkpoint shapes, HF config.json)."""

import dataclasses
import os
from typing import Optional

from electra_tf.config import ElectraConfig
from electra_tf.errors import ConfigError
from electra_tf.text import vocab as vocab_lib


@dataclasses.dataclass
class GeneratorShape:
    """The generator as the source describes it."""

    hidden_size: int
    intermediate_size: int
    num_heads: int
    num_layers: int
    untied_embeddings: bool = False


def make_config(tokens: list, lower_case: Optional[bool], generator: Optional[GeneratorShape],
                source: str, **architecture) -> ElectraConfig:
    """The config of the converted model; casing from the vocab unless `lower_case` is given.

    `architecture` holds ElectraConfig's discriminator fields (sizes, vocab, positions...).
    Raises ConfigError when the generator is not the discriminator scaled in width (the only
    generators our config describes, like the official code's).
    """
    if len(tokens) != architecture["vocab_size"]:
        raise ConfigError(f"{source}: the vocab file has {len(tokens)} tokens but the word "
                          f"embeddings have {architecture['vocab_size']} rows; pass the "
                          "vocab the model was trained with (--vocab).")
    if lower_case is None:
        lower_case = not vocab_lib.looks_cased(tokens)
    config = ElectraConfig(lower_case=lower_case,
                           strip_accents=vocab_lib.strips_accents(lower_case),
                           **vocab_lib.special_token_ids(tokens), **architecture)
    if generator is not None:
        config = dataclasses.replace(
            config, generator_size=generator.hidden_size / config.hidden_size,
            tie_embeddings="none" if generator.untied_embeddings else "all")
        ours = (config.generator_intermediate_size, config.generator_num_heads,
                config.num_layers)
        theirs = (generator.intermediate_size, generator.num_heads, generator.num_layers)
        if ours != theirs:
            raise ConfigError(
                f"{source}: the generator (hidden {generator.hidden_size}, FFN, heads, layers "
                f"= {theirs}) is not the discriminator scaled to width "
                f"{generator.hidden_size}/{config.hidden_size}, which would give {ours}. "
                "Convert the discriminator alone with --discriminator_only.")
    try:
        return config.replace(max_seq_length=min(config.max_seq_length,
                                                 config.max_position_embeddings),
                              preset_name=config.matching_preset())
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from e


def check_weights_size(architecture: dict, weight_files: list, source: str) -> None:
    """Refuses a config that describes many more parameters than `weight_files` can hold,
    before anything is built: a config.json claiming `max_position_embeddings: 400000000`
    would otherwise make TensorFlow allocate that table first (and fail after minutes, or
    exhaust the memory). Weights take at least 2 bytes each (fp16/bf16 files).

    `architecture` holds ElectraConfig's discriminator fields, as `make_config` takes them.
    """
    a = architecture
    hidden = a["hidden_size"]
    parameters = ((a["vocab_size"] + a["max_position_embeddings"] + a["type_vocab_size"])
                  * a["embedding_size"]
                  + a["num_layers"] * (4 * hidden * hidden + 2 * hidden * a["intermediate_size"]))
    available = sum(os.path.getsize(path) for path in weight_files)
    if 2 * parameters > 1.5 * available:
        sizes = ", ".join(f"{k}={a[k]}" for k in ("vocab_size", "max_position_embeddings",
                                                   "hidden_size", "num_layers",
                                                   "intermediate_size"))
        raise ConfigError(f"{source}: its config ({sizes}) describes {parameters:,} "
                          f"parameters, but its weight files hold {available:,} bytes: the "
                          "config does not belong to these weights.")
