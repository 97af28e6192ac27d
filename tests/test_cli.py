"""The console commands as a user runs them: converting in and out of every format, learning
a vocab, --help, and TensorFlow's start-up lines only on --verbose."""

import json
import os

import pytest

import convert_fixtures as fx
from conftest import ROOT, SMALL_CORPUS, TENSORFLOW_LOG_LINE, run_app, run_command
from electra_tf.text import vocab as vocab_lib


def test_convert_in_and_out_of_every_format(tmp_path):
    disc_dir, gen_dir = fx.save_hf(fx.random_hf_models(), tmp_path / "hf")
    fx.random_keras_hub_backbone().save(tmp_path / "backbone.keras")
    fx.write_vocab(tmp_path)
    ours, tf1 = tmp_path / "ours", tmp_path / "tf1" / "model.ckpt"
    runs = run_app(
        "electra_tf_cli.convert",
        ["--from", "huggingface", "--checkpoint", disc_dir, "--generator", gen_dir,
         "--output", ours],
        ["--to", "huggingface", "--checkpoint", ours, "--output", tmp_path / "hf_out"],
        ["--to", "official", "--checkpoint", ours, "--output", tf1],
        # Head counts are not in TF1 shapes: the official rule (hidden / 64) needs the flag.
        ["--from", "official", "--checkpoint", tf1, "--num_heads", "2", "--output",
         tmp_path / "from_tf1"],
        ["--from", "keras_hub", "--checkpoint", tmp_path / "backbone.keras", "--vocab",
         tmp_path / "vocab.txt", "--output", tmp_path / "from_keras_hub"],
        ["--from", "huggingface", "--checkpoint", tmp_path, "--output", tmp_path / "x"],
        ["--from", "official", "--to", "huggingface", "--checkpoint", ours, "--output",
         tmp_path / "y"],
        ["--to", "keras_hub", "--checkpoint", ours, "--output", tmp_path / "keras_hub"])
    assert [r["code"] for r in runs] == [0, 0, 0, 0, 0, 2, 2, 0], runs
    assert "Mapped 80 variables (discriminator + head + generator)" in runs[0]["stdout"]
    assert f"{tmp_path / 'hf_out'}, {tmp_path / 'hf_out' / 'generator'}" in runs[1]["stdout"]
    assert (tmp_path / "hf_out" / "generator" / "model.safetensors").is_file()
    assert f"Wrote a TF1 checkpoint: {tf1}" in runs[2]["stdout"]
    assert os.path.isfile(f"{tf1}.index")
    fx.assert_same_weights(ours, tmp_path / "from_tf1")  # out to TF1 and back: exact
    assert "Mapped 39 variables (discriminator) into" in runs[4]["stdout"]
    assert (tmp_path / "keras_hub" / "config.json").is_file()  # a preset: from_preset loads it
    assert "Wrote a keras-hub preset" in runs[7]["stdout"]
    for failed in runs[5:7]:
        assert failed["stderr"].strip().splitlines()[-1].startswith("error: ")
        assert "Traceback" not in failed["stderr"]
    assert "Give exactly one of --from" in runs[6]["stderr"]


def test_build_vocab_shows_tensorflow_lines_only_on_verbose_and_helps(tmp_path):
    corpus = SMALL_CORPUS.split(",")[0]
    built = run_command("electra-build-vocab", "--corpus", corpus, "--output",
                        tmp_path / "vocab.txt", "--vocab_size", "500", "--verbose",
                        env={"TF_CPP_MIN_LOG_LEVEL": None})
    tokens = vocab_lib.load_vocab(str(tmp_path / "vocab.txt"))
    assert 100 < len(tokens) <= 500 and tokens[:5] == list(vocab_lib.SPECIAL_TOKENS)
    assert f"Wrote {len(tokens)} tokens to {tmp_path / 'vocab.txt'}" in built.stdout
    # One speech has too few frequent pieces for 500 (the demo's 3.4 MB: 6,103 of 8,192).
    assert f"note: {len(tokens)} tokens, fewer than the 500 asked: the WordPiece" in (
        built.stdout)
    assert TENSORFLOW_LOG_LINE.search(built.stderr), built.stderr  # TensorFlow's, on request

    helped = run_command("electra-build-vocab", "--help", check=False,  # absl exits 1
                         env={"TF_CPP_MIN_LOG_LEVEL": None})
    assert "Learns a WordPiece vocabulary from raw text." in helped.stdout
    for flag in ("--corpus", "--output", "--vocab_size", "--[no]lower_case", "--[no]verbose"):
        assert flag in helped.stdout, flag
    assert helped.stderr == "", helped.stderr  # quiet: not one TensorFlow line


