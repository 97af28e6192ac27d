import pytest

from electra_tf.finetuning import readers, tasks
from electra_tf.finetuning.config import FinetuneConfig
from electra_tf.finetuning.tags import to_bioes, to_iob2
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
        tasks.get_task("text_classification").kind.check_labels(examples, ["0", "1"],
                                                                FinetuneConfig())


def test_conll_reader_on_the_japanese_ner_sample():
    examples = readers.read_conll(str(DEMO / "japanese_ner" / "dev.conll"))
    assert len(examples) == 100
    assert all(len(e.words) == len(e.tags) for e in examples)
    task = tasks.get_task("tagging")
    labels = task.kind.labels(task, examples, FinetuneConfig())
    # Trained as BIOES (official): every span type gets its B-, I-, E- and S- tags.
    types = {t[2:] for e in examples for t in e.tags if t != "O"}
    assert labels == sorted({"O"} | {p + t for t in types for p in ("B-", "I-", "E-", "S-")})
    assert task.kind.labels(task, examples, FinetuneConfig(tag_encoding="as_given")) == \
        sorted({t for e in examples for t in e.tags})


def test_conll_line_without_a_tag_column_is_refused(tmp_path):
    path = tmp_path / "bad.conll"
    path.write_text("word\tB-PER\nlonely\n")
    with pytest.raises(TaskDataError, match=r"bad.conll:2: 1 column"):
        readers.read_conll(str(path))


@pytest.mark.parametrize("tags, bioes", [
    (["B-PER", "I-PER", "O", "B-LOC"], ["B-PER", "E-PER", "O", "S-LOC"]),  # IOB2
    (["I-PER", "I-PER", "I-PER", "O", "I-ORG"], ["B-PER", "I-PER", "E-PER", "O", "S-ORG"]),
    (["B-PER", "B-PER", "O"], ["S-PER", "S-PER", "O"]),  # IOB2: adjacent entities
])
def test_span_tags_convert_to_bioes_and_back_to_iob2(tags, bioes):
    assert to_bioes(tags) == bioes
    assert to_bioes(bioes) == bioes
    iob2 = [to_iob2(t) for t in bioes]
    assert to_bioes(iob2) == bioes  # the same spans in IOB2


def test_official_recipe_choices_by_task():
    cfg = FinetuneConfig()
    mrpc, stsb, sst2 = (tasks.get_task(name) for name in ("mrpc", "stsb", "sst2"))
    assert mrpc.double_unordered and stsb.double_unordered and not sst2.double_unordered
    assert stsb.label_range == (0.0, 5.0)
    examples = [readers.SequenceExample("a", "b", 5.0, "x:1"),
                readers.SequenceExample("c", "d", 2.5, "x:2")]
    assert stsb.kind.targets(stsb, examples, []).tolist() == [1.0, 0.5]
    from electra_tf.config import ElectraConfig

    for preset, rate in (("small", 3e-4), ("base", 1e-4), ("large", 5e-5)):
        resolved = cfg.resolved(ElectraConfig.preset(preset), sst2)
        assert resolved.learning_rate == rate, preset
    large = cfg.resolved(ElectraConfig.preset("large"), sst2)
    assert large.layerwise_decay == 0.9 and large.head_dropout == 0.1
    squad_v2 = cfg.resolved(ElectraConfig.preset("base"), tasks.get_task("squad_v2"))
    assert (squad_v2.max_seq_length, squad_v2.epochs, squad_v2.head_dropout) == (512, 2, 0.0)
    tagging = cfg.resolved(ElectraConfig.preset("base"), tasks.get_task("tagging"))
    assert (tagging.max_seq_length, tagging.head_dropout) == (256, 0.0)
