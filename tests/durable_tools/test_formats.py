"""Answer formats get the same verdict whatever packages the worker has (issue 9, item 6).

jsonschema's default format checker checks `date-time` only when
`rfc3339-validator` imports, `idn-hostname` only when `idna` does, and so on;
`STDLIB_FORMAT_CHECKER`, which workflow code uses, checks a fixed set with
the standard library. The verdicts are computed in fresh interpreters where
`rfc3339_validator` is importable (a fake in `sys.modules`) or not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from durable_tools.formats import STDLIB_FORMAT_CHECKER, STDLIB_FORMATS, check_answer

CASES: list[tuple[str, str]] = [
    ("date-time", "not a time"),
    ("date-time", "2026-11-22T10:00:00Z"),
    ("time", "25:99"),
    ("date", "2026-02-30"),
    ("date", "2026-11-22"),
    ("ipv4", "1.2.3"),
    ("email", "nobody"),
    ("uuid", "not-a-uuid"),
]

# Runs in a fresh interpreter: argv[1] is "present" (an importable
# `rfc3339_validator`, a fake that accepts text ending in Z) or "absent"
# (importing it fails).
_VERDICTS = """
import json, sys, types
if sys.argv[1] == "absent":
    sys.modules["rfc3339_validator"] = None
else:
    fake = types.ModuleType("rfc3339_validator")
    fake.validate_rfc3339 = lambda text: text.endswith("Z")
    sys.modules["rfc3339_validator"] = fake
from durable_tools.formats import check_answer
from durable_tools.schema import SchemaViolation, compile_schema

def default_verdict(schema, value):
    try:
        compile_schema(schema).validate(value)
        return True
    except SchemaViolation:
        return False

cases = json.loads(sys.argv[2])
print(json.dumps({
    "workflow": [check_answer({"type": "string", "format": f}, v) is None for f, v in cases],
    "default": [default_verdict({"type": "string", "format": f}, v) for f, v in cases],
}))
"""


def _verdicts(mode: str) -> dict[str, list[bool]]:
    out = subprocess.run(
        [sys.executable, "-c", _VERDICTS, mode, json.dumps(CASES)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def test_the_workflow_verdict_does_not_depend_on_installed_packages() -> None:
    present, absent = _verdicts("present"), _verdicts("absent")
    # The default checker's verdict changes with the packages (what broke replay) ...
    assert present["default"] != absent["default"]
    # ... the workflow's does not, and it is the fixed one.
    assert (
        present["workflow"]
        == absent["workflow"]
        == [
            True,  # date-time: not checked in workflow code
            True,
            True,  # time: not checked
            False,
            True,
            False,
            False,
            False,
        ]
    )


@pytest.mark.parametrize(
    ("fmt", "valid", "invalid"),
    [
        (
            "date",
            ["2026-11-22", "2024-02-29"],
            ["2026-02-30", "22.11.2026", "2026-1-2", "２０２６-11-22"],
        ),
        ("email", ["a@b", "ana@example.com"], ["ana.example.com"]),
        ("idn-email", ["ana@例え.jp"], ["ana"]),
        ("ipv4", ["127.0.0.1"], ["1.2.3", "256.1.1.1", "01.2.3.4"]),
        ("ipv6", ["::1", "2001:db8::2"], ["fe80::1%eth0", "1.2.3.4", "::g"]),
        ("regex", ["^a+$"], ["(", "[a-"]),
        (
            "uuid",
            ["123e4567-e89b-12d3-a456-426614174000"],
            ["123e4567e89b12d3a456426614174000", "x"],
        ),
    ],
)
def test_each_stdlib_format(fmt: str, valid: list[str], invalid: list[str]) -> None:
    schema: dict[str, Any] = {"format": fmt}
    assert [check_answer(schema, v) for v in valid] == [None] * len(valid)
    for value in invalid:
        problem = check_answer(schema, value)
        assert problem is not None and f"is not a '{fmt}'" in problem


def test_non_strings_pass_every_format_and_unknown_formats_are_not_checked() -> None:
    for fmt in STDLIB_FORMATS:
        assert check_answer({"format": fmt}, 5) is None
    assert check_answer({"format": "hostname"}, "-") is None
    assert set(STDLIB_FORMAT_CHECKER.checkers) == set(STDLIB_FORMATS)


def test_other_schema_violations_are_reported() -> None:
    problem = check_answer({"type": "string", "enum": ["yes", "no"]}, "maybe")
    assert problem is not None and problem.startswith("answer does not match the answer schema: $")
