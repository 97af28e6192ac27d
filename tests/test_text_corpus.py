import pytest

from electra_tf.text import corpus
from electra_tf.errors import CorpusError


def test_glob_matching_nothing_names_the_pattern(tmp_path):
    with pytest.raises(CorpusError, match="matches no file"):
        corpus.expand_corpus(str(tmp_path / "*.txt"))


def test_empty_corpus_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("")
    with pytest.raises(CorpusError, match="empty"):
        corpus.expand_corpus(str(tmp_path / "*.txt"))


def test_directories_and_comma_lists_expand_sorted(tmp_path):
    (tmp_path / "b.txt").write_text("x")
    (tmp_path / "a.txt").write_text("y")
    assert corpus.expand_corpus(f"{tmp_path},{tmp_path / 'a.txt'}") == [
        str(tmp_path / "a.txt"), str(tmp_path / "b.txt")]


def test_non_utf8_lines_are_counted_not_fatal(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("caf\u00e9\n".encode("latin-1") + b"plain\n")
    stats = corpus.DecodeStats()
    lines = list(corpus.read_lines(str(path), stats))
    assert lines == ["caf\ufffd", "plain"]
    assert stats.bad_lines == 1 and "latin1.txt" in stats.summary()
