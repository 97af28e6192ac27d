r"""The pretraining-data builder as an Apache Beam pipeline, for corpora beyond one machine.

Optional extra (`pip install -r requirements-beam.txt`); run through the builder's CLI:
  electra-build-data --runner FnApiRunner \
      --corpus 'texts/*.txt' --vocab vocab.txt --output_dir shards/ --num_shards 64
  electra-build-data --runner DataflowRunner \
      --corpus 'gs://bucket/texts/*.txt' --vocab vocab.txt --output_dir gs://bucket/shards \
      --beam_pipeline_options='--project=P --region=R --temp_location=gs://bucket/tmp'

Each corpus file is one unit of work, packed with the RNG keyed by the file's index in the
sorted file list: the examples are exactly those of a local build with one process per
file (`--num_processes` >= number of files). Corpus files are read through Beam's
`FileSystems` (local paths, gs://, hdfs://, ... as installed); the vocab is read by the
launcher and shipped to the workers. Shards get the local builder's names and
`manifest.json` is written last, so `pretrain.py --data` and the reuse check treat both
builds alike. Beam writes shards to a temporary directory and renames them when all are
complete, so an interrupted run never leaves a truncated shard under a final name.
"""

import json
import logging
import os
import shlex
import time

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.metrics.metric import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

from electra_tf.data import build_pretraining_data as builder
from electra_tf.files import write_json
from electra_tf.errors import CorpusError
from electra_tf.text import corpus, vocab as vocab_lib

_METRICS_NAMESPACE = "electra_tf"


class PackFile(beam.DoFn):
    """(file index, path) -> serialized `tf.train.Example`s of that file's packed sentences."""

    def __init__(self, options: builder.BuildOptions, vocab_tokens: list):
        self._options = options
        self._vocab_tokens = vocab_tokens
        self._examples = Metrics.counter(_METRICS_NAMESPACE, "num_examples")
        self._tokens = Metrics.counter(_METRICS_NAMESPACE, "num_tokens")
        self._bad_lines = Metrics.counter(_METRICS_NAMESPACE, "undecodable_lines")

    def process(self, indexed_path):
        index, path = indexed_path
        stats = corpus.DecodeStats()
        written = 0
        for example in builder.packed_examples([path], self._options, self._vocab_tokens,
                                               index, stats, FileSystems.open):
            if example is None:  # the end of the file
                continue
            written += 1
            self._examples.inc()
            self._tokens.inc(sum(example.input_mask))
            yield builder.serialize_example(example)
        self._bad_lines.inc(stats.bad_lines)
        if stats.bad_lines:
            logging.warning(stats.summary())
        logging.info("Packed %s: %d examples.", path, written)


def _is_url(path: str) -> bool:
    return "://" in path


def corpus_files(corpus_pattern: str) -> list:
    """[(path, size in bytes)] of the comma-separated local or URL patterns, sorted."""
    patterns = [p.strip() for p in corpus_pattern.split(",") if p.strip()]
    local = [p for p in patterns if not _is_url(p)]
    files = {f: os.path.getsize(f) for f in corpus.expand_corpus(local)} if local else {}
    for pattern in filter(_is_url, patterns):
        matched = FileSystems.match([pattern])[0].metadata_list
        if not matched:
            raise CorpusError(f"Corpus pattern {pattern!r} matches no file; check "
                                     "the path and the filesystem's credentials.")
        files.update((m.path, m.size_in_bytes) for m in matched)
    if not files:
        raise CorpusError("No corpus given: pass --corpus 'path/to/texts/*.txt'.")
    return sorted(files.items())


def _start_build(output_dir: str, num_shards: int) -> None:
    """Removes what earlier builds of ours wrote there, and records this one
    (`builder.BUILDING`)."""
    listed = FileSystems.match([FileSystems.join(output_dir, "*")])[0].metadata_list
    earlier = builder.earlier_build_files(
        output_dir, [os.path.basename(m.path.rstrip("/")) for m in listed], FileSystems.open)
    FileSystems.delete([FileSystems.join(output_dir, name) for name in earlier])
    _write_json(output_dir, builder.BUILDING, {"num_shards": num_shards})


def _write_json(output_dir: str, name: str, value: dict) -> None:
    path = FileSystems.join(output_dir, name)
    if _is_url(output_dir):  # object stores make a closed object visible at once
        with FileSystems.create(path) as f:
            f.write((json.dumps(value, indent=2) + "\n").encode("utf-8"))
    else:
        write_json(path, value)


def _counter(result, name: str) -> int:
    counters = result.metrics().query(
        MetricsFilter().with_namespace(_METRICS_NAMESPACE).with_name(name))["counters"]
    # Runners that cannot commit metrics report attempted values only.
    return sum((c.committed if c.committed is not None else c.attempted) for c in counters)


def build_with_beam(corpus_pattern: str, output_dir: str, options: builder.BuildOptions,
                    num_shards: int, runner: str = "FnApiRunner",
                    pipeline_args: str = "") -> dict:
    """Runs the pipeline to completion and returns the manifest it wrote.

    `pipeline_args` are Beam's own options as one command-line string (e.g.
    "--project=P --region=R --temp_location=gs://b/tmp"); `runner` overrides theirs. The
    default runs in this process: Beam's `DirectRunner` would first download its Prism
    runner, and offline leaves an empty directory in the temporary directory.
    """
    if num_shards < 1:
        raise CorpusError(f"--num_shards={num_shards} must be at least 1.")
    files = corpus_files(corpus_pattern)
    vocab_tokens = vocab_lib.load_vocab(options.vocab_path)
    pipeline_options = PipelineOptions(shlex.split(pipeline_args))
    pipeline_options.view_as(StandardOptions).runner = runner
    if not _is_url(output_dir):
        os.makedirs(output_dir, exist_ok=True)
    _start_build(output_dir, num_shards)

    start = time.time()
    pipeline = beam.Pipeline(options=pipeline_options)
    _ = (pipeline
         | "CorpusFiles" >> beam.Create(list(enumerate(path for path, _ in files)))
         # One file per worker at a time; the shuffle spreads files over workers.
         | "SpreadFiles" >> beam.Reshuffle()
         | "Pack" >> beam.ParDo(PackFile(options, vocab_tokens))
         | "Write" >> beam.io.WriteToTFRecord(
             FileSystems.join(output_dir, builder.SHARD_PREFIX),
             num_shards=num_shards, shard_name_template="-SSSSS-of-NNNNN"))
    result = pipeline.run()
    result.wait_until_finish()

    manifest = builder.make_manifest(
        corpus_pattern, output_dir, options, time.time() - start,
        num_examples=_counter(result, "num_examples"),
        num_tokens=_counter(result, "num_tokens"), num_shards=num_shards,
        runner=runner, num_files=len(files), corpus_bytes=sum(size for _, size in files),
        undecodable_lines=_counter(result, "undecodable_lines"))
    _write_json(output_dir, builder.MANIFEST, manifest)
    FileSystems.delete([FileSystems.join(output_dir, builder.BUILDING)])
    return manifest
