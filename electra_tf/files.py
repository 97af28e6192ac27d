"""Atomic file writes: a crash never leaves a half-written file under its final name."""

import json
import os


def write_text(path: str, text: str) -> None:
    """Writes `text` to `path.tmp`, then renames it over `path`."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path: str, value, **dump_options) -> None:
    """Atomically writes `value` as indented JSON (extra options go to `json.dumps`)."""
    write_text(path, json.dumps(value, indent=2, **dump_options) + "\n")
