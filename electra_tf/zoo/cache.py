"""The model cache under `$ELECTRA_TF_HOME` (default `~/.cache/electra_tf`).

    models/<name>/           a converted model: a run directory (`run_dir`'s layout) plus
                             zoo_entry.json (source, download checksums, every file's sha256)
    models/<name>.partial-*/ a conversion under way (never read as a model)
    downloads/<name>/        archives while they are unpacked and converted (then removed)
    locks/<name>.lock        held by the one process fetching or converting <name>
    checksums.json           {URL: sha256} recorded at a source's first download and
                             checked on every later download of it
    xla/<key>/               XLA's compiled kernels (`electra_tf.xla_cache`)

Hugging Face repos download into the Hugging Face cache (`$HF_HUB_CACHE`), shared with
`transformers`. A model directory appears by one rename once it is complete, so a download
or conversion killed at any point never leaves an entry that looks complete; a later use
verifies the entry's files against the sha256 sums written with it. Processes fetching the
same entry at once take turns (`locked`): the second finds the first's entry cached.
"""

import contextlib
import glob
import hashlib
import os
import shutil
import sys
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
    entry = read_entry(name)
    if entry is None:
        return None
    expected = entry.get("files", {})
    actual = _file_sums(directory)
    changed = sorted(k for k in set(expected) | set(actual) if expected.get(k) != actual.get(k))
    if changed:
        raise ConfigError(f"The cached model {directory} is damaged ({', '.join(changed[:5])} "
                          f"changed since it was written): delete that directory and run "
                          "again to download it afresh.")
    return directory


def read_entry(name: str) -> Optional[dict]:
    """The zoo_entry.json of a cached model (unverified), or None."""
    return files.read_json(os.path.join(model_dir(name), ENTRY_FILE),
                           f"delete {model_dir(name)} and run again to fetch it afresh.")


@contextlib.contextmanager
def new_entry(name: str, facts: dict):
    """Yields an empty directory to convert model `name` into; on success the directory,
    with a zoo_entry.json of `facts` and its files' sums, becomes `models/<name>`. On any
    error (or a kill) nothing appears under that name."""
    final = model_dir(name)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    with files.atomic_directory(final) as partial:
        yield partial
        files.write_json(os.path.join(partial, ENTRY_FILE),
                         dict(facts, files=_file_sums(partial)))


@contextlib.contextmanager
def locked(name: str):
    """Holds the lock of cache entry `name` (or of `checksums.json`): one process at a time
    checks, fetches and writes it. The operating system releases it when a holder dies."""
    import filelock  # 40-60 ms to import: `import electra_tf` reads `home()` (`xla_cache`)

    directory = os.path.join(home(), "locks")
    os.makedirs(directory, exist_ok=True)
    lock = filelock.FileLock(os.path.join(directory, name + ".lock"))
    try:
        lock.acquire(timeout=0)
    except filelock.Timeout:
        print(f"Waiting for another process working on {name} in {home()}...",
              file=sys.stderr)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def remove_unfinished(name: str) -> None:
    """Removes what killed earlier attempts at entry `name` left (its downloads and
    partial directories). Only under `locked(name)`, where no other process writes them."""
    shutil.rmtree(downloads_dir(name), ignore_errors=True)
    for partial in glob.glob(glob.escape(model_dir(name)) + ".partial-*"):
        shutil.rmtree(partial, ignore_errors=True)


def remove_entry(name: str) -> None:
    """Removes cache entry `name` (one this cache wrote: it holds a zoo_entry.json), under
    `locked(name)`."""
    directory = model_dir(name)
    if os.path.isfile(os.path.join(directory, ENTRY_FILE)):
        shutil.rmtree(directory)


def _checksums_path() -> str:
    return os.path.join(home(), CHECKSUMS_FILE)


def recorded_sha256(url: str) -> Optional[str]:
    return _recorded_sums().get(url)


def _recorded_sums() -> dict:
    return files.read_json(_checksums_path(), "delete it; the sums of later downloads are "
                           "then recorded afresh (check those sources).") or {}


def record_sha256(url: str, sha256: str) -> None:
    """Remembers a source's checksum from its first download (trust on first use)."""
    path = _checksums_path()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with locked(CHECKSUMS_FILE):  # processes fetching different models update it at once
        sums = _recorded_sums()
        sums[url] = sha256
        files.write_json(path, sums, sort_keys=True)
