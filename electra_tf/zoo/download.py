"""Fetching model files, verified: archives over HTTP(S), Hub repos through `huggingface_hub`.

Every file is checked before anything is built from it: an archive against the sha256
pinned in the catalog, else the one recorded at its first download, and against the MD5
that Google Cloud Storage publishes in `x-goog-hash`; a Hub file against the hash the Hub
lists for it (the sha256 of an LFS file, the git blob sha1 of a small one). A transfer
that breaks off is retried from the start; a mismatch deletes the file.
"""

import base64
import hashlib
import os
import sys
from typing import Callable, Optional

import requests
from tqdm.auto import tqdm

from electra_tf import files
from electra_tf.errors import ChecksumError, DownloadError, first_line

ATTEMPTS = 3
# No model archive comes near this (ELECTRA-Large's is 1.3 GB); it stops a hostile or broken
# source from filling the disk, downloaded or unpacked (`fetch`).
MAX_BYTES = 16 << 30
_CHUNK = 1 << 20
_OFFLINE_HINT = ("check the network (or proxy), or use a model that is already cached or a "
                 "local path")


class _BrokenOff(Exception):
    """A transfer that ended before all its bytes arrived."""


def _connection_error(url: str, error: Exception) -> DownloadError:
    reason = "connection refused" if "refused" in str(error).lower() else (
        "no network or unknown host" if "resolution" in str(error).lower()
        or "name or service" in str(error).lower() else type(error).__name__)
    return DownloadError(f"Cannot download {url}: {reason}; {_OFFLINE_HINT}.")


def _http_error(url: str, status: int, reason: str) -> DownloadError:
    if status == 404:
        return DownloadError(f"{url} does not exist (HTTP 404): the catalog entry or URL is "
                             "out of date; use another source or a local copy.")
    if status in (401, 403):
        return DownloadError(f"{url}: access denied (HTTP {status}); a private or gated Hub "
                             "repo needs a token in $HF_TOKEN.")
    return DownloadError(f"{url}: HTTP {status} {reason}; try again later.")


def _too_large(url: str, size: int) -> str:
    return (f"{url} is {size:,} bytes or more, over the limit of {MAX_BYTES:,}: no ELECTRA "
            "model is that large; check the URL (nothing was kept).")


def _google_md5(headers) -> Optional[str]:
    """The MD5 (hex) Google Cloud Storage publishes for an object, if the host is GCS."""
    for part in headers.get("x-goog-hash", "").split(","):
        kind, _, value = part.strip().partition("=")
        if kind == "md5" and value:
            return base64.b64decode(value).hex()
    return None


def _fetch_once(url: str, partial: str, name: str) -> dict:
    """Downloads `url` to `partial`; returns its sums and the host's MD5."""
    try:
        response = requests.get(url, stream=True, timeout=(15, 120),
                                headers={"Accept-Encoding": "identity"})
    except requests.ConnectionError as e:
        raise _connection_error(url, e) from e
    except requests.Timeout as e:
        raise DownloadError(f"Cannot download {url}: the host did not answer; "
                            f"{_OFFLINE_HINT}.") from e
    except requests.RequestException as e:  # a bad URL, a redirect to file:// or a loop
        raise DownloadError(f"Cannot download {url}: {type(e).__name__}: "
                            f"{first_line(e)}; give an https:// URL of "
                            "the archive itself.") from e
    with response:
        if response.status_code >= 400:
            raise _http_error(url, response.status_code, response.reason)
        total = int(response.headers.get("Content-Length") or 0) or None
        if (total or 0) > MAX_BYTES:
            raise DownloadError(_too_large(url, total))
        sha256, md5, received = hashlib.sha256(), hashlib.md5(), 0
        try:
            with open(partial, "wb") as f, tqdm(total=total, unit="B", unit_scale=True,
                                                 desc=name,
                                                 file=sys.stderr) as bar:
                for chunk in response.iter_content(_CHUNK):
                    f.write(chunk)
                    sha256.update(chunk)
                    md5.update(chunk)
                    received += len(chunk)
                    bar.update(len(chunk))
                    if received > MAX_BYTES:
                        raise DownloadError(_too_large(url, received))
        except (requests.ConnectionError, requests.Timeout,
                requests.exceptions.ChunkedEncodingError) as e:
            raise _BrokenOff(f"{received} of {total or '?'} bytes") from e
        if total is not None and received != total:
            raise _BrokenOff(f"{received} of {total} bytes")
        published_md5 = _google_md5(response.headers)
    return {"sha256": sha256.hexdigest(), "md5": md5.hexdigest(),
            "published_md5": published_md5}


def fetch_url(url: str, destination: str, expected_sha256: Optional[str] = None,
              expected_from: str = "") -> str:
    """Downloads `url` to `destination` with a progress bar; returns the file's sha256.

    Raises DownloadError naming the URL (HTTP error, refused connection, a transfer broken
    off `ATTEMPTS` times) and ChecksumError when the file does not match `expected_sha256`
    (whose origin `expected_from` names) or the host's published MD5; a failed download
    leaves no file at `destination`.
    """
    os.makedirs(os.path.dirname(destination), exist_ok=True)
    partial = files.unique_name(destination, ".part")
    try:
        sha256 = _fetch_verified(url, partial, os.path.basename(destination),
                                 expected_sha256, expected_from)
        os.replace(partial, destination)
    finally:
        if os.path.exists(partial):
            os.remove(partial)
    return sha256


