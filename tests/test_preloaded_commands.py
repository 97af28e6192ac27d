"""The tests' own command runner (`conftest.run_command` through `preloaded_commands.py`):
a command runs as from a shell, in a process that has imported TensorFlow and keras-hub
but nothing of ours."""

import os
import signal

import pytest

import conftest
from conftest import run_command, start_command

SCRIPT = """
import sys
print(sys.argv, "keras_hub" in sys.modules, "electra_tf.layers" in sys.modules)
import electra_tf.layers  # what a command imports, it imports itself
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def session_environment(monkeypatch):
    """The session's own environment, whatever a test before left set in this worker (such
    a change sends later commands to fresh processes)."""
    session = conftest._PRELOADED["environment"]
    for name in set(os.environ) - set(session) - {"PYTEST_CURRENT_TEST"}:
        monkeypatch.delenv(name)
    for name, value in session.items():
        monkeypatch.setenv(name, value)


def test_a_command_runs_preloaded_with_its_own_arguments_output_and_status(
        tmp_path, session_environment):
    result = run_command("python", "-c", SCRIPT, "3", "two words", check=False)
    assert result.returncode == 3, result.stderr
    assert result.stdout == "['-c', '3', 'two words'] True False\n"
    assert result.stderr == "to stderr\n"
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint(sys.argv[1:])\nraise ValueError('bad input')\n")
    failed = run_command("python", script, "x", check=False, cwd=tmp_path)
    assert failed.returncode == 1 and failed.stdout == "['x']\n"
    assert failed.stderr.startswith("Traceback") and "ValueError: bad input" in failed.stderr


BACKGROUND = """
import os, sys, tempfile, time
print(os.environ["TF_CONFIG"], tempfile.gettempdir(), os.getpid(), flush=True)
print("to stderr", file=sys.stderr, flush=True)
time.sleep(float(sys.argv[1]))
"""


def test_background_commands_run_preloaded_at_once_with_their_variables_and_signals(
        tmp_path, session_environment):
    env = {"TF_CONFIG": '{"task": {}}', "TMPDIR": str(tmp_path)}
    slow, quick = (start_command("python", "-c", BACKGROUND, seconds, env=env)
                   for seconds in ("60", "0"))
    assert isinstance(slow, conftest._PreloadedCommand)
    output = quick.communicate(timeout=60)[0]
    assert quick.returncode == 0
    assert output == f'{{"task": {{}}}} {tmp_path} {quick.pid}\nto stderr\n'
    slow.send_signal(signal.SIGTERM)  # still running while the other ran and ended
    slow.communicate(timeout=60)
    assert slow.returncode == -signal.SIGTERM
