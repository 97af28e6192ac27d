"""Released models by name, against a local server standing in for their hosts: an official
TF1 zip on "Google Cloud Storage", a Hugging Face repo pair and a keras-hub preset on "the
Hub" (through `huggingface_hub` and $HF_ENDPOINT). Download -> verify -> convert -> cache ->
offline reuse; corrupted, cut, stalled, killed, missing and refused downloads."""

import glob
import hashlib
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tarfile
import time
import types
import zipfile

import numpy as np
import pytest

import convert_fixtures as fx
from conftest import SMALL_CORPUS, jsonl, run_command
from electra_tf.convert import api
from electra_tf.convert.resolve import resolve
from electra_tf.errors import ChecksumError, ConfigError, DownloadError
from electra_tf.models import ElectraEncoder, ElectraPretrainer
from electra_tf.zoo import cache, catalog, download
from electra_tf_cli import presets
from model_server import ModelServer

HUB_DISC, HUB_GEN = "test-org/tiny-electra-discriminator", "test-org/tiny-electra-generator"
KERAS_HUB_REPO = "keras-test/tiny-electra"
ZIP_PATH, VOCAB_PATH = "/electra-data/electra_tiny.zip", "/electra-data/vocab.txt"


def _zip(directory) -> bytes:
    """`directory` zipped under its own name, as the official archives are."""
    buffer = io.BytesIO()
    base = os.path.dirname(directory)
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(glob.glob(os.path.join(directory, "*"))):
            archive.write(path, os.path.relpath(path, base))
    return buffer.getvalue()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The models the server hosts, and our own conversions of them to compare with."""
    import keras_hub

    root = tmp_path_factory.mktemp("sources")
    disc, gen = fx.save_hf(fx.random_hf_models("tiny", seed=3), root / "hub")
    # Official archive: ELECTRA-Small's widths (head counts follow the official rule).
    small = fx.save_hf(fx.random_hf_models("small", seed=4), root / "small")
    api.from_huggingface(small[0], str(root / "ours_official"), small[1])
    tf1 = root / "tf1" / "electra_tiny"
    api.to_official(str(root / "ours_official"), str(tf1 / "model.ckpt-100"))
    vocab = (tf1 / "vocab.txt").read_bytes()
    (tf1 / "vocab.txt").unlink()  # as the official zips: the vocab is a download of its own
    preset = root / "keras_hub"
    fx.random_keras_hub_backbone(seed=5).save_to_preset(str(preset))
    keras_hub.models.ElectraTokenizer(vocabulary=fx.VOCAB).save_to_preset(str(preset))
    return types.SimpleNamespace(root=root, disc=disc, gen=gen, preset=str(preset),
                                 official_zip=_zip(str(tf1)), vocab=vocab,
                                 ours_official=str(root / "ours_official"))


@pytest.fixture(scope="module")
def server(sources):
    server = ModelServer().start()
    server.add_file(ZIP_PATH, sources.official_zip)
    server.add_file(VOCAB_PATH, sources.vocab)
    server.add_repo(HUB_DISC, sources.disc)
    server.add_repo(HUB_GEN, sources.gen)
    server.add_repo(KERAS_HUB_REPO, sources.preset)
    yield server
    server.stop()


def write_catalog(path, server, **extra) -> str:
    entries = {
        "tiny-official": {"description": "official-style zip", "size": "small",
                          "source": {"format": "official", "url": server.url + ZIP_PATH,
                                     "vocab_url": server.url + VOCAB_PATH}},
        "tiny-hub": {"description": "Hub repo pair",
                     "source": {"format": "huggingface", "repo": HUB_DISC,
                                "generator": HUB_GEN}},
        "tiny-keras-hub": {"description": "keras-hub preset",
                           "source": {"format": "keras_hub",
                                      "handle": f"hf://{KERAS_HUB_REPO}"}},
        **extra}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(entries, f)
    return str(path)


@pytest.fixture
def zoo(server, tmp_path, monkeypatch):
    """A fresh cache and Hugging Face cache, the catalog pointing at `server`."""
    monkeypatch.setenv(cache.HOME_ENV, str(tmp_path / "home"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf_cache"))
    monkeypatch.setenv("HF_ENDPOINT", server.url)
    monkeypatch.setenv(catalog.CATALOG_ENV, write_catalog(tmp_path / "catalog.json", server))
    server.corrupt.clear(), server.cut.clear(), server.stall.clear()
    return server


def hub_file(repo, name):
    return f"/{repo}/resolve/{ModelServer.commit(repo)}/{name}"


def assert_nothing_cached(name):
    assert cache.read_entry(name) is None and not os.path.exists(cache.model_dir(name))
    assert not glob.glob(os.path.join(cache.downloads_dir(name), "*"))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_official_archive_is_fetched_verified_converted_cached_then_used_offline(
        zoo, sources, capfd):
    path = resolve("tiny-official")
    assert path == cache.model_dir("tiny-official")
    fx.assert_same_weights(sources.ours_official, path)
    assert "electra_tiny.zip" in capfd.readouterr().err  # the progress bar names the file
    facts = cache.read_entry("tiny-official")
    expected = {zoo.url + ZIP_PATH: hashlib.sha256(sources.official_zip).hexdigest(),
                zoo.url + VOCAB_PATH: hashlib.sha256(sources.vocab).hexdigest()}
    assert facts["downloads"] == expected
    for url, sha256 in expected.items():  # recorded for later downloads of the same URL
        assert cache.recorded_sha256(url) == sha256
    assert not os.listdir(os.path.join(cache.home(), "downloads"))  # archives removed

    served = len(zoo.requests)
    assert resolve("tiny-official") == path
    ids, mask, segments = fx.batch()
    inputs = {"input_word_ids": ids, "input_mask": mask, "input_type_ids": segments}
    encoder = ElectraEncoder.from_pretrained("tiny-official")
    np.testing.assert_allclose(
        encoder(inputs)["sequence_output"].numpy(),
        fx.our_outputs(sources.ours_official, ids, mask, segments)["sequence_output"],
        atol=1e-6)
    assert ElectraPretrainer.from_pretrained("tiny-official").generator is not None
    assert len(zoo.requests) == served  # every later use read the cache alone
    row = [line for line in presets.table(catalog.load()).splitlines()
           if line.startswith("| tiny-official ")]
    assert row and row[0].endswith("| yes |")

    for damaged, message in ((os.path.join(path, cache.ENTRY_FILE), "and run again to fetch"),
                             (os.path.join(cache.home(), cache.CHECKSUMS_FILE),
                              "sums of later downloads are then recorded afresh")):
        with open(damaged, "r+", encoding="utf-8") as f:  # as a full disk leaves them
            f.truncate(len(f.read()) // 2)
        with pytest.raises(ConfigError, match=f"{damaged} is damaged .*{message}"):
            resolve("tiny-official") if damaged.startswith(path) else cache.recorded_sha256(
                zoo.url + ZIP_PATH)


def test_hub_repo_by_spec_finds_its_generator_and_is_reused_offline(zoo, sources, tmp_path):
    path = resolve(f"hf:{HUB_DISC}")
    assert resolve(HUB_DISC) == path  # ORG/NAME alone names the same repo
    api.from_huggingface(sources.disc, str(tmp_path / "expected"), sources.gen)
    fx.assert_same_weights(tmp_path / "expected", path)
    facts = cache.read_entry(os.path.basename(path))
    assert facts["commits"] == {HUB_DISC: zoo.commit(HUB_DISC),
                                HUB_GEN: zoo.commit(HUB_GEN)}
    served = len(zoo.requests)
    assert resolve(f"hf:{HUB_DISC}") == path and len(zoo.requests) == served
    # A keras-hub preset on the Hub: its files, converted like a local preset.
    api.from_keras_hub(sources.preset, str(tmp_path / "expected_keras_hub"))
    fx.assert_same_weights(tmp_path / "expected_keras_hub", resolve("tiny-keras-hub"))


def test_corrupted_downloads_are_refused_and_nothing_is_cached(zoo, sources, tmp_path,
                                                              monkeypatch):
    weights = hub_file(HUB_DISC, "model.safetensors")
    zoo.corrupt.add(weights)
    with pytest.raises(ChecksumError, match="model.safetensors arrived corrupted.*Hub lists"):
        resolve("tiny-hub")
    assert_nothing_cached("tiny-hub")
    zoo.corrupt.clear()  # the damaged file was deleted, not kept in the Hub's cache
    api.from_huggingface(sources.disc, str(tmp_path / "expected"), sources.gen)
    fx.assert_same_weights(tmp_path / "expected", resolve("tiny-hub"))

    zoo.corrupt.add(ZIP_PATH)  # the MD5 the storage host publishes
    with pytest.raises(ChecksumError, match=r"electra_tiny.zip arrived corrupted .*MD5"):
        resolve("tiny-official")
    assert_nothing_cached("tiny-official")
    zoo.corrupt.clear()

    pinned = {"source": {"format": "official", "url": zoo.url + ZIP_PATH,
                         "vocab_url": zoo.url + VOCAB_PATH, "sha256": "0" * 64}}
    monkeypatch.setenv(catalog.CATALOG_ENV, write_catalog(tmp_path / "c.json", zoo,
                                                          **{"tiny-pinned": pinned}))
    with pytest.raises(ChecksumError, match="pinned in the catalog"):
        resolve("tiny-pinned")
    assert_nothing_cached("tiny-pinned")

    # Trust on first use: a source that changes after its first download is refused.
    changed = "/electra-data/changed.zip"
    zoo.add_file(changed, sources.official_zip)
    moved = {"source": {"format": "official", "url": zoo.url + changed,
                        "vocab_url": zoo.url + VOCAB_PATH}}
    monkeypatch.setenv(catalog.CATALOG_ENV, write_catalog(tmp_path / "c.json", zoo,
                                                          **{"tiny-moved": moved}))
    resolve("tiny-moved")
    zoo.add_file(changed, _zip_with_extra(sources.official_zip))
    cache_dir = cache.model_dir("tiny-moved")
    os.rename(cache_dir, cache_dir + ".old")
    with pytest.raises(ChecksumError, match="recorded at its first download"):
        resolve("tiny-moved")
    assert_nothing_cached("tiny-moved")


def _zip_with_extra(data: bytes) -> bytes:
    buffer = io.BytesIO(data)
    with zipfile.ZipFile(buffer, "a") as archive:
        archive.writestr("electra_tiny/NOTICE", "changed")
    return buffer.getvalue()


def test_a_transfer_cut_halfway_is_retried_cleanly(zoo, sources, tmp_path, capfd):
    zoo.cut[ZIP_PATH] = 1
    zoo.cut[hub_file(HUB_DISC, "model.safetensors")] = 1
    fx.assert_same_weights(sources.ours_official, resolve("tiny-official"))
    api.from_huggingface(sources.disc, str(tmp_path / "expected"), sources.gen)
    fx.assert_same_weights(tmp_path / "expected", resolve("tiny-hub"))
    assert capfd.readouterr().err.count("broke off") == 2

    cache.remove_unfinished("tiny-official")
    os.rename(cache.model_dir("tiny-official"), str(tmp_path / "moved"))
    zoo.cut[ZIP_PATH] = download.ATTEMPTS
    with pytest.raises(DownloadError, match=f"broke off {download.ATTEMPTS} times"):
        resolve("tiny-official")
    assert_nothing_cached("tiny-official")


def test_missing_unreachable_and_unusable_sources_are_one_clear_error(zoo, tmp_path,
                                                                     monkeypatch):
    with pytest.raises(ConfigError, match="did you mean tiny-official"):
        resolve("tiny-oficial")
    refused = f"http://127.0.0.1:{closed_port()}/electra_small.zip"
    gone = {"source": {"format": "official", "url": zoo.url + "/electra-data/gone.zip"}}
    unreachable = {"source": {"format": "official", "url": refused}}
    no_vocab = {"source": {"format": "official", "url": zoo.url + ZIP_PATH}}
    without_vocab = fx.save_hf(fx.random_hf_models(), tmp_path / "hf")[0]
    os.remove(os.path.join(without_vocab, "vocab.txt"))
    zoo.add_repo("test-org/no-vocab", without_vocab)
    monkeypatch.setenv(catalog.CATALOG_ENV, write_catalog(
        tmp_path / "c.json", zoo, gone=gone, unreachable=unreachable, no_vocab=no_vocab))
    for spec, error, message in (
            ("gone", DownloadError, r"/electra-data/gone.zip does not exist \(HTTP 404\)"),
            ("hf:test-org/nothing-here", DownloadError,
             r"/test-org/nothing-here does not exist \(HTTP 404\)"),
            ("test-org/nothing-here", DownloadError,  # a bare ORG/NAME, as transformers'
             r"'test-org/nothing-here' is no local path, and as a Hugging Face repo: .*"
             r"/test-org/nothing-here does not exist \(HTTP 404\)"),
            ("unreachable", DownloadError, f"Cannot download {refused}: connection refused"),
            ("no_vocab", ConfigError, "holds no vocab.txt and the catalog names no vocab_url"),
            ("hf:test-org/no-vocab", ConfigError, "ships no vocab")):
        with pytest.raises(error, match=message):
            resolve(spec)
        assert_nothing_cached(catalog.lookup(spec).name)
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    huggingface_hub.constants.HF_HUB_OFFLINE = True  # read once, when it was imported
    huggingface_hub.utils.reset_sessions()
    try:
        with pytest.raises(DownloadError, match=r"offline mode is on \(\$HF_HUB_OFFLINE\)"):
            resolve("tiny-hub")
    finally:
        huggingface_hub.constants.HF_HUB_OFFLINE = False
        huggingface_hub.utils.reset_sessions()
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port()}")
    with pytest.raises(DownloadError, match=f"Cannot download http://127.0.0.1:.*/{HUB_DISC}: "
                                            "connection refused"):
        resolve("tiny-hub")
    with pytest.raises(ConfigError, match="does not exist: give a local model"):
        resolve("./no/such/model")
    # A directory holding a model's two towers names them.
    towers = re.escape(repr(str(tmp_path / "hf")))
    with pytest.raises(ConfigError, match=f"^{towers} is not a model but holds 2: give one of "
                                          f"{re.escape(repr(without_vocab))}, '.*gen'.$"):
        resolve(str(tmp_path / "hf"))


def test_a_killed_download_or_conversion_never_leaves_an_entry_that_looks_complete(zoo):
    zoo.stall.add(ZIP_PATH)
    process = subprocess.Popen([sys.executable, "-c", "from electra_tf.convert.resolve import "
                                "resolve; resolve('tiny-official')"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = os.path.join(cache.downloads_dir("tiny-official"), "electra_tiny.zip.part-*")
    deadline = time.time() + 120
    while not any(os.path.getsize(path) for path in glob.glob(partial)):
        assert time.time() < deadline and process.poll() is None, "the download never began"
        time.sleep(0.2)
    process.kill()
    process.wait()
    assert cache.cached("tiny-official") is None
    assert not os.path.exists(cache.model_dir("tiny-official"))
    zoo.stall.clear()

    killed_while_converting = (
        "import os, signal\n"
        "from electra_tf.convert import api, resolve\n"
        "convert = api.from_official\n"
        "def killed(*args, **kwargs):\n"
        "    convert(*args, **kwargs)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "api.from_official = killed\n"
        "resolve.resolve('tiny-official')\n")
    result = subprocess.run([sys.executable, "-c", killed_while_converting],
                            capture_output=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert glob.glob(cache.model_dir("tiny-official") + ".partial-*")  # half done...
    assert cache.cached("tiny-official") is None  # ...and never taken for a model
    assert not os.path.exists(cache.model_dir("tiny-official"))
    assert resolve("tiny-official") == cache.model_dir("tiny-official")
    assert cache.cached("tiny-official")
    assert not glob.glob(cache.model_dir("tiny-official") + ".partial-*")  # cleared


def test_commands_take_a_model_name_and_work_offline_once_cached(zoo, tmp_path):
    resolve("tiny-hub")
    served = len(zoo.requests)
    rows = [{"text": line, "label": str(i % 2)} for i, line in
            enumerate(open(SMALL_CORPUS.split(",")[0], encoding="utf-8").read().split()[:48])]
    data = jsonl(tmp_path / "train.jsonl", rows)
    run_command("electra-finetune", "--init_checkpoint", "tiny-hub", "--task",
                "text_classification", "--train_file", data, "--eval_file", data,
                "--model_dir", tmp_path / "finetuned", "--max_seq_length", "8",
                "--batch_size", "16", "--epochs", "1")
    encoder_config = json.load(open(tmp_path / "finetuned" / "encoder_config.json"))
    assert encoder_config["hidden_size"] == 32 and encoder_config["vocab_size"] == len(fx.VOCAB)
    run_command("electra-export-encoder", "--checkpoint", "tiny-hub", "--output",
                tmp_path / "export", "--seq_length", "16")
    assert os.path.isfile(tmp_path / "export" / "encoder" / "saved_model.pb")
    listed = run_command("electra-presets").stdout
    assert [line for line in listed.splitlines() if line.startswith("| tiny-hub ")][0].endswith(
        "| yes |")
    assert len(zoo.requests) == served


def _tar(members: list) -> bytes:
    """A gzipped tar of `members`: (TarInfo, bytes or None)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for info, data in members:
            info.size = len(data or b"")
            archive.addfile(info, io.BytesIO(data) if data else None)
    return buffer.getvalue()