def _fetch_verified(url: str, partial: str, name: str, expected_sha256: Optional[str],
                    expected_from: str) -> str:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            got = _fetch_once(url, partial, name)
            break
        except _BrokenOff as e:
            if attempt == ATTEMPTS:
                raise DownloadError(f"The download of {url} broke off {ATTEMPTS} times (last "
                                    f"at {e}); {_OFFLINE_HINT}.") from e
            print(f"warning: the download of {url} broke off at {e}; starting it again "
                  f"({attempt}/{ATTEMPTS - 1}).", file=sys.stderr)
    mismatch = None
    if got["published_md5"] and got["published_md5"] != got["md5"]:
        mismatch = f"MD5 {got['md5']}, the host publishes {got['published_md5']}"
    elif expected_sha256 and expected_sha256 != got["sha256"]:
        mismatch = f"sha256 {got['sha256']}, expected {expected_sha256} ({expected_from})"
    if mismatch:
        raise ChecksumError(f"{url} arrived corrupted or has changed ({mismatch}); nothing "
                            "was cached. Run again; if it persists, the source has changed: "
                            "check it and update the catalog's sha256.")
    return got["sha256"]


# ----------------------------------------------------------------------------- Hugging Face
def _hub():
    """(HfApi, endpoint, hub errors module): the endpoint read at call time, so
    `$HF_ENDPOINT` set after `huggingface_hub` was imported (a mirror, a test) counts."""
    from huggingface_hub import HfApi, errors

    endpoint = (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
    return HfApi(endpoint=endpoint), endpoint, errors


def _hub_call(call, what: str, url: str):
    """`call()`, with the Hub's errors turned into one-line DownloadErrors naming `url`."""
    _, _, errors = _hub()
    try:
        return call()
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError,
            errors.EntryNotFoundError) as e:
        raise DownloadError(f"{url} does not exist (HTTP 404): no {what} there; check the "
                            "name (a private or gated repo needs $HF_TOKEN).") from e
    except errors.LocalEntryNotFoundError as e:
        raise DownloadError(f"Cannot download {url}: offline and not in the Hugging Face "
                            f"cache; {_OFFLINE_HINT}.") from e
    except errors.OfflineModeIsEnabled as e:
        raise DownloadError(f"Cannot download {url}: Hugging Face's offline mode is on "
                            "($HF_HUB_OFFLINE) and the model is not in the electra_tf cache; "
                            "unset it, or use a cached model or a local path.") from e
    except errors.HfHubHTTPError as e:
        status = e.response.status_code if e.response is not None else 0
        raise _http_error(url, status, first_line(e)) from e
    except requests.ConnectionError as e:
        raise _connection_error(url, e) from e
    except requests.Timeout as e:
        raise DownloadError(f"Cannot download {url}: the Hub did not answer; "
                            f"{_OFFLINE_HINT}.") from e


def hub_repo_exists(repo: str, revision: str = "main") -> bool:
    api, _, errors = _hub()
    try:
        api.model_info(repo, revision=revision)
        return True
    except (errors.RepositoryNotFoundError, errors.RevisionNotFoundError):
        return False


def _git_blob_sha1(path: str) -> str:
    digest = hashlib.sha1(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(_CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify_hub_file(path: str, sibling, url: str) -> None:
    """Checks a downloaded Hub file against the hash the Hub lists; deletes it on mismatch."""
    from electra_tf.zoo.cache import sha256_of

    if sibling.lfs is not None:
        kind, expected, actual = "sha256", sibling.lfs.sha256, sha256_of(path)
    else:
        kind, expected, actual = "git blob sha1", sibling.blob_id, _git_blob_sha1(path)
    if expected and actual != expected:
        blob = os.path.realpath(path)
        for stale in {path, blob}:
            if os.path.lexists(stale):
                os.remove(stale)
        raise ChecksumError(f"{url} arrived corrupted ({kind} {actual}, the Hub lists "
                            f"{expected}); it was deleted and nothing was cached. Run again.")


def fetch_hub_repo(repo: str, revision: str,
                   select: Callable[[list], list]) -> tuple:
    """Downloads the files `select(all file names)` picks from Hub repo `repo` at
    `revision` into the Hugging Face cache, each verified. Returns (local snapshot
    directory, commit hash)."""
    api, endpoint, _ = _hub()
    repo_url = f"{endpoint}/{repo}"
    info = _hub_call(lambda: api.model_info(repo, revision=revision, files_metadata=True),
                     "model repo", repo_url)
    siblings = {s.rfilename: s for s in info.siblings or []}
    snapshot = None
    for name in select(sorted(siblings)):
        url = f"{endpoint}/{repo}/resolve/{info.sha}/{name}"
        path = _download_hub_file(repo, name, info.sha, endpoint, url)
        _verify_hub_file(path, siblings[name], url)
        snapshot = path[:-len(name)].rstrip(os.sep)
    return snapshot, info.sha


def _download_hub_file(repo: str, name: str, commit: str, endpoint: str, url: str) -> str:
    """`hf_hub_download`, called again when the transfer breaks off (it resumes the
    partial file it keeps)."""
    from huggingface_hub import hf_hub_download

    def download():
        return hf_hub_download(repo, name, revision=commit, endpoint=endpoint,
                               cache_dir=os.environ.get("HF_HUB_CACHE"))

    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _hub_call(download, "file", url)
        except requests.exceptions.ChunkedEncodingError as e:
            broken = e
        except OSError as e:  # huggingface_hub's check of the received size
            if "Consistency check failed" not in str(e):
                raise
            broken = e
        if attempt == ATTEMPTS:
            raise DownloadError(f"The download of {url} broke off {ATTEMPTS} times; "
                                f"{_OFFLINE_HINT}.") from broken
        print(f"warning: the download of {url} broke off; trying again "
              f"({attempt}/{ATTEMPTS - 1}).", file=sys.stderr)
