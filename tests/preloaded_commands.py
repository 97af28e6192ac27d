"""Runs the tests' commands in children forked from a process that has already imported
what every command imports (TensorFlow, Keras, keras-hub, tf-text), so that a command does
not pay for those imports again: 4-5 s of CPU each, against ~8 s for a tiny training
command's own work (2-core AVX2 EPYC).

Each command is still a process of its own, run as its script or `python -c` would run
it: its own TensorFlow runtime, flags, `__main__`, exit status and output. Forking is safe
here because this process never starts TensorFlow's runtime (it runs no op), and nothing
of ours is imported before the fork: a command imports `electra_tf` itself, as from a
shell. `conftest.run_command` sends only commands whose environment is the one this
process started with (TensorFlow reads some variables when it is imported) but for
variables read when used (`conftest.SET_IN_COMMAND`), set in the command's process. Its
runtime not started, a command still sets up logical devices or a cluster of workers.

Protocol: a JSON request per line on stdin, {"argv": [program, *args], "cwd",
"stdout": path, "stderr": path (may be the same path), "timeout": s, "env": variables
set (null: removed) in the command's process}; one line back on stdout, {"code": exit
status}, when the command has ended (killed by a signal: minus its number). With
"background": true the answer is {"pid"} at once, and {"wait": pid} later answers the
command's {"code"}: a test can signal a command, or run two at once.
"""

import atexit
import gc
import json
import os
import runpy
import signal
import sys
import tempfile
import threading
import traceback


def _exit_status(code) -> int:
    """The exit status Python gives `sys.exit(code)`."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _run(program: str, args: list) -> None:
    """`program args...` as the interpreter runs it: a script (console scripts are ones),
    or the Python interpreter with `-c code` or a script path."""
    if os.path.basename(program).startswith("python"):
        if args[0] == "-c":
            sys.argv, sys.path[0] = ["-c", *args[2:]], ""
            exec(compile(args[1], "<string>", "exec"), {"__name__": "__main__"})
            return
        program, args = args[0], args[1:]
    sys.argv = [program, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(program))
    runpy.run_path(program, run_name="__main__")


def _child(request: dict) -> None:
    """Runs the request's command in this (forked) process and exits with its status."""
    code = 1
    try:
        os.chdir(request["cwd"])
        for name, value in request.get("env", {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        tempfile.tempdir = None  # found again from TMPDIR when first needed
        written = os.O_WRONLY | os.O_CREAT | os.O_APPEND  # stdout and stderr may share a file
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, request["stdout"], written),
                                (2, request["stderr"], written)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        signal.alarm(request["timeout"])  # its default action ends the command
        code = 0
        _run(request["argv"][0], request["argv"][1:])
    except SystemExit as exit:
        code = _exit_status(exit.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        # What the interpreter does on its way out: wait for the command's threads, then
        # run its exit handlers.
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> None:
    import keras_hub  # noqa: F401  (with TensorFlow, Keras and tf-text)

    # The commands' full garbage collections leave out what this process imported, as the
    # tests' own do (conftest.pytest_collection_finish).
    gc.freeze()

    for line in sys.stdin:
        request = json.loads(line)
        pid = request.get("wait")
        if pid is None:
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _child(request)
            if request.get("background"):
                print(json.dumps({"pid": pid}), flush=True)
                continue
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"code": os.waitstatus_to_exitcode(status)}), flush=True)


if __name__ == "__main__":
    main()
