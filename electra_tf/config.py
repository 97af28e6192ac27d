"""`ElectraConfig`: one readable object for the model and its pretraining recipe.

Like the official `configure_pretraining.py`, a single flat config holds the architecture
and the pretraining hyper-parameters; named presets reproduce the paper's Table 6 and the
released Small++ checkpoints, and every field can be overridden.

Example:
>>> cfg = ElectraConfig.preset("small", train_steps=1000)
>>> cfg.generator_hidden_size
64
"""

import dataclasses
import json
from typing import Optional

from electra_tf import files
from electra_tf.errors import ConfigError, check_choice

# Fields that may change between two runs in the same model_dir without invalidating the
# checkpoints: extending or shortening training, and how often it is saved or logged.
# learning_rate too: lowering it is how a run whose loss diverged goes on (see
# training.callbacks.NonFiniteLoss).
RESUMABLE_FIELDS = frozenset({"train_steps", "checkpoint_every", "keep_checkpoints",
                              "grad_accum_steps", "preset_name", "learning_rate"})
# The architecture fields that make a preset's size.
_SIZE_FIELDS = ("embedding_size", "hidden_size", "num_layers", "num_heads",
                "intermediate_size")
# What a model brings when a new run starts from it (`pretrain.py --init_checkpoint`): the
# discriminator's architecture and tokenization, and the generator's shape when it has one.
MODEL_FIELDS = ("preset_name", "vocab_size", "embedding_size", "hidden_size", "num_layers",
                "num_heads", "intermediate_size", "max_position_embeddings",
                "type_vocab_size", "layer_norm_epsilon", "lower_case", "strip_accents",
                "pad_token_id", "unk_token_id", "cls_token_id", "sep_token_id",
                "mask_token_id")
GENERATOR_FIELDS = ("generator_size", "tie_embeddings")
TIE_EMBEDDINGS = ("all", "token", "gdes", "none")
# "transformer": a small MLM trained jointly; "uniform": samples uniformly over the vocab
# (the official `uniform_generator` ablation: nothing to learn).
GENERATORS = ("transformer", "uniform")


