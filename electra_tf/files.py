"""Atomic writes: a crash never leaves a half-written file or directory under its final name."""

import contextlib
import json
import os
import secrets
import shutil

from electra_tf.errors import ConfigError


@contextlib.contextmanager
def atomic_file(path: str):
    """Yields a text file to write, opened under a temporary name beside `path` and renamed
    over `path` when the block ends without error.

    The temporary name is unique (`unique_name`): workers of one multi-worker run write
    the same config into the same run directory at the same time. On an error (a full
    disk) or a kill, the temporary file is removed and `path` keeps its last complete
    version.
    """
    tmp = unique_name(path, ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path: str, text: str) -> None:
    """Writes `text` to `path` atomically (`atomic_file`)."""
    with atomic_file(path) as f:
        f.write(text)


def write_json(path: str, value, **dump_options) -> None:
    """Atomically writes `value` as indented JSON (extra options go to `json.dumps`)."""
    write_text(path, json.dumps(value, indent=2, **dump_options) + "\n")


def read_json(path: str, fix: str):
    """`path` as JSON, or None when there is no such file. A file that is not valid JSON
    (truncated by a full disk, edited by hand) is a ConfigError naming it and `fix`."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        try:
            return json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{path} is damaged (not valid JSON: {e.msg} at line "
                              f"{e.lineno}): {fix}") from e


def unique_name(path: str, suffix: str) -> str:
    """`path` + `suffix` + a part no other process or call uses (pid and random bits): two
    processes writing the same output never share, or delete, each other's work."""
    return f"{path}{suffix}-{os.getpid()}-{secrets.token_hex(4)}"


def check_new_directory(path: str) -> None:
    """Raises ConfigError unless `path` is absent or an empty directory: a command never
    deletes or overwrites what it did not create."""
    if os.path.isdir(path) and not os.listdir(path):
        return
    if os.path.lexists(path):
        raise ConfigError(f"{path!r} already exists and is not an empty directory; write to a "
                          "new path (nothing there is deleted or overwritten).")


def check_new_file(path: str) -> None:
    """Raises ConfigError when `path` exists: a command never overwrites what it did not
    create."""
    if os.path.lexists(path):
        raise ConfigError(f"{path!r} already exists; write to a new path (nothing there is "
                          "deleted or overwritten).")


@contextlib.contextmanager
def atomic_directory(path: str):
    """Yields a new, empty directory beside `path` to fill; on success it is renamed to
    `path`, on error (or a kill) it is removed and `path` is untouched.

    `path` must be absent or an empty directory (`check_new_directory`): nothing that was
    there is ever deleted. The temporary name is unique to the call and is not a number, so
    a TF Serving server watching the parent of a version directory never loads it
    half-written, and two processes never share it.
    """
    path = os.path.normpath(path)
    check_new_directory(path)
    partial = unique_name(path, ".partial")
    os.mkdir(partial)
    try:
        yield partial
        try:
            os.replace(partial, path)  # replaces an empty directory only
        except OSError as e:
            raise ConfigError(f"{path!r} appeared while it was being written (another "
                              f"process?): {e.strerror}; the new copy was removed.") from e
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
