"""Raw text -> packed pretraining examples -> TFRecord shards (`electra-build-data`).

Streaming and bounded in memory: lines are read, sentence-split and tokenized in small
batches; each worker process owns a disjoint set of input files and of output shards
(shard i belongs to worker i % num_processes) and writes each example to its next shard in
turn, as the official builder does. Shards are written to a temporary name and renamed when
complete, so a crash never leaves a truncated shard under a final name. A rebuild into the
same directory replaces only the files earlier builds wrote (`earlier_build_files`). Output
is deterministic for a given corpus, vocab, seed and number of processes.
"""

import dataclasses
import hashlib
import json
import multiprocessing
import os
import queue
import random
import sys
import threading
import time

from electra_tf.files import read_json, write_json
from electra_tf.errors import ConfigError, CorpusError
from electra_tf.text import corpus, vocab as vocab_lib
from electra_tf.text.sentences import split_sentences

MANIFEST = "manifest.json"
# Written before a build's first shard and removed after its manifest: names the shards of a
# build under way, so that a rerun after a kill knows them for its own.
BUILDING = "building.json"
SHARD_PREFIX = "pretrain_data.tfrecord"
SHARD_PATTERN = SHARD_PREFIX + "-{:05d}-of-{:05d}"
SHARD_GLOB = SHARD_PREFIX + "-*"  # every shard of a build (`--data`)
_TEMPORARY = ".tmp-"  # a shard is written as <its name>.tmp-<pid>, then renamed
_SENTENCES_PER_BATCH = 256
_END_OF_FILE = object()  # follows the last sentence of each file in the token stream


@dataclasses.dataclass(frozen=True)
class BuildOptions:
    """Everything that determines the examples written (recorded in the manifest)."""

    vocab_path: str
    max_seq_length: int = 128
    lower_case: bool = True
    strip_accents: bool = True
    split_sentences: bool = True
    seed: int = 12345


