"""Expected activity failures log one line; their tracebacks only at DEBUG.

A model turn that fails for a known reason (the provider answered 401, a
rate limit, a model spec without its API key) is no bug: a traceback says
nothing a person needs, and on the `durable-tools dev` console each failure
printed two, one from the model activity and one from the Temporal SDK's
activity worker ("Completing activity as failed", logged with `exc_info` at
WARNING). So the model activity logs an expected failure as one line
(`one_line`): at WARNING when a retry follows, else at DEBUG, since the
workflow then logs `model turn N failed (Type): message` at WARNING; the
traceback only at DEBUG. It marks the failure it raises (`mark_expected`), and
`ExpectedFailureFilter`, on the SDK's `temporalio.activity` logger, turns the
SDK's record of a marked failure into a DEBUG record, or drops it when that
logger does not log DEBUG.

Anything else a model adapter raises (a bug: `KeyError`, `TypeError`) keeps
both tracebacks at WARNING, as do tool failures.
"""

from __future__ import annotations

import logging
import weakref
from typing import Final

from temporalio.exceptions import ApplicationError

from durable_tools.errors import ConfigurationError

__all__ = [
    "MAX_LINE_CHARS",
    "SDK_ACTIVITY_LOGGER",
    "ExpectedFailureFilter",
    "expected_failure",
    "install_expected_failure_filter",
    "mark_expected",
    "one_line",
]

SDK_ACTIVITY_LOGGER: Final[str] = "temporalio.activity"
"""The logger of the SDK's activity worker, and of `temporalio.activity.logger`."""

_EXPECTED: weakref.WeakSet[BaseException] = weakref.WeakSet()
"""Failures an activity raised as expected (by identity, until they are collected)."""


def expected_failure(error: BaseException) -> bool:
    """Whether `error` is a known failure rather than a bug.

    Returns:
        True for an `ApplicationError` (what the provider adapters raise for
        every HTTP and connection error, `durable_tools.models.errors`) and a
        `ConfigurationError` (e.g. a model spec without its API key).
    """
    return isinstance(error, ApplicationError | ConfigurationError)


MAX_LINE_CHARS: Final[int] = 1_000
"""Characters of `one_line`'s text; the whole message is in the DEBUG traceback."""


def one_line(error: BaseException) -> str:
    """`error` as one line `Type: message`, e.g. `ProviderAuthentication: HTTP 401 ...`.

    Whitespace is collapsed and the text cut at `MAX_LINE_CHARS` (1,000)
    characters: a provider may answer with megabytes of text.
    """
    if isinstance(error, ApplicationError):
        kind, message = error.type or type(error).__name__, error.message
    else:
        kind, message = type(error).__name__, str(error)
    line = " ".join(f"{kind}: {message[: MAX_LINE_CHARS * 2]}".split())
    return line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…"


def mark_expected(failure: BaseException) -> None:
    """Mark `failure`, about to be raised by an activity, as expected (see the module docstring)."""
    _EXPECTED.add(failure)


class ExpectedFailureFilter(logging.Filter):
    """Makes a log record of a failure marked by `mark_expected` a DEBUG record.

    The record is kept, at DEBUG and with its traceback, when its logger
    logs DEBUG; otherwise it is dropped. Every other record passes unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Demote or drop the record of an expected failure; pass every other record."""
        error = record.exc_info[1] if record.exc_info else None
        if error is None or error not in _EXPECTED or record.levelno <= logging.DEBUG:
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


def install_expected_failure_filter() -> None:
    """Add one `ExpectedFailureFilter` to the SDK's activity logger (again: no change)."""
    logger = logging.getLogger(SDK_ACTIVITY_LOGGER)
    if not any(isinstance(f, ExpectedFailureFilter) for f in logger.filters):
        logger.addFilter(ExpectedFailureFilter())
