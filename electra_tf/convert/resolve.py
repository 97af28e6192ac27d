"""Any model source to a local run directory: catalog names, Hub repos, archive URLs, paths.

`resolve` is what every command calls on the model it is given (the library's runs and
exports take the local run directory it returns; `from_pretrained` restores
models from it). Downloading and verifying is `electra_tf.zoo`'s part; converting into the
cache, this module's.
"""

import dataclasses
import glob
import os
import shutil
import sys
from typing import Optional

from electra_tf.convert import api
from electra_tf.errors import ConfigError, DownloadError
from electra_tf.zoo import cache, catalog, fetch

_NOT_A_MODEL = ("an official TF1 checkpoint, a Hugging Face ELECTRA directory, a keras-hub "
                "ElectraBackbone preset or an electra_tf run directory")


def resolve(spec: str) -> str:
    """A local run directory (or a checkpoint inside one) for `spec`.

    `spec` is a run directory or checkpoint of ours (returned as is); another local model
    (Hugging Face directory, official TF1 checkpoint or its directory, keras-hub preset),
    converted once into the cache; a catalog name, `hf:ORG/REPO[@REVISION]` or an
    `https://` archive, downloaded, verified and converted on first use and read from the
    cache afterwards (offline). A bare `ORG/NAME[@REVISION]` that is no local path is a Hub
    repo, as in `transformers`.
    """
    spec = os.path.expanduser(spec)
    layout = api.detect_format(spec)
    if layout == "run":
        return spec
    if layout is not None:
        return _convert_local(spec, layout)
    if os.path.exists(spec):
        inside = _models_inside(spec)
        if inside:  # e.g. a released model's two towers, side by side
            raise ConfigError(f"{spec!r} is not a model but holds {len(inside)}: give one "
                              f"of {', '.join(map(repr, inside))}.")
        raise ConfigError(f"{spec!r} is not a model: give {_NOT_A_MODEL}, or a model name "
                          "(`electra-presets` lists them).")
    if catalog.is_hub_id(spec.partition("@")[0]):  # ORG/NAME[@REV], as transformers takes it
        try:
            return _cached_or_fetched(catalog.lookup(spec))
        except DownloadError as e:
            raise DownloadError(f"{spec!r} is no local path, and as a Hugging Face repo: "
                                f"{e}") from e
    if not catalog.is_remote(spec) and (os.sep in spec or spec.startswith(".")):
        raise ConfigError(f"{spec!r} does not exist: give a local model, or a model name "
                          "(`electra-presets` lists them).")
    return _cached_or_fetched(catalog.lookup(spec))


def _models_inside(directory: str) -> list:
    """The models one level inside `directory`, sorted."""
    if not os.path.isdir(directory):
        return []
    paths = sorted(os.path.join(directory, name) for name in os.listdir(directory))
    return [path for path in paths if os.path.isdir(path) and api.detect_format(path)]


# ----------------------------------------------------------------------------- the cache
def _cached_or_fetched(entry: catalog.Entry) -> str:
    directory = cache.cached(entry.name)
    if directory:
        return directory
    with cache.locked(entry.name):
        directory = cache.cached(entry.name)  # fetched by another process while we waited
        if directory:
            return directory
        print(f"Fetching {entry.name} ({entry.description}) into "
              f"{cache.model_dir(entry.name)}", file=sys.stderr)
        facts = {"name": entry.name, "source": dataclasses.asdict(entry.source)}
        cache.remove_unfinished(entry.name)
        try:
            with cache.new_entry(entry.name, facts) as output:
                fetched = fetch.fetch(entry)
                facts.update(fetched.facts)
                _convert_fetched(fetched, output, entry.source.lower_case)
        finally:
            cache.remove_unfinished(entry.name)
    return cache.model_dir(entry.name)


