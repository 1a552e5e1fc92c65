"""The worker's garbage collector settings (durable_tools/worker/collector.py; issue 26, item 2).

`tune` changes process-wide state, so every test that tunes runs in a
process of its own; the CLI's refusal of an unknown choice runs in process
(it stops before anything is tuned).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from durable_tools.worker import collector
from durable_tools.worker.cli import app

_TUNE = textwrap.dedent(
    """
    import gc, json, sys
    import durable_tools.worker.runner  # what a worker imports before it serves
    from durable_tools.worker import collector
    before = gc.get_threshold()
    line = collector.tune(sys.argv[1])
    print(json.dumps({"before": before, "after": gc.get_threshold(),
                      "frozen": gc.get_freeze_count(), "line": line}))
    """
)


def _tuned(choice: str) -> dict[str, object]:
    ran = subprocess.run(
        [sys.executable, "-c", _TUNE, choice],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    found: dict[str, object] = json.loads(ran.stdout)
    return found


def test_tuned_freezes_what_startup_built_and_raises_the_thresholds() -> None:
    found = _tuned("tuned")
    assert found["before"] == [700, 10, 10]  # Python 3.11's defaults
    assert found["after"] == list(collector.THRESHOLDS)
    frozen = found["frozen"]
    assert isinstance(frozen, int)
    # The worker's imports (the SDK, pydantic, the loop) are tens of thousands of containers.
    assert frozen > 10_000, frozen
    assert found["line"] == (
        f"garbage collector thresholds 7000/10/1, {frozen:,} startup objects frozen"
    )


def test_default_changes_nothing() -> None:
    found = _tuned("default")
    assert found["after"] == found["before"] == [700, 10, 10]
    assert found["frozen"] == 0
    assert found["line"] == "garbage collector thresholds 700/10/10"


def test_the_cli_refuses_an_unknown_collector_in_one_line() -> None:
    result = CliRunner().invoke(app, ["worker", "--collector", "off"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "error: --collector must be tuned or default, not 'off'"
    ]


# Environment values are non-empty (click ignores an empty one), without NUL
# or lone surrogates (an environment cannot hold them).
_VALUES = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    min_size=1,
    max_size=40,
).filter(lambda s: s not in collector.CHOICES)


@given(_VALUES)
def test_any_other_collector_value_from_the_environment_is_one_clear_line(value: str) -> None:
    result = CliRunner().invoke(app, ["worker"], env={collector.COLLECTOR_ENV: value})
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --collector must be tuned or default")
