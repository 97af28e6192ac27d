"""What the benches read from the repository and beside it: the demo sentiment set and the
reference ELECTRA-Small (`../shared/models/electra-small-ref`, see its README)."""

import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REFERENCE_DISCRIMINATOR = os.path.join(ROOT, "..", "shared", "models", "electra-small-ref",
                                       "discriminator")
MODEL_HELP = "An ELECTRA discriminator in Hugging Face's layout (with vocab.txt)."


def sentiment(split: str) -> list:
    """The demo sentiment set's rows ({"text", "label", "source"}) of `split` (train, dev)."""
    path = os.path.join(ROOT, "data", "demo", "sentiment", f"{split}.jsonl")
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]