@dataclasses.dataclass
class ElectraConfig:
    """Architecture of the discriminator/generator pair and the pretraining recipe.

    The generator is the discriminator scaled in width by `generator_size` (hidden size,
    feed-forward size and heads), with the same depth, as in the official code.
    """

    # The preset the model was built from (`preset`), or for converted models the one
    # whose size it has; None for other sizes. Fine-tuning picks its recipe by it.
    preset_name: Optional[str] = None
    # Discriminator architecture (the generator is derived from it).
    vocab_size: int = 30522
    embedding_size: int = 128
    hidden_size: int = 256
    num_layers: int = 12
    num_heads: int = 4
    intermediate_size: int = 1024
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    dropout: float = 0.1
    initializer_range: float = 0.02
    layer_norm_epsilon: float = 1e-12
    generator_size: float = 0.25
    # "all": generator and discriminator share the whole embedding block (the paper's
    # default); "token": they share the word embeddings only, each tower has its own
    # position/segment embeddings and LayerNorm; "gdes": as "token", but the
    # discriminator's word matrix is stop_gradient(generator's) + a delta only it trains
    # (DeBERTa-v3's gradient-disentangled embedding sharing); "none": the generator has
    # its own block, as wide as its hidden layers (the official
    # `untied_generator_embeddings`).
    tie_embeddings: str = "all"
    # What the kept encoder learns: a name in `electra_tf.pretraining.objectives` (paper
    # section 3.2, Table 5); checked when a model or a FLOPs count is built from it.
    objective: str = "electra"
    generator: str = "transformer"
    # Tokenization the vocab was built with (saved so downstream tools tokenize alike).
    lower_case: bool = True
    strip_accents: bool = True
    # Special-token ids of the vocab (defaults: the released uncased English vocab).
    pad_token_id: int = 0
    unk_token_id: int = 100
    cls_token_id: int = 101
    sep_token_id: int = 102
    mask_token_id: int = 103

    # Pretraining recipe.
    max_seq_length: int = 128
    batch_size: int = 128  # the global batch of one optimizer step
    # Micro-batches per step: each replica computes batch_size / (replicas x this) examples
    # at a time and sums the gradients (a batch larger than memory allows).
    grad_accum_steps: int = 1
    train_steps: int = 1_000_000
    learning_rate: float = 5e-4
    warmup_steps: int = 10_000
    lr_decay_power: float = 1.0
    weight_decay: float = 0.01
    adam_bias_correction: bool = False  # the official optimizer has none
    clip_norm: float = 1.0
    mask_prob: float = 0.15
    mlm_weight: float = 1.0
    disc_weight: float = 50.0
    temperature: float = 1.0
    seed: int = 0
    checkpoint_every: int = 1000
    keep_checkpoints: int = 3

    # ------------------------------------------------------------------ derived values
    @property
    def generator_hidden_size(self) -> int:
        return max(1, int(round(self.hidden_size * self.generator_size)))

    @property
    def generator_intermediate_size(self) -> int:
        return max(1, int(round(self.intermediate_size * self.generator_size)))

    @property
    def generator_num_heads(self) -> int:
        return max(1, int(round(self.num_heads * self.generator_size)))

    @property
    def max_predictions_per_seq(self) -> int:
        # Same formula as the official configure_pretraining.py (19 at 128 tokens, p=0.15).
        return int((self.mask_prob + 0.005) * self.max_seq_length)

    # ------------------------------------------------------------------ presets and I/O
    @classmethod
    def preset(cls, name: str, **overrides) -> "ElectraConfig":
        """Returns the named preset (`tiny`, `small`, `small++`, `base`, `large`)."""
        if name not in PRESETS:
            raise ConfigError(
                f"Unknown preset {name!r}; choose one of {', '.join(PRESETS)}."
            )
        return dataclasses.replace(PRESETS[name], preset_name=name, **overrides).validated()

    def matching_preset(self) -> Optional[str]:
        """The first preset with this model's size (embedding, hidden, layers, heads, FFN),
        else None (small++ has small's size)."""
        return preset_of_size(**{field: getattr(self, field) for field in _SIZE_FIELDS})

    def replace(self, **overrides) -> "ElectraConfig":
        return dataclasses.replace(self, **overrides).validated()

    def validated(self) -> "ElectraConfig":
        """Checks consistency; raises ConfigError naming the field and the fix."""
        if self.max_seq_length > self.max_position_embeddings:
            raise ConfigError(
                f"max_seq_length={self.max_seq_length} exceeds the model's "
                f"max_position_embeddings={self.max_position_embeddings}; lower "
                "--max_seq_length or choose a preset with more positions."
            )
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}."
            )
        if self.generator_hidden_size % self.generator_num_heads:
            raise ConfigError(
                f"generator width {self.generator_hidden_size} is not divisible by its "
                f"{self.generator_num_heads} heads; pick another --generator_size."
            )
        if not 0.0 < self.mask_prob < 1.0:
            raise ConfigError(f"mask_prob={self.mask_prob} must be in (0, 1).")
        if not 0.0 < self.generator_size <= 1.0:
            raise ConfigError(f"generator_size={self.generator_size} must be in (0, 1].")
        check_choice("tie_embeddings", self.tie_embeddings, TIE_EMBEDDINGS)
        check_choice("generator", self.generator, GENERATORS)
        if self.grad_accum_steps < 1 or self.batch_size % self.grad_accum_steps:
            raise ConfigError(f"batch_size={self.batch_size} must be a multiple of "
                              f"grad_accum_steps={self.grad_accum_steps} (>= 1).")
        if self.max_seq_length < 8:
            raise ConfigError(f"max_seq_length={self.max_seq_length} is too short (min 8).")
        return self

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> "ElectraConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"Unknown config fields {unknown}; known: {sorted(known)}.")
        return cls(**values).validated()

    def save(self, path: str) -> None:
        """Writes JSON atomically (a crash never leaves a half-written config)."""
        files.write_json(path, self.to_dict(), sort_keys=True)

    @classmethod
    def load(cls, path: str) -> "ElectraConfig":
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))

    def differences(self, other: "ElectraConfig", ignore=RESUMABLE_FIELDS) -> dict:
        """Fields (outside `ignore`) whose values differ: {name: (self value, other value)}."""
        mine, theirs = self.to_dict(), other.to_dict()
        return {k: (mine[k], theirs[k]) for k in mine if k not in ignore and mine[k] != theirs[k]}


def preset_of_size(embedding_size, hidden_size, num_layers, num_heads,
                   intermediate_size) -> Optional[str]:
    """The first preset of this size, else None (small++ has small's size)."""
    size = (embedding_size, hidden_size, num_layers, num_heads, intermediate_size)
    return next((name for name, preset in PRESETS.items()
                 if tuple(getattr(preset, field) for field in _SIZE_FIELDS) == size), None)


_SMALL = ElectraConfig()
PRESETS = {
    # For tests: seconds per hundred steps on a CPU.
    "tiny": dataclasses.replace(
        _SMALL, embedding_size=32, hidden_size=64, num_layers=2, num_heads=2,
        intermediate_size=128, max_position_embeddings=128, generator_size=0.5,
        max_seq_length=64, batch_size=16, train_steps=300, learning_rate=5e-4,
        warmup_steps=100, checkpoint_every=100,
    ),
    "small": _SMALL,
    # The released ELECTRA-Small++: a generator as wide as the discriminator, 512 tokens.
    "small++": dataclasses.replace(_SMALL, generator_size=1.0, max_seq_length=512),
    "base": dataclasses.replace(
        _SMALL, embedding_size=768, hidden_size=768, num_heads=12, intermediate_size=3072,
        generator_size=1 / 3, max_seq_length=512, batch_size=256, train_steps=766_000,
        learning_rate=2e-4,
    ),
    "large": dataclasses.replace(
        _SMALL, embedding_size=1024, hidden_size=1024, num_layers=24, num_heads=16,
        intermediate_size=4096, generator_size=0.25, max_seq_length=512, batch_size=2048,
        train_steps=400_000, learning_rate=2e-4, mask_prob=0.25,
    ),
}