def _convert_fetched(fetched: fetch.Fetched, output: str, lower_case: Optional[bool]):
    layout = fetched.layout or api.detect_format(fetched.path)
    if layout is None:
        raise ConfigError(f"{fetched.path} holds no model this tool reads; give "
                          f"{_NOT_A_MODEL}.")
    try:
        _convert(layout, fetched.path, output, lower_case, fetched.generator)
    except ConfigError as e:
        if not fetched.generator_guessed:
            raise
        print(f"warning: {fetched.generator} does not pair with {fetched.path} ({e}); "
              "converting the discriminator alone.", file=sys.stderr)
        shutil.rmtree(output)
        os.makedirs(output)
        _convert(layout, fetched.path, output, lower_case)


def _convert_local(path: str, layout: str) -> str:
    """A local model of another format, converted once; converted again when its files
    change."""
    path = os.path.abspath(path)
    name = "local-" + catalog.slug(path)
    fingerprint = _fingerprint(path)
    facts = cache.read_entry(name)
    if facts is not None and facts.get("fingerprint") == fingerprint:
        return cache.cached(name)
    with cache.locked(name):
        facts = cache.read_entry(name)  # converted by another process while we waited
        if facts is not None and facts.get("fingerprint") == fingerprint:
            return cache.cached(name)
        print(f"Converting {path} ({layout}) into {cache.model_dir(name)}", file=sys.stderr)
        cache.remove_entry(name)  # converted from files that have changed since
        cache.remove_unfinished(name)
        with cache.new_entry(name, {"name": name, "source": {"format": layout, "path": path},
                                    "fingerprint": fingerprint}) as output:
            _convert(layout, path, output)
    return cache.model_dir(name)


def _fingerprint(path: str) -> dict:
    """{file: [size, mtime]} of a local model: tells when it changed."""
    if os.path.isdir(path):
        paths = [os.path.join(root, name) for root, _, names in os.walk(path)
                 for name in names]
    else:  # a `.keras` file, or a TF1 checkpoint prefix and its files
        paths = glob.glob(glob.escape(path) + "*")
    return {p: [os.path.getsize(p), int(os.path.getmtime(p))] for p in sorted(paths)
            if os.path.isfile(p)}


# ----------------------------------------------------------------------------- conversion
def _convert(layout: str, path: str, output: str, lower_case: Optional[bool] = None,
             generator: Optional[str] = None) -> None:
    """Converts the local model `path` of `layout` into the run directory `output`."""
    if layout == "run":
        shutil.copytree(path, output, dirs_exist_ok=True)
    elif layout == "huggingface":
        beside = os.path.join(path, "generator")  # `electra-convert --to huggingface` layout
        if generator is None and api.detect_format(beside) == "huggingface":
            generator = beside
        api.from_huggingface(path, output, generator, lower_case=lower_case)
    elif layout == "official":
        prefix = path if os.path.isfile(path + ".index") else _official_prefix(path)
        root = path if os.path.isdir(path) else os.path.dirname(prefix)
        vocab = _vocab_beside(prefix) or fetch.find_vocab(root)
        if vocab is None:
            raise ConfigError(f"No vocab.txt beside {prefix}: convert it with "
                              "electra-convert --from official --vocab VOCAB.")
        api.from_official(prefix, output, vocab, lower_case=lower_case)
    elif layout == "keras_hub":
        api.from_keras_hub(path, output, lower_case=lower_case)
    else:
        raise AssertionError(layout)


def _official_prefix(root: str) -> str:
    """The TF1 checkpoint prefix in `root` or the first directory under it holding one."""
    for directory, subdirectories, _ in os.walk(root):
        subdirectories.sort()
        prefix = api.official_checkpoint(directory)
        if prefix:
            return prefix
    raise ConfigError(f"{root} holds no TF1 checkpoint (no *.index file).")


def _vocab_beside(prefix: str) -> Optional[str]:
    path = os.path.join(os.path.dirname(prefix), fetch.VOCAB_FILE)
    return path if os.path.isfile(path) else None
