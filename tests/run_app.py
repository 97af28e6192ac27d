"""Runs one command-line app several times in one process, each as its own command line
would (flags parsed afresh, user errors as `error:` lines and exit status 2), and prints
each run's exit status and output as JSON. Saves a TensorFlow start-up per run.

  python tests/run_app.py electra_tf_cli.convert '[["--from", "official", ...], ...]'
"""

import contextlib
import importlib
import io
import json
import sys

from electra_tf_cli import common


def main(module_name, argv_lists):
    from absl import app, flags

    module = importlib.import_module(module_name)
    common.define(module)
    results = []
    for argv in json.loads(argv_lists):
        flags.FLAGS.unparse_flags()
        stdout, stderr = io.StringIO(), io.StringIO()
        code = 0
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                app.run(common.wrap(module.run), argv=[module_name, *argv])
            except SystemExit as e:
                code = e.code or 0
        results.append({"code": code, "stdout": stdout.getvalue(),
                        "stderr": stderr.getvalue()})
    print(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
