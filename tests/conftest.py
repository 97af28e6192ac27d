"""Shared fixtures: a small vocab, packed shards, a tiny pretraining run and fine-tuned runs
made from the bundled demo data; each is built once per test session, even across
pytest-xdist worker processes."""

import contextlib
import fcntl
import gc
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# One TensorFlow thread pool thread per process (inherited by the commands tests start):
# the suite runs 3 worker processes on 2 cores, and more threads only contend (measured:
# 348 s -> 285 s for the whole suite).
for variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(variable, "1")

# The tests' processes keep no XLA kernels on disk (`electra_tf.xla_cache`, which
# tests/test_xla_cache.py turns on in its commands): shared by the whole suite, they saved
# nothing measurable (9:57 and 1,066 s of CPU against 9:17-9:55 and 1,026-1,070 s; 451
# kernels, few shapes compiled in more than one process), and every process would rewrite
# its new ones as text at its exit. Before `import electra_tf`, which turns it on.
if "tf_xla_persistent_cache_directory" not in os.environ.get("TF_XLA_FLAGS", ""):
    os.environ["TF_XLA_FLAGS"] = (
        os.environ.get("TF_XLA_FLAGS", "") + " --tf_xla_persistent_cache_directory=").strip()

import pytest  # noqa: E402

# Before any test module makes a TensorFlow tensor: the same CPU memory settings (the pooling
# allocator) as the commands the tests start.
import electra_tf  # noqa: E402,F401

# The longest test files by CPU time (measured per test, Sapphire Rapids, 2 cores), started
# first: `make test` runs pytest-xdist with --no-loadscope-reorder, so workers take files in
# this order (xdist's default hands out the files with the most tests first), and a long file
# handed out last would leave one worker running alone while the others idle.
LONGEST_FILES = ("test_models_text_classifier.py", "test_runs_pretrain.py",
                 "test_runs_pretrain_from_model.py", "test_distribution.py",
                 "test_pretraining_pretrainer.py", "test_training_runtime.py", "test_zoo.py",
                 "test_callbacks_probe.py", "test_runs_finetune.py",
                 "test_finetuning_reference_model.py", "test_runs_predict.py", "test_cli.py",
                 "test_layers.py", "test_export_encoder.py", "test_readme.py",
                 "test_export_classifier.py")


# The test files that use torch and transformers (directly or through convert_fixtures), run
# by one worker: they import them in their tests, not at collection, so the other workers
# never load them (7.6 s of CPU each for torch, transformers and its ELECTRA module on a
# 2-core AVX2 EPYC). A file missing here costs that time again, nothing else.
TORCH_FILES = frozenset((
    "test_runs_pretrain_from_model.py", "test_zoo.py", "test_pretraining_ablations.py",
    "test_convert_huggingface.py", "test_convert_huggingface_tasks.py",
    "test_convert_official.py", "test_convert_keras_hub.py", "test_cli.py"))