def test_a_full_disk_or_an_unwritable_cache_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    import tensorflow as tf

    from electra_tf_cli import common

    def fails_with(error):
        def run(argv):
            raise error
        with pytest.raises(SystemExit) as exited:
            common.wrap(run)([])
        assert exited.value.code == 2
        return capsys.readouterr().err.strip()

    full = fails_with(OSError(errno.ENOSPC, "No space left on device", "/runs/x/config.json"))
    assert full.startswith("error: cannot write /runs/x/config.json: No space left on device;")
    tf_full = fails_with(tf.errors.ResourceExhaustedError(  # as a checkpoint save raises it
        None, None, "{{function_node __wrapped__SaveV2_dtypes_244_device_/job:localhost/"
        "replica:0/task:0/device:CPU:0}} /runs/x/checkpoints/ckpt-2_temp/part-00000; No "
        "space left on device [Op:SaveV2]"))
    assert tf_full.startswith("error: cannot write: /runs/x/checkpoints/ckpt-2_temp/part-00000"
                              "; No space left on device; free some space")
    assert len(full.splitlines()) == len(tf_full.splitlines()) == 1
    with pytest.raises(KeyError):  # anything else is a bug and keeps its traceback
        common.wrap(lambda argv: {}["x"])([])

    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("ELECTRA_TF_HOME", str(tmp_path / "a-file" / "cache"))
    [run] = run_app("electra_tf_cli.export_encoder", ["--checkpoint", "hf:org/x",
                                                      "--output", tmp_path / "out"])
    assert run["code"] == 2 and "Traceback" not in run["stderr"], run
    assert f"cannot write {tmp_path / 'a-file' / 'cache'}" in run["stderr"]


def test_a_command_leaves_what_tensorflow_imported_out_of_garbage_collections():
    import gc

    from electra_tf_cli import common

    seen = {}

    def run(argv):
        seen.update(enabled=gc.isenabled(), frozen=gc.get_freeze_count())

    gc.unfreeze()  # the tests' own (conftest.pytest_collection_finish)
    try:
        common.wrap(run)([])
    finally:
        gc.freeze()
    assert seen["enabled"]  # collections run again for the command's own objects
    assert seen["frozen"] > 100_000  # TensorFlow's: over 300,000


def test_every_flag_of_every_command_says_what_it_does():
    """Each command's own flags (and the shared ones) have a real help text, not a bare
    default or the placeholder of an undocumented dataclass field, and defining them loads
    no TensorFlow (so `--help` and flag errors answer at once). One process: each
    command's flags are defined, read and deleted before the next command's."""
    import tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"].values()
    commands = tuple(target.split(":")[0].rsplit(".", 1)[1] for target in scripts)
    assert "predict" in commands
    script = (
        "import importlib, json\n"
        "from absl import flags\n"
        "helps = {}\n"
        f"for command in {commands!r}:\n"
        "    module = importlib.import_module('electra_tf_cli.' + command)\n"
        "    getattr(module, 'define_flags', lambda: None)()\n"
        "    ours = [name for name in list(flags.FLAGS)\n"
        "            if 'electra_tf_cli' in (flags.FLAGS.find_module_defining_flag(name) or '')]\n"
        "    for name in ours:\n"
        "        helps[command + ' --' + name] = flags.FLAGS[name].help\n"
        "        delattr(flags.FLAGS, name)\n"
        "import sys\n"
        "print(json.dumps([helps, 'tensorflow' in sys.modules]))\n")
    result = run_command("python", "-c", script, fresh=True)
    helps, loaded_tensorflow = json.loads(result.stdout.strip().splitlines()[-1])
    assert not loaded_tensorflow
    assert len(helps) > 100 and "finetune --qa_na_threshold" in helps
    # Their help names every objective and task (written out: the registries load
    # TensorFlow).
    from electra_tf.finetuning.tasks import TASKS
    from electra_tf.pretraining.objectives import OBJECTIVES
    for name in OBJECTIVES:
        assert f" {name} (" in helps["pretrain --objective"], name
    assert helps["finetune --task"] == f"One of: {', '.join(TASKS)}."
    poor = {name: text for name, text in helps.items()
            if text == "(undocumented)" or text.startswith("Default:") or len(text) < 20}
    assert not poor, poor
