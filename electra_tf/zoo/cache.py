"""The model cache under `$ELECTRA_TF_HOME` (default `~/.cache/electra_tf`).

    models/<name>/           a converted model: a run directory (`run_dir`'s layout) plus
                             zoo_entry.json (source, download checksums, every file's sha256)
    models/<name>.partial/   a download or conversion under way (never read as a model)
    downloads/<name>/        archives while they are unpacked and converted (then removed)
    checksums.json           {URL: sha256} recorded at a source's first download and
                             checked on every later download of it

Hugging Face repos download into the Hugging Face cache (`$HF_HUB_CACHE`), shared with
`transformers`. A model directory appears by one rename once it is complete, so a download
or conversion killed at any point never leaves an entry that looks complete; a later use
verifies the entry's files against the sha256 sums written with it.
"""

import contextlib
import hashlib
import json
import os
import shutil
from typing import Optional

from electra_tf import files
from electra_tf.errors import ConfigError

HOME_ENV = "ELECTRA_TF_HOME"
ENTRY_FILE = "zoo_entry.json"
CHECKSUMS_FILE = "checksums.json"


def home() -> str:
    return os.path.expanduser(os.environ.get(HOME_ENV) or "~/.cache/electra_tf")


def model_dir(name: str) -> str:
    return os.path.join(home(), "models", name)


def downloads_dir(name: str) -> str:
    return os.path.join(home(), "downloads", name)


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _file_sums(directory: str) -> dict:
    """{relative path: sha256} of every file under `directory` but the entry file."""
    sums = {}
    for root, _, names in os.walk(directory):
        for name in names:
            path = os.path.join(root, name)
            relative = os.path.relpath(path, directory)
            if relative != ENTRY_FILE:
                sums[relative] = sha256_of(path)
    return sums


def cached(name: str) -> Optional[str]:
    """The complete, verified cache entry `name`, or None when there is none.

    Raises ConfigError when its files no longer match the sums written with them.
    """
    directory = model_dir(name)
    entry_path = os.path.join(directory, ENTRY_FILE)
    if not os.path.isfile(entry_path):
        return None
    with open(entry_path, encoding="utf-8") as f:
        expected = json.load(f)["files"]
    actual = _file_sums(directory)
    changed = sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
    if changed:
        raise ConfigError(f"The cached model {directory} is damaged ({', '.join(changed[:5])} "
                          f"changed since it was written): delete that directory and run "
                          "again to download it afresh.")
    return directory


def read_entry(name: str) -> Optional[dict]:
    """The zoo_entry.json of a cached model (unverified), or None."""
    path = os.path.join(model_dir(name), ENTRY_FILE)
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


@contextlib.contextmanager
def new_entry(name: str, facts: dict):
    """Yields an empty directory to convert model `name` into; on success the directory,
    with a zoo_entry.json of `facts` and its files' sums, becomes `models/<name>`. On any
    error (or a kill) nothing appears under that name."""
    final = model_dir(name)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    with files.atomic_directory(final) as partial:
        os.makedirs(partial)
        yield partial
        files.write_json(os.path.join(partial, ENTRY_FILE),
                         dict(facts, files=_file_sums(partial)))


def remove_downloads(name: str) -> None:
    shutil.rmtree(downloads_dir(name), ignore_errors=True)


def _checksums_path() -> str:
    return os.path.join(home(), CHECKSUMS_FILE)


def recorded_sha256(url: str) -> Optional[str]:
    path = _checksums_path()
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f).get(url)


def record_sha256(url: str, sha256: str) -> None:
    """Remembers a source's checksum from its first download (trust on first use)."""
    path = _checksums_path()
    sums = {}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            sums = json.load(f)
    sums[url] = sha256
    os.makedirs(os.path.dirname(path), exist_ok=True)
    files.write_json(path, sums, sort_keys=True)