def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile` (`make test`'s) as pytest-xdist's own, but for `TORCH_FILES`,
    which go to one worker as one unit."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class TorchFilesTogether(LoadFileScheduling):
        def _split_scope(self, nodeid):  # xdist's hook for what one worker runs
            scope = super()._split_scope(nodeid)
            return "torch files" if os.path.basename(scope) in TORCH_FILES else scope

    return TorchFilesTogether(config, log)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def pytest_collection_finish(session):
    """What collection imported (TensorFlow, Keras, keras-hub and the rest the test
    modules import: over half a million objects, none of them garbage, when torch and
    transformers were among them) is left out of Python's full garbage collections from
    here on, which scanned it again each time: the workers' full collections took 125 s
    instead of 181 s in a suite of ~1,200 s of CPU (2-core AVX2 EPYC; docs/results.md)."""
    gc.freeze()


def pytest_sessionfinish(session):
    """pytest's last act in each process is five full garbage collections, to report any
    exception raised while they delete objects (its `unraisableexception` plugin; the
    tests' own are reported after each test). Over what the tests left (models, graphs)
    they took ~4 s of CPU per worker at its end (py-spy over the suite: 12.4 s of ~1,200
    s). What is left now stays frozen as at collection: the process ends."""
    gc.freeze()


@pytest.fixture(scope="session", autouse=True)
def temporary_files_under_pytests_directory(tmp_path_factory):
    """The tests' and their commands' temporary files go under pytest's own directory,
    which pytest prunes: pytest-xdist kills a worker that takes over 10 s to exit, before
    its exit handlers remove what they wrote to the system's (TensorFlow's autograph
    modules: one worker left 49 in a slow spell)."""
    directory = str(tmp_path_factory.mktemp("temporary"))
    with pytest.MonkeyPatch.context() as patch:  # the session-wide `monkeypatch`
        patch.setenv("TMPDIR", directory)
        patch.setattr(tempfile, "tempdir", directory)
        yield directory


# The test process's `preloaded_commands.py` process ("process", started on first use) and
# the environment commands run there in ("environment").
_PRELOADED = {}


@pytest.fixture(scope="session", autouse=True)
def commands_run_preloaded(temporary_files_under_pytests_directory):
    """`run_command` runs the commands of this session's environment as children of one
    process that has already imported TensorFlow and keras-hub (`preloaded_commands.py`):
    4-5 s of CPU less a command."""
    _PRELOADED["environment"] = _environment_of_tests()
    yield
    process = _PRELOADED.pop("process", None)
    if process is not None:
        process.stdin.close()  # it ends after its last command
        process.wait()


@pytest.fixture(autouse=True)
def environment_as_before_each_test():
    """What a test or a library it calls left in the process's environment is undone after
    it: transformers sets TF_USE_LEGACY_KERAS=1 on import (a later first `tf.keras`, and
    every command the worker starts, would get Keras 2) and TOKENIZERS_PARALLELISM in its
    pipelines, and a command run in a changed environment cannot run preloaded (fresh, such
    a command took 4.3-17 s of CPU, preloaded 0.7-3.9 s; four of them in one suite's run,
    all after the worker's torch files)."""
    before = _environment_of_tests()
    yield
    after = _environment_of_tests()
    for name in set(before) | set(after):
        if name not in before:
            del os.environ[name]
        elif after.get(name) != before[name]:
            os.environ[name] = before[name]


# A line of TensorFlow's C++ logging (glog format: severity, MMDD, time), e.g.
# "I0000 00:00:1795499483.410377  7653 port.cc:153] oneDNN custom operations are on". Which
# lines appear depends on the CPU (no oneDNN notice on AMD), so tests look for the format.
TENSORFLOW_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d", re.MULTILINE)

ROOT = pathlib.Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
REFERENCE_MODEL = ROOT.parent / "shared" / "models" / "electra-small-ref"

# A few speeches: enough text for a vocab and a few thousand examples, fast to process.
SMALL_CORPUS = ",".join(str(DEMO / "corpus" / name) for name in (
    "sotu_2019_donald_j_trump_r.txt", "sotu_2020_donald_j_trump_r.txt",
    "sotu_2021_joseph_r_biden_d.txt", "sotu_2016_barack_obama_d.txt",
))


def build_once(tmp_path_factory, name, build) -> pathlib.Path:
    """`name`'s directory, filled by `build(directory)` once per test session: the first
    xdist worker to ask builds it while the others wait on a lock, then reuse it."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # shared by the session's workers
    directory = root / f"shared-{name}"
    with open(root / f"shared-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (directory / ".complete").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir()
            build(directory)
            (directory / ".complete").touch()
    return directory


def _command(args):
    """A command of this environment (e.g. "electra-build-vocab", "python") and its
    arguments as strings."""
    return [os.path.join(os.path.dirname(sys.executable), args[0]), *map(str, args[1:])]


def _environment(env):
    """This process's environment with `env`'s variables added (None removes one)."""
    return {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}


def start_command(*args, env=None, timeout=600):
    """Starts a command in the background (preloaded as `run_command`'s, else in a process
    of its own); its stdout and stderr are merged. `env` as `run_command`'s."""
    variables = _variables_to_set(env, fresh=False)
    if variables is not None:
        return _PreloadedCommand(_command(args), variables, timeout)
    return subprocess.Popen(_command(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=_environment(env))


def run_command(*args, check=True, env=None, timeout=600, fresh=False, **kwargs):
    """Runs a command of this environment as a user would; fails the test on a non-zero
    exit status unless `check` is False. `env` adds variables (None removes one). Commands
    run preloaded (`commands_run_preloaded`) unless `fresh` (for a test of what a command
    imports) or given, by `env` or by the test, a variable outside SET_IN_COMMAND."""
    variables = _variables_to_set(env, fresh)
    if variables is not None and set(kwargs) <= {"cwd"}:
        result = _run_preloaded(_command(args), kwargs.get("cwd"), timeout, variables)
    else:
        result = subprocess.run(_command(args), capture_output=True, text=True,
                                timeout=timeout, env=_environment(env), **kwargs)
    if check and result.returncode != 0:
        pytest.fail(f"{args[0]} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


# Variables read when they are used rather than when TensorFlow or keras-hub is imported: a
# command given them still runs preloaded, with them set in its own process. The temporary
# directory, a run's cluster, the model zoo's (ours read at every use, as is the Hugging
# Face endpoint and cache our downloads pass on: `electra_tf/zoo/download.py`), and torch's
# compilation cache, which torch sets in the tests' process on first use of its compiler
# (the parity tests): before it was listed, every command after one ran fresh.
SET_IN_COMMAND = ("TMPDIR", "TF_CONFIG", "ELECTRA_TF_HOME", "ELECTRA_TF_CATALOG",
                  "HF_ENDPOINT", "HF_HUB_CACHE", "TORCHINDUCTOR_CACHE_DIR")


def _variables_to_set(env, fresh):
    """The variables a command sets in its process to run preloaded: the test's changes to
    the session's environment, then `env`; None when it must start fresh instead."""
    session = _PRELOADED.get("environment")
    if fresh or session is None:
        return None
    current = _environment_of_tests()
    variables = {name: current.get(name) for name in set(current) | set(session)
                 if current.get(name) != session.get(name)}
    variables.update(env or {})
    return variables if set(variables) <= set(SET_IN_COMMAND) else None


def _environment_of_tests() -> dict:
    """This process's environment but the variable pytest changes at every test phase."""
    return {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}


def _preloaded_request(request: dict) -> dict:
    """`request` sent to this session's `preloaded_commands.py` (started if it is not
    running); its answer."""
    process = _PRELOADED.get("process")
    if process is None or process.poll() is not None:
        process = _PRELOADED["process"] = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "preloaded_commands.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    process.stdin.write(json.dumps(request) + "\n")
    process.stdin.flush()
    reply = process.stdout.readline()
    if not reply:
        raise RuntimeError(f"preloaded_commands.py ended before answering {request}")
    return json.loads(reply)


def _run_preloaded(argv: list, cwd, timeout: int,
                   variables: dict) -> subprocess.CompletedProcess:
    """`argv` run by `preloaded_commands.py` with `variables` set (`_variables_to_set`), as
    `subprocess.run` would run it."""
    with tempfile.TemporaryDirectory() as directory:
        outputs = [os.path.join(directory, name) for name in ("stdout", "stderr")]
        code = _preloaded_request({"argv": argv, "cwd": str(cwd or os.getcwd()),
                                   "stdout": outputs[0], "stderr": outputs[1],
                                   "timeout": timeout, "env": variables})["code"]
        stdout, stderr = (open(path, encoding="utf-8").read() for path in outputs)
    if code == -signal.SIGALRM:
        raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
    return subprocess.CompletedProcess(argv, code, stdout, stderr)


class _PreloadedCommand:
    """A command started in the background by `preloaded_commands.py`, with what the tests
    use of `subprocess.Popen`: `pid`, `send_signal`, `communicate` (stdout and stderr
    merged, in the first value) and `returncode`."""

    def __init__(self, argv: list, variables: dict, timeout: int):
        self._directory = tempfile.TemporaryDirectory()
        self._output = os.path.join(self._directory.name, "output")
        self.args, self.returncode = argv, None
        self.pid = _preloaded_request({"argv": argv, "cwd": os.getcwd(),
                                       "stdout": self._output, "stderr": self._output,
                                       "timeout": timeout, "env": variables,
                                       "background": True})["pid"]

    def send_signal(self, number):
        os.kill(self.pid, number)

    def communicate(self, timeout=None):
        deadline = time.time() + (timeout or float("inf"))
        while not self._ended():  # asking to wait would block this process until it ends
            if time.time() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.1)
        self.returncode = _preloaded_request({"wait": self.pid})["code"]
        with open(self._output, encoding="utf-8") as f:
            output = f.read()
        self._directory.cleanup()
        return output, None

    def _ended(self) -> bool:
        """Whether the command has exited (a zombie until its parent waits for it)."""
        with open(f"/proc/{self.pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"


# The SQuAD 2.0 questions of the `finetuned` fixture's `qa` run.
QA_CONTEXT = ("The president gave a speech to the congress about the economy. " * 3 +
              "The nation was strong and the people were free.")
QA_QUESTIONS = [
    {"id": "a", "question": "Who gave a speech?",
     "answers": [{"text": "The president", "answer_start": 0}]},
    {"id": "b", "question": "What was strong?",
     "answers": [{"text": "The nation", "answer_start": QA_CONTEXT.index("The nation")}]},
    {"id": "c", "question": "What color was the sky?", "answers": [], "is_impossible": True}]


def traces(*functions) -> list:
    """How many concrete functions each `tf.function` has traced (one per input shape):
    for XLA kernels, how many times they were compiled."""
    return [len(function._list_all_concrete_functions()) for function in functions]


@contextlib.contextmanager
def autograph_conversions():
    """Collects the names of the functions outside TensorFlow that autograph converts
    meanwhile (converted or found in its cache: tracing asked for them). Ours, and the
    keras-hub code they call, are straight-line code, traced as written: a conversion
    costs CPU at every run's start."""
    from tensorflow.python.autograph.impl import api  # private: the converter's one door

    converted, transform = [], api._TRANSPILER.transform

    def recording(function, context):
        module = getattr(function, "__module__", "")
        if not module.startswith("tensorflow."):
            converted.append(f"{module}.{getattr(function, '__qualname__', function)}")
        return transform(function, context)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(api._TRANSPILER, "transform", recording)
        yield converted


def read_jsonl(path) -> list:
    return [json.loads(line) for line in open(path, encoding="utf-8")]


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows),
                    encoding="utf-8")
    return str(path)


def head(path, n, out):
    """The first `n` lines (or CoNLL sentences) of `path`, written to `out`."""
    sep = "\n\n" if str(path).endswith(".conll") else "\n"
    lines = open(path, encoding="utf-8").read().split(sep)
    out.write_text(sep.join(lines[:n]) + sep, encoding="utf-8")
    return str(out)


@pytest.fixture(scope="session")
def small_corpus():
    return SMALL_CORPUS


@pytest.fixture(scope="session")
def vocab_path(tmp_path_factory):
    from electra_tf.text import vocab

    def build(directory):
        tokens = vocab.learn_vocab(SMALL_CORPUS.split(","), 1500, lower_case=True,
                                   strip_accents=True)
        vocab.write_vocab(tokens, str(directory / "vocab.txt"))

    return str(build_once(tmp_path_factory, "vocab", build) / "vocab.txt")


@pytest.fixture(scope="session")
def shards(tmp_path_factory, vocab_path):
    """(file pattern, manifest) of examples of 64 tokens built from the small corpus."""
    from electra_tf.data import build_pretraining_data as builder

    def build(directory):
        options = builder.BuildOptions(vocab_path=vocab_path, max_seq_length=64)
        builder.build_pretraining_data(SMALL_CORPUS, str(directory), options, num_shards=2,
                                       show_progress=False)

    manifest = builder.load_manifest(str(build_once(tmp_path_factory, "shards", build)))
    return manifest["file_pattern"], manifest


@pytest.fixture(scope="session")
def pretrained_dir(tmp_path_factory, shards, vocab_path):
    """A tiny pretraining run directory (20 steps), as finetune.py's --init_checkpoint."""
    from electra_tf.config import ElectraConfig
    from electra_tf.runs import pretrain as pretrain_run

    def build(directory):
        config = ElectraConfig.preset("tiny", train_steps=20, batch_size=8)
        inputs = pretrain_run.RunInputs(model_dir=str(directory), data=shards[0],
                                        vocab=vocab_path)
        config, pattern = pretrain_run.prepare_run(config, inputs)
        pretrain_run.train(config, str(directory), pattern, eval_batches=0, verbose=0)

    return str(build_once(tmp_path_factory, "pretrained", build))


@pytest.fixture(scope="session")
def encoder_export(tmp_path_factory, pretrained_dir):
    """The tiny pretrained run exported as a TF Hub-style encoder + preprocessor (length
    32): `<dir>/encoder`, `<dir>/preprocess`."""
    from electra_tf.export import encoder as export_lib

    def build(directory):
        export_lib.export_encoder(pretrained_dir, str(directory / "electra_tiny"),
                                  seq_length=32)

    return str(build_once(tmp_path_factory, "encoder_export", build) / "electra_tiny")


@pytest.fixture(scope="session")
def finetuned(tmp_path_factory, pretrained_dir):
    """Fine-tuned runs of the tiny pretrained run: `cls` (sentiment labels as names, every
    other example a text pair; 2 trials), `reg` (regression), `ner` (Japanese NER
    tagging, on `ner.conll`) and `qa` (SQuAD 2.0, on `qa.json`: QA_QUESTIONS on
    QA_CONTEXT). Returns their parent directory."""
    from electra_tf.finetuning.config import FinetuneConfig
    from electra_tf.runs.finetune import finetune

    def build(root):
        lines = open(DEMO / "sentiment" / "train.jsonl", encoding="utf-8").read().splitlines()
        rows = [json.loads(line) for line in lines[:96]]
        for i, row in enumerate(rows):
            row["label"] = ["neg", "pos"][int(row["label"])]
            if i % 2:
                row["text_pair"] = rows[i - 1]["text"]
        train, dev = jsonl(root / "cls_train.jsonl", rows[:64]), jsonl(root / "cls_dev.jsonl",
                                                                         rows[64:])
        finetune(FinetuneConfig(task="text_classification", max_seq_length=32, batch_size=16,
                                epochs=2, num_trials=2), pretrained_dir, train, dev,
                 str(root / "cls"))

        scores = jsonl(root / "reg.jsonl",
                       [{"text": f"score {i % 5}", "label": float(i % 5)} for i in range(32)])
        finetune(FinetuneConfig(task="text_regression", max_seq_length=16, batch_size=16,
                                epochs=1), pretrained_dir, scores, scores, str(root / "reg"))

        conll = head(DEMO / "japanese_ner" / "train.conll", 24, root / "ner.conll")
        finetune(FinetuneConfig(task="tagging", max_seq_length=24, batch_size=8, epochs=1),
                 pretrained_dir, conll, conll, str(root / "ner"))

        squad = root / "qa.json"
        squad.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [
            {"context": QA_CONTEXT, "qas": QA_QUESTIONS}]}]}))
        finetune(FinetuneConfig(task="squad_v2", max_seq_length=32, doc_stride=12,
                                batch_size=8, epochs=1),
                 pretrained_dir, str(squad), str(squad), str(root / "qa"))

    return build_once(tmp_path_factory, "finetuned", build)


def run_app(module, *argv_lists) -> list:
    """Each argv list run through app `module` (e.g. "electra_tf_cli.convert") in one fresh
    process (`run_app.py`); [{"code", "stdout", "stderr"}] per run."""
    result = run_command("python", ROOT / "tests" / "run_app.py", module,
                         json.dumps([[str(a) for a in argv] for argv in argv_lists]))
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory):
    """`../shared/models/electra-small-ref` (a real ELECTRA-Small pretrained by an
    independent implementation, HF layout), converted with its generator into a run
    directory."""
    from electra_tf.convert import api

    if not (REFERENCE_MODEL / "discriminator" / "config.json").is_file():
        pytest.fail(f"The reference model is missing: {REFERENCE_MODEL} (the shared folder "
                    "beside the checkout, ../shared/models/electra-small-ref). Clone the "
                    "project beside that folder.")

    def build(directory):
        api.from_huggingface(str(REFERENCE_MODEL / "discriminator"), str(directory / "run"),
                             generator=str(REFERENCE_MODEL / "generator"))

    return str(build_once(tmp_path_factory, "reference", build) / "run")


def novel_or_speech(n_train, n_eval, seed=0):
    """A topic-style task from the bundled corpus: is a sentence from Moby-Dick or from a
    State of the Union address? ([{"text", "label"}] train and eval rows, balanced.)"""
    import random

    from electra_tf.text.sentences import split_sentences

    rng = random.Random(seed)

    def sentences(paths):
        found = []
        for path in paths:
            for line in open(path, encoding="utf-8"):
                found += [s for s in split_sentences(line) if 8 <= len(s.split()) <= 30]
        rng.shuffle(found)
        return found

    corpus = DEMO / "corpus"
    novel = sentences([corpus / "moby_dick.txt"])
    speech = sentences(sorted(corpus.glob("sotu_*.txt")))

    def rows(start, n):
        picked = ([{"text": t, "label": "novel"} for t in novel[start:start + n // 2]]
                  + [{"text": t, "label": "speech"} for t in speech[start:start + n // 2]])
        rng.shuffle(picked)
        return picked

    return rows(0, n_train), rows(n_train, n_eval)
