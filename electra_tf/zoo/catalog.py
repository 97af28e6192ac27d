"""The presets catalog: released ELECTRA models by name, and what else names a source.

`catalog.json` (beside this file) holds one entry per model; a JSON file of the same shape
named by `$ELECTRA_TF_CATALOG` adds entries or replaces built-in ones (a mirror, a private
model). A source is a catalog name, `hf:ORG/REPO[@REVISION]`, or an `https://` archive URL
(`http://` only with its hash pinned: `URL#sha256=<hex>`, pip's notation).
"""

import dataclasses
import difflib
import hashlib
import json
import os
import re
from typing import Optional
from urllib.parse import urlparse

from electra_tf.errors import ConfigError, check_choice

CATALOG_ENV = "ELECTRA_TF_CATALOG"
FORMATS = ("official", "huggingface", "keras_hub", "auto")
_BUILT_IN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "catalog.json")
_HF_PREFIX = "hf:"


@dataclasses.dataclass(frozen=True)
class Source:
    """Where a model's files are and what layout they have.

    `format` "official": a TF1 checkpoint archive at `url` (vocab inside, else at
    `vocab_url`); "huggingface": the Hub repo `repo` at `revision` (and `generator`, the
    ElectraForMaskedLM repo; with `find_generator`, ORG/X-generator beside an
    ORG/X-discriminator is used when it exists); "keras_hub": the keras-hub preset `handle`
    (`hf://...` or `kaggle://...`); "auto": an archive at `url` whose layout is found after
    unpacking. `sha256` pins the archive's checksum where the host publishes none;
    `lower_case` overrides the casing the model's files suggest.
    """

    format: str
    url: Optional[str] = None
    vocab_url: Optional[str] = None
    sha256: Optional[str] = None
    repo: Optional[str] = None
    generator: Optional[str] = None
    revision: str = "main"
    find_generator: bool = False
    handle: Optional[str] = None
    lower_case: Optional[bool] = None


@dataclasses.dataclass(frozen=True)
class Entry:
    """One model: catalog facts and its source. `name` is also its cache directory's name."""

    name: str
    source: Source
    description: str = ""
    size: str = ""
    language: str = ""
    casing: str = ""
    parameters: Optional[int] = None
    license: str = ""


def _entry(name: str, fields: dict, origin: str) -> Entry:
    try:
        source = Source(**fields["source"])
        entry = Entry(name=name, source=source,
                      **{k: v for k, v in fields.items() if k != "source"})
    except (KeyError, TypeError) as e:
        raise ConfigError(f"{origin}: catalog entry {name!r} is malformed ({e}); see "
                          f"{_BUILT_IN} for the shape.") from e
    check_choice(f"{origin}: {name}.source.format", source.format, FORMATS)
    for url, sha256 in ((source.url, source.sha256), (source.vocab_url, None)):
        if url is not None:
            check_url(url, sha256, f"{origin}: {name}")
    return entry


def check_url(url: str, sha256: Optional[str], origin: str) -> None:
    """Refuses an archive URL that is not https:// with a host and a path, or http://
    to another machine without a pinned sha256 (a first download over plain http could be
    anyone's, and its hash would be trusted from then on)."""
    parts = urlparse(url)
    if parts.scheme not in ("https", "http") or not parts.netloc or parts.path in ("", "/"):
        raise ConfigError(f"{origin}: {url!r} is not an archive URL; give "
                          "https://HOST/PATH/TO/ARCHIVE.")
    loopback = parts.hostname in ("localhost", "127.0.0.1", "::1")  # a mirror on this machine
    if parts.scheme == "http" and not sha256 and not loopback:
        raise ConfigError(f"{origin}: {url!r} is plain http, which anyone on the way can "
                          "change: use https://, or pin the archive's hash "
                          "(URL#sha256=<64 hex digits>, or \"sha256\" in a catalog entry).")
    if sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise ConfigError(f"{origin}: sha256 {sha256!r} is not 64 lower-case hex digits.")


def _read(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return {name: _entry(name, fields, path) for name, fields in json.load(f).items()}
    except OSError as e:
        raise ConfigError(f"${CATALOG_ENV}={path!r} cannot be read: {e.strerror}.") from e
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path} is not valid JSON: {e}.") from e


def load() -> dict:
    """{name: Entry}: the built-in catalog, updated by `$ELECTRA_TF_CATALOG`'s entries."""
    entries = _read(_BUILT_IN)
    extra = os.environ.get(CATALOG_ENV)
    if extra:
        entries.update(_read(extra))
    return entries


def is_hub_id(spec: str) -> bool:
    """Whether `spec` reads as a Hugging Face repo id, `ORG/NAME` (as `transformers` takes
    them; the caller checks first that no such local path exists)."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    if spec.count("/") != 1 or spec.startswith((".", "~")):
        return False
    try:
        validate_repo_id(spec)
        return True
    except HFValidationError:
        return False


def is_remote(spec: str) -> bool:
    """Whether `spec` names a source by scheme (not a catalog name or a path)."""
    return spec.startswith((_HF_PREFIX, "https://", "http://"))


def slug(spec: str) -> str:
    """A cache directory name for an ad-hoc source: readable, and unique to `spec`."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", spec.split("://")[-1])[-60:].strip("_.")
    return f"{readable}-{hashlib.sha256(spec.encode()).hexdigest()[:10]}"


def lookup(spec: str) -> Entry:
    """The entry `spec` names: a catalog name, `hf:ORG/REPO[@REVISION]` (or `ORG/REPO`
    alone) or an archive URL.

    Raises ConfigError for an unknown name, suggesting the closest ones.
    """
    if is_hub_id(spec.partition("@")[0]):  # ORG/NAME[@REVISION], as transformers takes it
        spec = _HF_PREFIX + spec
    if spec.startswith(_HF_PREFIX):
        repo, _, revision = spec[len(_HF_PREFIX):].partition("@")
        if not is_hub_id(repo):
            raise ConfigError(f"{spec!r}: write a Hub repo as hf:ORG/REPO (or "
                              "hf:ORG/REPO@REVISION), letters, digits, '-', '_' and '.'.")
        return Entry(name=slug(spec), description=f"Hugging Face repo {repo}",
                     source=Source("huggingface", repo=repo, revision=revision or "main",
                                   find_generator=True))
    if is_remote(spec):
        url, _, fragment = spec.partition("#")
        sha256 = fragment[len("sha256="):] if fragment.startswith("sha256=") else None
        if fragment and sha256 is None:
            raise ConfigError(f"{spec!r}: the only URL fragment read is #sha256=<hex>.")
        check_url(url, sha256, "the model URL")
        return Entry(name=slug(spec), description=url,
                     source=Source("auto", url=url, sha256=sha256))
    entries = load()
    if spec in entries:
        return entries[spec]
    close = difflib.get_close_matches(spec, list(entries), n=3, cutoff=0.5)
    hint = (f"did you mean {' or '.join(close)}? " if close else "") + (
        "`electra-presets` lists the models")
    raise ConfigError(f"{spec!r} is neither a local path nor a known model name: {hint}; "
                      "hf:ORG/REPO and https://... archives work too.")
