"""Finding corpus files and reading them as text, with clear errors for bad input.

Corpus format (as in the official `build_pretraining_dataset.py`): plain text files, one
sentence or line per line, a blank line between documents.
"""

import dataclasses
import glob
import os

from electra_tf.errors import CorpusError


@dataclasses.dataclass
class DecodeStats:
    """Undecodable (non-UTF-8) bytes met while reading: counted and reported, never fatal;
    and the bytes read, for progress within a file."""

    bad_lines: int = 0
    files_with_bad_bytes: set = dataclasses.field(default_factory=set)
    bytes_read: int = 0

    def merge(self, other: "DecodeStats") -> None:
        self.bad_lines += other.bad_lines
        self.files_with_bad_bytes |= other.files_with_bad_bytes
        self.bytes_read += other.bytes_read

    def summary(self) -> str:
        if not self.bad_lines:
            return ""
        names = sorted(self.files_with_bad_bytes)
        shown = ", ".join(names[:3]) + (" ..." if len(names) > 3 else "")
        return (
            f"warning: {self.bad_lines} line(s) in {len(names)} file(s) were not valid UTF-8 "
            f"({shown}); undecodable bytes were replaced by U+FFFD. Re-encode those files "
            "as UTF-8 (e.g. `iconv -f latin1 -t utf-8`) for exact text."
        )


def expand_corpus(patterns) -> list:
    """Expands comma-separated globs, files and directories into a sorted list of files."""
    if isinstance(patterns, str):
        patterns = [p for p in patterns.split(",") if p.strip()]
    if not patterns:
        raise CorpusError("No corpus given: pass --corpus 'path/to/texts/*.txt'.")
    files = set()
    for pattern in patterns:
        pattern = os.path.expanduser(pattern.strip())
        if os.path.isdir(pattern):
            matched = [os.path.join(pattern, name) for name in os.listdir(pattern)]
        else:
            matched = glob.glob(pattern, recursive=True)
        matched = [m for m in matched if os.path.isfile(m)]
        if not matched:
            raise CorpusError(
                f"Corpus pattern {pattern!r} matches no file; check the path (quote globs "
                "so the shell does not expand them)."
            )
        files.update(matched)
    files = sorted(files)
    if all(os.path.getsize(f) == 0 for f in files):
        raise CorpusError(f"All {len(files)} corpus file(s) are empty (first: {files[0]}).")
    return files


def read_lines(path: str, stats: DecodeStats, open_binary=None):
    """Yields the lines of `path` as str without line endings; bad UTF-8 is counted.

    `open_binary(path)` opens the file for binary reading (default: the local `open`;
    Beam pipelines pass their `FileSystems.open` to read gs:// and other URLs).
    """
    with (open_binary(path) if open_binary else open(path, "rb")) as f:
        for raw in f:
            stats.bytes_read += len(raw)
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                stats.bad_lines += 1
                stats.files_with_bad_bytes.add(path)
            yield line.rstrip("\r\n")
