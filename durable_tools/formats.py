"""JSON Schema `format` checks that give the same verdict on every worker image.

jsonschema's default format checker checks a format only when an optional
package is importable: `date-time` and `time` with `rfc3339-validator`,
`hostname` with `fqdn`, `uri` with `rfc3987` or `rfc3986-validator`,
`idn-hostname` with `idna`, and so on. Workflow code that used it would
replay an old history differently on a worker image that gained or lost one
of them (a nondeterminism error, a stuck conversation). Answers to
interaction tools are checked in workflow code, so they use
`STDLIB_FORMAT_CHECKER` instead: a fixed set of checks written with the
standard library, the same everywhere. The set is what jsonschema checks
with no optional package installed (so recorded histories keep their
verdicts); every other format is not checked there.

| format | valid when |
|---|---|
| `date` | `YYYY-MM-DD` and a real calendar date (`datetime.date.fromisoformat`) |
| `email`, `idn-email` | contains `@` |
| `ipv4` | `ipaddress.IPv4Address` accepts it |
| `ipv6` | `ipaddress.IPv6Address` accepts it, without a `%scope` |
| `regex` | `re.compile` accepts it |
| `uuid` | `uuid.UUID` accepts it and it has hyphens at 8, 13, 18 and 23 |

A value that is not a string passes every check (JSON Schema's rule).
"""

from __future__ import annotations

import datetime
import ipaddress
import re
import uuid
from collections.abc import Mapping
from typing import Any

from jsonschema import FormatChecker

from durable_tools.errors import InvalidSchema
from durable_tools.schema import SchemaViolation, compile_schema

__all__ = ["STDLIB_FORMATS", "STDLIB_FORMAT_CHECKER", "check_answer"]

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)


def _date(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return bool(_DATE.fullmatch(value)) and bool(datetime.date.fromisoformat(value))


def _email(value: object) -> bool:
    return not isinstance(value, str) or "@" in value


def _ipv4(value: object) -> bool:
    return not isinstance(value, str) or bool(ipaddress.IPv4Address(value))


def _ipv6(value: object) -> bool:
    if not isinstance(value, str):
        return True
    return not ipaddress.IPv6Address(value).scope_id


def _regex(value: object) -> bool:
    return not isinstance(value, str) or bool(re.compile(value))


def _uuid(value: object) -> bool:
    if not isinstance(value, str):
        return True
    uuid.UUID(value)
    return all(value[position] == "-" for position in (8, 13, 18, 23))


_CHECKS: dict[str, tuple[Any, tuple[type[Exception], ...]]] = {
    "date": (_date, (ValueError,)),
    "email": (_email, ()),
    "idn-email": (_email, ()),
    "ipv4": (_ipv4, (ValueError,)),
    "ipv6": (_ipv6, (ValueError,)),
    "regex": (_regex, (re.error,)),
    "uuid": (_uuid, (ValueError, IndexError)),
}

STDLIB_FORMATS: tuple[str, ...] = tuple(sorted(_CHECKS))
"""The formats `STDLIB_FORMAT_CHECKER` checks; any other format is not checked."""


def _build() -> FormatChecker:
    checker = FormatChecker(formats=())
    for name, (check, raises) in _CHECKS.items():
        checker.checks(name, raises=raises)(check)  # pyright: ignore[reportUnknownMemberType]
    return checker


STDLIB_FORMAT_CHECKER: FormatChecker = _build()
"""A `jsonschema.FormatChecker` with exactly the `STDLIB_FORMATS` checks (module docstring)."""


def check_answer(answer_schema: Mapping[str, Any], value: Any) -> str | None:
    """Check an answer against an interaction tool's answer schema, as workflow code does.

    Formats are checked by `STDLIB_FORMAT_CHECKER` only, so the verdict does
    not depend on which packages the worker has installed.

    Args:
        answer_schema: The JSON Schema the answer must satisfy.
        value: The answer (JSON).

    Returns:
        `None` if the answer is valid, else the reason, e.g.
        `answer does not match the answer schema: $: 'tomorrow' is not a 'date'`.
    """
    try:
        compile_schema(
            answer_schema, what="answer schema", format_checker=STDLIB_FORMAT_CHECKER
        ).validate(value)
    except (SchemaViolation, InvalidSchema) as exc:
        return f"answer does not match the answer schema: {exc}"
    return None
