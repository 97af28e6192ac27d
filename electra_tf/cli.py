"""Shared pieces of the absl command-line apps: one-line errors instead of tracebacks."""

import sys

from absl import logging

from electra_tf.config import ConfigError
from electra_tf.finetuning.tasks import TaskDataError
from electra_tf.text.corpus import CorpusError
from electra_tf.text.vocab import VocabError

USER_ERRORS = (ConfigError, CorpusError, VocabError, TaskDataError)


def run_main(main):
    """Wraps an absl `main(argv)`: a user error prints `error: <message>` and exits 2."""

    def wrapped(argv):
        # TensorFlow logs every checkpoint write at INFO through absl; users need warnings.
        logging.set_verbosity(logging.WARNING)
        try:
            return main(argv)
        except USER_ERRORS as e:
            print(f"error: {e}", file=sys.stderr)
            sys.exit(2)

    return wrapped
