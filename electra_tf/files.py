"""Atomic writes: a crash never leaves a half-written file or directory under its final name."""

import contextlib
import json
import os
import shutil


def write_text(path: str, text: str) -> None:
    """Writes `text` to a temporary file beside `path`, then renames it over `path`.

    The temporary name is unique to the process: workers of one multi-worker run write
    the same config into the same run directory at the same time.
    """
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def write_json(path: str, value, **dump_options) -> None:
    """Atomically writes `value` as indented JSON (extra options go to `json.dumps`)."""
    write_text(path, json.dumps(value, indent=2, **dump_options) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str):
    """Yields `path.partial` to fill; on success it replaces `path`, on error it is removed.

    The temporary name is not a number, so a TF Serving server watching the parent of a
    version directory never loads it half-written.
    """
    partial = path.rstrip("/") + ".partial"
    shutil.rmtree(partial, ignore_errors=True)
    try:
        yield partial
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if os.path.exists(path):
        shutil.rmtree(path)
    os.replace(partial, path)
