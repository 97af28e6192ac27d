"""User errors: bad input that the user can fix, reported as one line, never a traceback.

Every command-line app catches `UserError` and prints `error: <message>` (exit status 2), so
each message names the bad input and the fix. Anything else is a bug and keeps its
traceback.
"""

import textwrap


def first_line(error, width: int = 200) -> str:
    """The first line of `error`'s message, shortened at a word boundary: a library's error
    quoted inside one of ours (never cut mid-word, as `host='api.` once was)."""
    lines = str(error).splitlines()
    return textwrap.shorten(lines[0], width, placeholder=" ...") if lines else ""


class UserError(ValueError):
    """Base of the errors a user can fix; the message says how."""


class ConfigError(UserError):
    """A config value, flag, run directory or model that cannot be used."""


class CorpusError(UserError):
    """A corpus that cannot be read."""


class VocabError(UserError):
    """A vocabulary that cannot be used."""


class TaskDataError(UserError):
    """Bad fine-tuning data; the message names the file and the line."""


def check_choice(name: str, value, choices) -> None:
    """Raises ConfigError naming `name`, its bad `value` and the allowed `choices`."""
    if value not in choices:
        raise ConfigError(f"{name}={value!r}; choose one of {', '.join(choices)}.")


class DownloadError(UserError):
    """A model that cannot be fetched; the message names the URL."""


class ChecksumError(DownloadError):
    """A download whose checksum does not match; nothing of it is cached."""
