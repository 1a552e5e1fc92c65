"""The worker's log records, scrubbed by the same redactor as history and spans.

A provider's exception names what it was given: `Incorrect API key provided:
sk-...`, a URL with `?key=...`, a header dump with `Authorization: Bearer ...`.
The worker logs such exceptions (the model activity's `model turn N failed`,
a tool that raised, the SDK's `Completing activity as failed`), so every
record of the loggers it uses goes through `RedactingFilter`: its message
(`msg % args`), its traceback (formatted, scrubbed and kept as `exc_text`,
with `exc_info` cleared so every handler prints the scrubbed text) and its
stack are passed through `durable_tools.redact.worker_redactor().scrub`.

`install_log_redaction()` (called by `DurableToolsPlugin` when it is made and
again when its worker starts) adds one filter to each logger of the worker
and of the libraries it drives (`LOGGER_PREFIXES`), as the last filter of
each, after `ExpectedFailureFilter` (`activities/failure_log.py`), which
reads `exc_info` to tell an expected failure from a bug. A logger filter sees
only the records of its own logger, so it is added to every logger that
exists under those names, and to the ones named in `LOGGERS` before they
exist. To scrub other libraries' records too, add a `RedactingFilter` to
your own handlers (`handler.addFilter(RedactingFilter())`).
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable
from typing import Final

from durable_tools.activities.failure_log import SDK_ACTIVITY_LOGGER
from durable_tools.redact import worker_redactor

__all__ = ["LOGGERS", "LOGGER_PREFIXES", "RedactingFilter", "install_log_redaction"]

LOGGER_PREFIXES: Final[tuple[str, ...]] = (
    "durable_tools",
    "temporalio",
    "mcp",
    "openai",
    "anthropic",
    "httpx",
    "httpcore",
)
"""Loggers (and their children) whose records are scrubbed."""

LOGGERS: Final[tuple[str, ...]] = (
    SDK_ACTIVITY_LOGGER,
    "temporalio.workflow",
    "temporalio.worker._activity",
    "temporalio.worker._workflow",
    "temporalio.worker._workflow_instance",
    "durable_tools.mcp",
)
"""Loggers given the filter even before anything logs to them."""


class RedactingFilter(logging.Filter):
    """Scrubs a record's message, traceback and stack; never drops a record.

    Args:
        redact: The text scrubber (default: `worker_redactor().scrub`, the
            process's secrets as they are when the record is made).
    """

    def __init__(self, redact: Callable[[str], str] | None = None) -> None:
        super().__init__()
        self._redact = redact

    def filter(self, record: logging.LogRecord) -> bool:
        """Replace the record's message, `exc_text` and `stack_info` with scrubbed text."""
        redact = self._redact or worker_redactor().scrub
        try:
            message = record.getMessage()
        except Exception:  # a bad format or argument: logging reports it itself
            return True
        scrubbed = redact(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and record.exc_info[0] is not None:
            text = record.exc_text or "".join(traceback.format_exception(*record.exc_info))
            # Handlers print `exc_text` when set and format `exc_info` only
            # when it is not: without `exc_info` none can print the raw text.
            record.exc_text, record.exc_info = redact(text.rstrip("\n")), None
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


def _loggers(prefixes: Iterable[str]) -> list[logging.Logger]:
    names = set(prefixes) | set(LOGGERS)
    existing = logging.Logger.manager.loggerDict
    names |= {
        name
        for name, logger in list(existing.items())
        if isinstance(logger, logging.Logger)
        and any(name.startswith(f"{prefix}.") for prefix in prefixes)
    }
    return [logging.getLogger(name) for name in sorted(names)]


def install_log_redaction(prefixes: Iterable[str] = LOGGER_PREFIXES) -> None:
    """Make a `RedactingFilter` the last filter of each logger under `prefixes`.

    Calling it again adds no second filter; it moves the filter back to the
    end and reaches the loggers made since.

    Args:
        prefixes: Logger names whose loggers and children get the filter
            (default `LOGGER_PREFIXES`).
    """
    for logger in _loggers(tuple(prefixes)):
        kept = [f for f in logger.filters if not isinstance(f, RedactingFilter)]
        logger.filters = [*kept, RedactingFilter()]
