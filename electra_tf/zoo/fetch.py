"""Bringing a catalog entry's files to this machine, verified; converting them is not done
here (`electra_tf.convert.resolve` does it).

`fetch(entry)` gives the model in its own layout: an official archive unpacked (with its
vocab), a Hugging Face snapshot (and its generator's), a keras-hub preset directory, or an
archive whose layout is found after unpacking. Archives are unpacked under the cache's
`downloads/<name>/`, which the caller removes once the model is converted.
"""

import dataclasses
import importlib.util
import os
import sys
import tarfile
import zipfile
from typing import Optional
from urllib.parse import urlparse

from electra_tf.errors import ConfigError, DownloadError, first_line
from electra_tf.zoo import cache, download
from electra_tf.zoo.catalog import Entry

VOCAB_FILE = "vocab.txt"


@dataclasses.dataclass
class Fetched:
    """A model's files on this machine, in the layout of its source."""

    path: str  # the unpacked archive's root, a Hub snapshot or a keras-hub preset directory
    layout: Optional[str]  # "official", "huggingface", "keras_hub"; None: see the files
    facts: dict  # what was fetched: {"downloads": {url: sha256}} or {"commits": {repo: sha}}
    generator: Optional[str] = None  # "huggingface": the generator's snapshot
    # The generator was found by the ORG/X-discriminator -> ORG/X-generator naming, not
    # named by the catalog: a pair that does not match falls back to the discriminator.
    generator_guessed: bool = False


def fetch(entry: Entry) -> Fetched:
    """Downloads (or finds in the Hub's cache) and verifies `entry`'s files."""
    return _FETCHERS[entry.source.format](entry)


def _fetch_official(entry: Entry) -> Fetched:
    source = entry.source
    root, facts = _fetch_archive(entry.name, source.url, source.sha256)
    if find_vocab(root) is None:
        if not source.vocab_url:
            raise ConfigError(f"{source.url} holds no {VOCAB_FILE} and the catalog names no "
                              "vocab_url: add one to the entry.")
        facts["downloads"][source.vocab_url] = _fetch_checked(
            source.vocab_url, os.path.join(root, VOCAB_FILE))
    return Fetched(root, "official", facts)


def find_vocab(root: str) -> Optional[str]:
    """The shallowest vocab.txt under `root`, or None."""
    for directory, subdirectories, names in os.walk(root):
        subdirectories.sort()
        if VOCAB_FILE in names:
            return os.path.join(directory, VOCAB_FILE)
    return None


def _fetch_hub(entry: Entry) -> Fetched:
    source = entry.source
    discriminator, commit = download.fetch_hub_repo(source.repo, source.revision,
                                                    _model_files(source.repo))
    commits = {source.repo: commit}
    generator_repo = source.generator
    if generator_repo is None and source.find_generator:
        generator_repo = _sibling_generator(source.repo)
    generator = None
    if generator_repo:
        revision = source.revision
        if revision != "main" and not download.hub_repo_exists(generator_repo, revision):
            print(f"warning: {generator_repo} has no revision {revision}; using its main "
                  "(its commit is recorded in the cache entry).", file=sys.stderr)
            revision = "main"
        generator, commits[generator_repo] = download.fetch_hub_repo(
            generator_repo, revision, _model_files(generator_repo))
    return Fetched(discriminator, "huggingface", {"commits": commits}, generator,
                   generator_guessed=generator is not None and source.generator is None)


def _sibling_generator(repo: str) -> Optional[str]:
    """ORG/X-generator for a Hub repo ORG/X-discriminator, when it exists (the naming of
    Google's, KoELECTRA's and HFL's releases)."""
    if not repo.endswith("-discriminator"):
        return None
    candidate = repo[:-len("discriminator")] + "generator"
    if download.hub_repo_exists(candidate):
        print(f"Using {candidate} as the generator of {repo}.", file=sys.stderr)
        return candidate
    return None


def _model_files(repo: str):
    """The files of an HF ELECTRA repo that conversion reads (not the TF/Flax copies)."""
    def select(names: list) -> list:
        wanted = [n for n in ("config.json", "tokenizer_config.json") if n in names]
        vocab = [n for n in (VOCAB_FILE, "tokenizer.json") if n in names][:1]
        if not vocab:
            raise ConfigError(f"Hub repo {repo} ships no vocab (no {VOCAB_FILE} or "
                              "tokenizer.json): download it yourself and convert it with "
                              "electra-convert --from huggingface --vocab VOCAB.")
        if "model.safetensors" in names:
            weights = ["model.safetensors"]
        elif "model.safetensors.index.json" in names:
            weights = [n for n in names if n.startswith("model") and ".safetensors" in n]
        elif "pytorch_model.bin" in names:
            if importlib.util.find_spec("torch") is None:  # refused before downloading
                raise ConfigError(f"Hub repo {repo} has only pytorch_model.bin weights, "
                                  "which need torch to read: pip install torch.")
            weights = ["pytorch_model.bin"]
        else:
            raise ConfigError(f"Hub repo {repo} has no model.safetensors or "
                              "pytorch_model.bin (TF- or Flax-only repos are not read).")
        return wanted + vocab + weights
    return select