def file_sha256(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def _tokenized_stream(paths, options: BuildOptions, vocab_tokens: list,
                      stats: corpus.DecodeStats, open_binary=None):
    """Yields token ids per sentence, None at each document end and _END_OF_FILE after
    each file."""
    from electra_tf.text.tokenizer import ElectraTokenizer, tokenize_to_lists

    tokenizer = ElectraTokenizer(vocab_tokens, options.lower_case, options.strip_accents)
    pending = []  # sentences (str) or None (document end), in corpus order

    def flush():
        texts = [s for s in pending if s is not None]
        ids = iter(tokenize_to_lists(tokenizer, texts))
        for item in pending:
            yield None if item is None else next(ids)
        pending.clear()

    for path in paths:
        for line in corpus.read_lines(path, stats, open_binary):
            if not line.strip():
                pending.append(None)
            elif options.split_sentences:
                pending.extend(split_sentences(line))
            else:
                pending.append(line.strip())
            if len(pending) >= _SENTENCES_PER_BATCH:
                yield from flush()
        pending.append(None)  # a file end is a document end
        yield from flush()
        yield _END_OF_FILE


def packed_examples(paths, options: BuildOptions, vocab_tokens: list, rng_key: int,
                    stats: corpus.DecodeStats, open_binary=None):
    """Packs the sentences of `paths`, in order, with one builder and one RNG.

    The RNG is seeded by `options.seed` and `rng_key` (the worker's index), so a file
    set packed under the same key gives the same examples in any process or runner.
    Yields each PackedExample and, after each file, None.
    """
    from electra_tf.data.packing import ExampleBuilder

    ids = vocab_lib.special_token_ids(vocab_tokens)
    rng = random.Random(options.seed * 1_000_003 + rng_key)
    builder = ExampleBuilder(options.max_seq_length, ids["cls_token_id"],
                             ids["sep_token_id"], ids["pad_token_id"], rng)
    for item in _tokenized_stream(paths, options, vocab_tokens, stats, open_binary):
        if item is _END_OF_FILE:
            yield None
            continue
        example = builder.end_document() if item is None else builder.add_sentence(item)
        if example is not None:
            yield example


_REUSED = threading.local()  # serialize_example's message, one per thread (Beam's workers)


def serialize_example(example) -> bytes:
    """`example` as a `tf.train.Example` record (the official builder's features).

    One message per thread is reused, its three lists refilled: a message built anew per
    example took 3x as long (35 against 12 us; a quarter of a worker's time). Deterministic:
    the features in their names' order, where protobuf's own order of a map's entries
    changes between processes (the same examples, other bytes)."""
    message = getattr(_REUSED, "message", None)
    if message is None:
        import tensorflow as tf

        message = _REUSED.message = tf.train.Example()
    features = message.features.feature
    for name in ("input_ids", "input_mask", "segment_ids"):
        features[name].int64_list.value[:] = getattr(example, name)
    return message.SerializeToString(deterministic=True)


def _run_worker(worker, num_workers, files, output_dir, num_shards, options, progress):
    """Packs `files[worker::num_workers]` into shards `worker::num_workers`."""
    import tensorflow as tf

    shard_indices = list(range(worker, num_shards, num_workers))
    finals = [os.path.join(output_dir, SHARD_PATTERN.format(i, num_shards))
              for i in shard_indices]
    temps = [f"{path}{_TEMPORARY}{os.getpid()}" for path in finals]
    writers = [tf.io.TFRecordWriter(path) for path in temps]
    stats = corpus.DecodeStats()
    written = real_tokens = bytes_reported = 0

    def report(examples):
        nonlocal bytes_reported
        progress.put((stats.bytes_read - bytes_reported, examples))
        bytes_reported = stats.bytes_read

    try:
        for example in packed_examples(files[worker::num_workers], options,
                                       vocab_lib.load_vocab(options.vocab_path),
                                       worker, stats):
            if example is None:  # end of file
                report(0)
                continue
            writers[written % len(writers)].write(serialize_example(example))
            written += 1
            real_tokens += sum(example.input_mask)
            if written % 1000 == 0:
                report(1000)
    finally:
        for writer in writers:
            writer.close()
    for temp, final in zip(temps, finals):
        os.replace(temp, final)
    report(written % 1000)
    return {"examples": written, "tokens": real_tokens, "bad_lines": stats.bad_lines,
            "files_with_bad_bytes": sorted(stats.files_with_bad_bytes)}


def _worker_entry(args, results):
    try:
        results.put(("ok", args[0], _run_worker(*args)))
    except Exception as e:  # reported by the parent with the worker's index
        results.put(("error", args[0], f"{type(e).__name__}: {e}"))


def build_pretraining_data(corpus_pattern, output_dir, options: BuildOptions,
                           num_shards: int = 1, num_processes: int = 1,
                           show_progress: bool = True) -> dict:
    """Builds the shards and `manifest.json` in `output_dir`; returns the manifest."""
    from tqdm import tqdm

    files = corpus.expand_corpus(corpus_pattern)
    vocab_lib.load_vocab(options.vocab_path)  # fail early on a bad vocab
    if num_shards < 1:
        raise CorpusError(f"--num_shards={num_shards} must be at least 1.")
    if len(files) < min(num_processes, num_shards):
        print(f"note: {len(files)} corpus file(s), so {len(files)} of the {num_processes} "
              "processes asked: each file is packed by one process; split the corpus into "
              "more files to pack it in parallel.", file=sys.stderr)
    num_processes = max(1, min(num_processes, num_shards, len(files)))
    os.makedirs(output_dir, exist_ok=True)
    for name in earlier_build_files(output_dir, os.listdir(output_dir)):
        os.remove(os.path.join(output_dir, name))
    write_json(os.path.join(output_dir, BUILDING), {"num_shards": num_shards})

    start = time.time()
    total_bytes = sum(os.path.getsize(f) for f in files)
    bar = tqdm(total=total_bytes, unit="B", unit_scale=True, desc="Packing examples",
               disable=not show_progress, file=sys.stderr, mininterval=1.0)
    examples_seen = 0

    def on_progress(item):
        nonlocal examples_seen
        bar.update(item[0])
        examples_seen += item[1]
        bar.set_postfix(examples=examples_seen)

    worker_args = [(w, num_processes, files, output_dir, num_shards, options)
                   for w in range(num_processes)]
    if num_processes == 1:
        class _Inline:  # progress reported synchronously in this process
            put = staticmethod(on_progress)
        results = [_run_worker(*worker_args[0], _Inline())]
    else:
        results = _run_processes(worker_args, on_progress)
    bar.close()

    stats = corpus.DecodeStats(
        bad_lines=sum(r["bad_lines"] for r in results),
        files_with_bad_bytes={f for r in results for f in r["files_with_bad_bytes"]})
    if stats.summary():
        print(stats.summary(), file=sys.stderr)
    manifest = make_manifest(
        corpus_pattern, output_dir, options, time.time() - start,
        num_examples=sum(r["examples"] for r in results),
        num_tokens=sum(r["tokens"] for r in results), num_shards=num_shards,
        num_processes=num_processes, num_files=len(files), corpus_bytes=total_bytes,
        undecodable_lines=stats.bad_lines)
    write_json(os.path.join(output_dir, MANIFEST), manifest)
    os.remove(os.path.join(output_dir, BUILDING))
    return manifest


def earlier_build_files(output_dir: str, names, open_binary=None) -> list:
    """Of `names` (the entries of `output_dir`), those an earlier build wrote: the shards
    (and a killed build's temporaries) that its manifest or BUILDING record names, then the
    records (read with `open_binary(path)`, as in `corpus.read_lines`). Shard-named files
    no record accounts for, such as the official builder's, are refused rather than
    replaced: a rebuild removes only what a build of ours wrote."""
    counts = {}
    for record in (MANIFEST, BUILDING):
        if record in names:
            path = os.path.join(output_dir, record)
            with (open_binary(path) if open_binary else open(path, "rb")) as f:
                try:
                    value = json.loads(f.read())
                except ValueError:
                    value = None
            if not isinstance(value, dict) or not isinstance(value.get("num_shards"), int):
                raise ConfigError(f"{path} is not a record of the data builder (or is "
                                  "damaged): remove it, or choose another output directory.")
            counts[record] = value["num_shards"]
    ours = {SHARD_PATTERN.format(i, n) for n in counts.values() for i in range(n)}
    shards, foreign = [], []
    for name in sorted(names):
        shard, temporary, pid = name.partition(_TEMPORARY)
        if name in ours or (shard in ours and temporary and pid.isdigit()):
            shards.append(name)
        elif name.startswith(SHARD_PREFIX):
            foreign.append(name)
    if foreign:
        examples = ", ".join(foreign[:2]) + (", ..." if len(foreign) > 2 else "")
        raise ConfigError(f"{output_dir} holds {len(foreign)} shard file(s) that "
                          f"the data builder did not write ({examples}): move them, or "
                          "choose another output directory.")
    return shards + list(counts)


def make_manifest(corpus_pattern, output_dir, options: BuildOptions, seconds: float,
                  **counts) -> dict:
    """The manifest of a finished build: `counts` (num_examples, num_tokens, num_shards,
    num_files, corpus_bytes, undecodable_lines and how the build ran) plus what readers
    check to reuse it. Refuses a build that produced no examples."""
    if counts["num_examples"] == 0:
        raise CorpusError(f"The corpus {corpus_pattern!r} produced no examples.")
    return {
        **counts,
        "seconds": round(seconds, 2),
        "examples_per_second": round(counts["num_examples"] / max(seconds, 1e-9), 1),
        "vocab_sha256": file_sha256(options.vocab_path),
        "options": dataclasses.asdict(options),
        "file_pattern": os.path.join(output_dir, SHARD_GLOB),
    }


def _run_processes(worker_args, on_progress):
    # TensorFlow's runtime threads do not survive fork(), so the workers are forked from a
    # fresh server process that has imported TensorFlow and tf-text (what the tokenizer
    # needs) but runs no op: each worker starts without importing them again. Spawned
    # instead, every worker spent 5-6 s of CPU importing: 4 workers on the 4 demo speeches
    # took 26-28 s of CPU and 13-14 s of wall time, forked from the server 7-8 s and 6 s
    # (2-core AMD EPYC, AVX2). The server lives until this process ends.
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["electra_tf.text.tokenizer"])
    progress, results = context.Queue(), context.Queue()
    processes = [context.Process(target=_worker_entry, args=(args + (progress,), results))
                 for args in worker_args]
    for p in processes:
        p.start()
    outcomes = {}
    while len(outcomes) < len(processes):
        try:
            on_progress(progress.get(timeout=0.2))
        except queue.Empty:
            pass
        while not results.empty():
            status, worker, value = results.get()
            if status == "error":
                for p in processes:
                    p.terminate()
                raise RuntimeError(f"Data worker {worker} failed: {value}")
            outcomes[worker] = value
        if any(p.exitcode not in (None, 0) for p in processes) and results.empty():
            raise RuntimeError("A data worker process died; see its output above.")
    for p in processes:
        p.join()
    while not progress.empty():
        on_progress(progress.get())
    return [outcomes[w] for w in sorted(outcomes)]


def load_manifest(output_dir: str):
    """The manifest of a completed build, or None when there is none."""
    return read_json(os.path.join(output_dir, MANIFEST), "remove it to build the shards again.")
