"""Errors a user can act on.

The CLI turns each of these into one line and an exit code, with no traceback: a
``UsageError`` (bad config, bad flag, bad run directory: the fix is in the user's
hands) exits with 2, any other ``TokformerError`` (the run itself failed) with 1.
Library callers catch them like any exception.
"""

from __future__ import annotations


class TokformerError(Exception):
    """Base of every error tokformer reports to a user; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class UsageError(TokformerError):
    """The request itself is wrong: fix the input and run again."""

    exit_code = 2


class ConfigError(UsageError):
    """A config value, key, file or combination is invalid."""


class DataError(UsageError):
    """Input data is missing or malformed."""


class TrainingError(TokformerError):
    """Training started but could not continue (e.g. the loss became NaN)."""


class CheckpointError(TokformerError):
    """A checkpoint cannot be read (truncated, corrupt), does not fit the model, or cannot be written."""


class Interrupted(KeyboardInterrupt):
    """A stop a signal asked for, raised where the work can stop cleanly (between documents, not
    inside a library's internals). A ``KeyboardInterrupt``, so every cleanup that handles Ctrl-C
    handles it too; ``signum`` is the signal, so the CLI exits as a process that signal stopped does
    (128 + it: 143 for SIGTERM)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum
