import pytest

from electra_tf.finetuning import readers, tasks
from electra_tf.errors import TaskDataError
from conftest import DEMO


def test_jsonl_and_csv_readers(tmp_path):
    task = tasks.get_task("text_classification")
    path = tmp_path / "a.jsonl"
    path.write_text('{"text": "good", "label": 1}\n\n{"text": "q", "text_pair": "a", '
                    '"label": 0}\n')
    examples = readers.read_sequence_examples(task, str(path))
    assert [(e.text, e.text_pair, e.label) for e in examples] == [("good", None, "1"),
                                                                  ("q", "a", "0")]
    csv = tmp_path / "a.csv"
    csv.write_text('sentence,y\n"hello, world",pos\n')
    examples = readers.read_sequence_examples(task, str(csv), text_field="sentence",
                                            label_field="y")
    assert examples[0].text == "hello, world" and examples[0].label == "pos"


def test_glue_tsv_columns(tmp_path):
    mrpc = tmp_path / "dev.tsv"
    mrpc.write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tA cat.\tThe cat.\n")
    (example,) = readers.read_sequence_examples(tasks.get_task("mrpc"), str(mrpc))
    assert (example.text, example.text_pair, example.label) == ("A cat.", "The cat.", "1")
    cola = tmp_path / "cola.tsv"
    cola.write_text("gj04\t1\t\tThe book was read.\n")
    (example,) = readers.read_sequence_examples(tasks.get_task("glue/cola"), str(cola))
    assert (example.text, example.label) == ("The book was read.", "1")
    stsb = tmp_path / "stsb.tsv"
    stsb.write_text("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
                    "sentence2\tscore\n0\tx\tx\tx\tx\tx\tx\tA man.\tA person.\t4.2\n")
    (example,) = readers.read_sequence_examples(tasks.get_task("stsb"), str(stsb))
    assert example.label == pytest.approx(4.2) and example.text_pair == "A person."


@pytest.mark.parametrize("content, message", [
    ('{"txt": "x", "label": 1}\n', "no 'text' field"),
    ('{"text": "x"}\n', "missing label"),
    ("{not json\n", "not valid JSON"),
    ("", "is empty"),
])
def test_bad_sequence_files_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(TaskDataError, match=message) as error:
        readers.read_sequence_examples(tasks.get_task("text_classification"), str(path))
    assert "bad.jsonl" in str(error.value)


def test_unknown_task_and_unseen_eval_label(tmp_path):
    with pytest.raises(TaskDataError, match="Unknown task"):
        tasks.get_task("summarization")
    examples = [readers.SequenceExample("x", None, "maybe", "dev.jsonl:7")]
    with pytest.raises(TaskDataError, match="dev.jsonl:7.*'maybe'"):
        tasks.get_task("text_classification").kind.check_labels(examples, ["0", "1"])


def test_conll_reader_on_the_japanese_ner_sample():
    examples = readers.read_conll(str(DEMO / "japanese_ner" / "dev.conll"))
    assert len(examples) == 100
    assert all(len(e.words) == len(e.tags) for e in examples)
    task = tasks.get_task("tagging")
    labels = task.kind.labels(task, examples)
    assert "O" in labels and any(t.startswith("B-") for t in labels)


def test_conll_line_without_a_tag_column_is_refused(tmp_path):
    path = tmp_path / "bad.conll"
    path.write_text("word\tB-PER\nlonely\n")
    with pytest.raises(TaskDataError, match=r"bad.conll:2: 1 column"):
        readers.read_conll(str(path))