def _fetch_keras_hub(entry: Entry) -> Fetched:
    handle = entry.source.handle or ""
    if handle.startswith("hf://"):
        preset, commit = download.fetch_hub_repo(
            handle[len("hf://"):], entry.source.revision,
            lambda names: [n for n in names if not n.startswith(".") and n != "README.md"])
        return Fetched(preset, "keras_hub", {"commits": {handle: commit}})
    if handle.startswith("kaggle://"):
        return Fetched(_kaggle_download(handle), "keras_hub", {})
    raise ConfigError(f"{entry.name}: keras-hub handle {handle!r} must start with hf:// or "
                      "kaggle://.")


def _kaggle_download(handle: str) -> str:
    """A Kaggle model through `kagglehub` (keras-hub's own downloader: it verifies and
    caches the files in its cache)."""
    import kagglehub

    try:
        return kagglehub.model_download(handle[len("kaggle://"):])
    except Exception as e:  # kagglehub raises its own and requests' errors: report all
        raise DownloadError(f"Cannot download {handle} from Kaggle: "
                            f"{first_line(e)}; check the network, or use "
                            "the Hugging Face entry of the same model.") from e


def _fetch_auto(entry: Entry) -> Fetched:
    root, facts = _fetch_archive(entry.name, entry.source.url, entry.source.sha256)
    return Fetched(root, None, facts)


_FETCHERS = {"official": _fetch_official, "huggingface": _fetch_hub,
             "keras_hub": _fetch_keras_hub, "auto": _fetch_auto}


# ----------------------------------------------------------------------------- archives
def _fetch_checked(url: str, destination: str, pinned: Optional[str] = None) -> str:
    """Downloads `url`, checked against the pinned sha256, else the one recorded at its
    first download (recorded now if this is the first); returns its sha256."""
    recorded = cache.recorded_sha256(url)
    expected, origin = ((pinned, "pinned in the catalog") if pinned else
                        (recorded, f"recorded at its first download in {cache.home()}"))
    sha256 = download.fetch_url(url, destination, expected, origin)
    if not pinned and not recorded:
        cache.record_sha256(url, sha256)
    return sha256


def _fetch_archive(name: str, url: str, pinned: Optional[str]) -> tuple:
    """(unpacked root, facts) of the zip or tar archive at `url`."""
    downloads = cache.downloads_dir(name)
    archive = os.path.join(downloads, os.path.basename(urlparse(url).path) or "archive")
    sha256 = _fetch_checked(url, archive, pinned)
    root = os.path.join(downloads, "unpacked")
    _unpack(archive, root, url)
    os.remove(archive)
    # An archive of one top directory (electra_small.zip holds electra_small/...).
    while len(os.listdir(root)) == 1 and os.path.isdir(os.path.join(root,
                                                                    os.listdir(root)[0])):
        root = os.path.join(root, os.listdir(root)[0])
    return root, {"downloads": {url: sha256}}


def _unpack(archive: str, root: str, url: str) -> None:
    """Unpacks the zip or tar `archive` into `root`, after checking every member: model
    archives hold files and directories only, inside `root`, `download.MAX_BYTES` in all.

    Links are refused outright rather than left to `tarfile`'s "data" filter, which the
    Python 3.11.7 these machines run lets a chain of symlinks escape (CVE-2025-4517).
    """
    def refuse(problem: str):
        raise DownloadError(f"{url} {problem}; model archives hold only files and "
                            "directories: nothing was unpacked.")

    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            members = [(m.filename, m.file_size) for m in z.infolist()]
            inside = os.path.realpath(root) + os.sep
            for name, _ in members:
                if not os.path.realpath(os.path.join(root, name)).startswith(inside):
                    refuse(f"holds {name!r}, a path outside the archive")
            _check_size(members, refuse)
            z.extractall(root)  # zip "links" unpack as small files, harmless
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as t:
            members = t.getmembers()
            for member in members:
                if not (member.isfile() or member.isdir()):
                    refuse(f"holds {member.name!r}, a link or device")
            _check_size([(m.name, m.size) for m in members], refuse)
            t.extractall(root, members=members, filter="data")  # also refuses "../" names
    else:
        raise ConfigError(f"{url} is not a zip or tar archive.")


def _check_size(members: list, refuse) -> None:
    if not members:
        refuse("is empty")
    total = sum(size for _, size in members)
    if total > download.MAX_BYTES:
        refuse(f"unpacks to {total:,} bytes, over the limit of {download.MAX_BYTES:,}")