def _member(name: str, kind=tarfile.REGTYPE, target: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def _zip_of(names: list) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name in names:
            archive.writestr(name, b"x")
    return buffer.getvalue()


def test_hostile_archives_and_urls_are_refused_before_anything_is_unpacked(
        zoo, tmp_path, monkeypatch):
    config = (_member("model/config.json"), b"{}")
    archives = {
        "/symlink.tar.gz": (_tar([config, (_member("model/x", tarfile.SYMTYPE,
                                                   str(tmp_path / "escaped")), None)]),
                            "'model/x', a link or device"),
        "/hardlink.tar.gz": (_tar([config, (_member("model/y", tarfile.LNKTYPE,
                                                    "model/config.json"), None)]),
                             "'model/y', a link or device"),
        "/device.tar.gz": (_tar([(_member("model/z", tarfile.CHRTYPE), None)]),
                           "a link or device"),
        "/climbing.zip": (_zip_of(["model/config.json", "../../escaped.txt"]),
                          "'../../escaped.txt', a path outside the archive"),
        "/empty.zip": (_zip_of([]), "is empty"),
        "/bomb.tar.gz": (_tar([config, (_member("model/zeros"), bytes(200_000))]),
                         "unpacks to 200,002 bytes, over the limit of 100,000"),
    }
    monkeypatch.setattr(download, "MAX_BYTES", 100_000)  # the bomb is 400 bytes packed
    zoo.redirects["/to-file.zip"] = "file:///etc/passwd"
    for path, (data, message) in archives.items():
        url = zoo.add_file(path, data)
        with pytest.raises(DownloadError, match=message):
            resolve(url)
        assert_nothing_cached(catalog.lookup(url).name)
    with pytest.raises(DownloadError, match=r"is [\d,]+ bytes or more, over the limit of 100,000"):
        resolve("tiny-official")  # its Content-Length alone is over the limit
    with pytest.raises(DownloadError, match="to-file.zip: InvalidSchema"):
        resolve(zoo.url + "/to-file.zip")
    assert not glob.glob(str(tmp_path / "**" / "escaped*"), recursive=True)
    pinned = "a" * 64
    for spec, message in (
            ("http://mirror.example/electra.zip", "plain http, which anyone on the way"),
            ("https://", "is not an archive URL"),
            ("https://mirror.example/a.zip#md5=1", "the only URL fragment read"),
            ("hf:../x", "write a Hub repo as hf:ORG/REPO")):
        with pytest.raises(ConfigError, match=message):
            resolve(spec)
    pinned_http = catalog.lookup(f"http://mirror.example/electra.zip#sha256={pinned}")
    assert (pinned_http.source.url, pinned_http.source.sha256) == (
        "http://mirror.example/electra.zip", pinned)
    monkeypatch.setenv(catalog.CATALOG_ENV, write_catalog(
        tmp_path / "c.json", zoo, plain={"source": {
            "format": "official", "url": "http://mirror.example/electra_small.zip"}}))
    with pytest.raises(ConfigError, match="c.json: plain: 'http://mirror.example/electra_small"
                                          ".zip' is plain http"):
        resolve("tiny-official")


def test_processes_fetching_one_model_at_once_take_turns(zoo, capfd):
    import concurrent.futures

    downloads = zoo.requests.count(("GET", ZIP_PATH))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # a lock file per entry: flock
        paths = list(pool.map(lambda _: resolve("tiny-official"), range(4)))  # fds collide
    assert paths == [cache.model_dir("tiny-official")] * 4
    assert zoo.requests.count(("GET", ZIP_PATH)) == downloads + 1  # the others found it
    assert "Waiting for another process working on tiny-official" in capfd.readouterr().err
    assert cache.cached("tiny-official")
    assert sorted(os.listdir(os.path.join(cache.home(), "models"))) == ["tiny-official"]


def test_a_hub_generator_is_fetched_at_the_discriminators_revision(monkeypatch, capsys):
    from electra_tf.zoo import fetch

    fetched = []

    def fetch_hub_repo(repo, revision, select):
        fetched.append((repo, revision))
        return f"/snapshots/{repo}", f"commit-of-{repo}@{revision}"

    monkeypatch.setattr(download, "fetch_hub_repo", fetch_hub_repo)
    entry = catalog.lookup("hf:org/x-discriminator@v1")
    for generator_has_v1, revision in ((True, "v1"), (False, "main")):
        monkeypatch.setattr(download, "hub_repo_exists",
                            lambda repo, rev="main": generator_has_v1 or rev == "main")
        fetched.clear()
        facts = fetch.fetch(entry).facts
        assert fetched == [("org/x-discriminator", "v1"), ("org/x-generator", revision)]
        assert facts["commits"]["org/x-generator"] == f"commit-of-org/x-generator@{revision}"
    assert "org/x-generator has no revision v1; using its main" in capsys.readouterr().err
