"""`make demo` (`python -m examples.demo_story`) and the example application it runs.

The demo runs as a subprocess, as `make demo` runs it: an embedded dev server,
real `mcp-server-time`, two worker lifetimes. Its tools are also tested on
their own: `write_file` refuses paths outside its workspace, `check_service`
fails on attempts 1 and 2 and succeeds on attempt 3.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from durable_tools import Failure, Ok, ToolCall, ToolContext
from durable_tools.executor import execute_prepared, prepare_call
from examples.demo import WORKSPACE_ENV, make_kit
from examples.demo_story import DEMO_TIMEOUT, tool_activity_events

ROOT = Path(__file__).resolve().parents[2]


def _run_demo(workspace: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1", WORKSPACE_ENV: str(workspace)}
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, "-m", "examples.demo_story"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT + 20,
    )
    return completed, time.monotonic() - started


def _in_order(text: str, markers: list[str]) -> None:
    """Each marker occurs in `text`, after the previous one."""
    at = 0
    for marker in markers:
        found = text.find(marker, at)
        assert found >= 0, f"{marker!r} not found after position {at}:\n{text}"
        at = found + len(marker)


# ------------------------------------------------------------- the demo


def test_demo_tells_the_story_and_exits_0(tmp_path: Path) -> None:
    completed, elapsed = _run_demo(tmp_path)
    out = completed.stdout
    assert completed.returncode == 0, out + completed.stderr
    assert completed.stderr == "", completed.stderr  # no log noise, no tracebacks
    workflow_id = re.search(r"conversation (demo-[0-9a-f]{8}) started", out)
    assert workflow_id, out
    wf = workflow_id.group(1)
    address = re.search(r"Temporal dev server on (127\.0\.0\.1:\d+)", out)
    assert address, out
    addr = address.group(1)
    report = tmp_path / "reports" / "status.md"
    _in_order(
        out,
        [
            # the MCP server answers, the flaky tool is retried
            '✓ time__get_current_time (call now) {"timezone":"Europe/Paris","datetime":"',
            '✓ check_service (call billing) {"service":"billing","status":"ok","attempt":3}',
            "retried: check_service failed twice and succeeded on attempt 3",
            # the approval, with the command a person would run
            f"Approval needed in {wf}",
            # ... with the digest of the call shown (no confirmation needed)
            f"a person would run: durable-tools approve {wf} write --hash ",
            f" --address {addr}",
            # no worker while the approval is sent
            "worker 1 stopped: no worker polls task queue 'demo'",
            "approval sent with no worker running: client API approve(",
            "the durable `decide` signal",
            # a new worker runs the write and reaches the MCP server again
            "worker 2 started",
            f'✓ write_file (call write) {{"path":"reports/status.md","file":"{report}"',
            '✓ time__get_current_time (call saved) {"timezone":"Etc/UTC"',
            # the question
            f"a person would run: durable-tools answer {wf} ask "
            f'\'{{"recipient": "ops@example.com"}}\' --hash ',
            f" --address {addr}",
            "answered with the client API",
            # the end, templated from the tools' outputs
            "status: finished after 4 model turns",
            "final answer: Done. At ",
            f"billing was ok after 3 attempts; the report is {report} (saved at ",
            "and goes to ops@example.com.",
            # Temporal's own record, tools as activity types with summaries
            f"inspect it: temporal workflow show -w {wf} --address {addr}",
            "activityType.name: tool.time__get_current_time",
            "userMetadata.summary: time__get_current_time(timezone='Europe/Paris')",
            "activityType.name: tool.check_service",
            "userMetadata.summary: check_service(name='billing')",
            "(of [13] tool.check_service)\n    attempt: 3",
            "lastFailure.message: billing: connection reset by peer (attempt 2)",
            "activityType.name: tool.write_file",
            "userMetadata.summary: write_file(path='reports/status.md'",
            "done in ",
        ],
    )
    final = re.search(r"final answer: Done\. At (\S+) \(Europe/Paris\)", out)
    assert final, out
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0[12]:00", final.group(1))
    assert "{{" not in out.split("final answer:")[1].splitlines()[0]  # every template resolved
    assert report.read_text() == "# Status\n\nbilling: ok (answered on the third attempt)\n"
    assert elapsed < DEMO_TIMEOUT
    print(f"demo wall time: {elapsed:.1f} s")


def test_demo_failure_is_one_line_and_exit_1(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    completed, _ = _run_demo(blocker / "workspace")  # write_file cannot create it
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert completed.stderr.startswith("demo failed: DemoError: write_file did not succeed: ")
    assert "NotADirectoryError" in completed.stderr
    assert len(completed.stderr.strip().splitlines()) == 1, completed.stderr
    assert "worker 1 stopped" in completed.stdout  # it got as far as the restart


# ------------------------------------------------------------- the tools


async def _call(
    workspace: Path, tool_name: str, attempt: int = 1, **arguments: object
) -> Ok | Failure:
    kit = make_kit(workspace)
    call = ToolCall(call_id="c1", name=tool_name, arguments=json.dumps(arguments))
    prepared = prepare_call(kit, call)
    assert not isinstance(prepared, Failure), prepared
    context = ToolContext(call_id="c1", tool=tool_name, idempotency_key="wf/c1", attempt=attempt)
    return await execute_prepared(prepared, context=context, emit=lambda _: None)


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "reports/../../outside.txt", "{tmp}/outside.txt", "link/outside.txt"],
)
async def test_write_file_refuses_paths_outside_the_workspace(tmp_path: Path, path: str) -> None:
    path = path.format(tmp=tmp_path)  # an absolute path
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "link").symlink_to(tmp_path)  # a symlink pointing out of the workspace
    result = await _call(workspace, "write_file", path=path, content="x")
    assert isinstance(result, Failure)
    assert result.kind == "outside_workspace"
    assert path in result.reason
    assert not (tmp_path / "outside.txt").exists()


async def test_write_file_refuses_the_workspace_itself(tmp_path: Path) -> None:
    result = await _call(tmp_path, "write_file", path=".", content="x")
    assert isinstance(result, Failure)
    assert result.kind == "invalid_path"


async def test_write_file_writes_inside_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "workspace"  # created on the first write
    result = await _call(workspace, "write_file", path="a/b.md", content="héllo")
    assert isinstance(result, Ok), result
    target = workspace / "a" / "b.md"
    assert result.value == {"path": "a/b.md", "file": str(target), "bytes": 6}
    assert target.read_text() == "héllo"


def test_write_file_needs_approval(tmp_path: Path) -> None:
    assert make_kit(tmp_path).tools["write_file"].needs_approval is True


async def test_check_service_fails_twice_then_succeeds(tmp_path: Path) -> None:
    for attempt in (1, 2):
        failed = await _call(tmp_path, "check_service", attempt=attempt, name="billing")
        assert isinstance(failed, Failure)
        assert failed.kind == "execution_error"
        assert failed.reason == (
            f"ConnectionError: billing: connection reset by peer (attempt {attempt})"
        )
    ok = await _call(tmp_path, "check_service", attempt=3, name="billing")
    assert isinstance(ok, Ok), ok
    assert ok.value == {"service": "billing", "status": "ok", "attempt": 3}


def test_check_service_retry_policy_allows_the_third_attempt(tmp_path: Path) -> None:
    tool = make_kit(tmp_path).tools["check_service"]
    assert tool.retry.max_attempts >= 3
    assert tool.retry.initial_interval * 2 < 5  # two retries keep the demo short


# ------------------------------------------------------ temporal show parsing

_DETAILED = """\
Progress:
--------------- [5] ActivityTaskScheduled ---------------
activityType.name: model.turn
userMetadata.summary: reporter, turn 1

--------------- [13] ActivityTaskScheduled ---------------
activityId: 3
activityType.name: tool.check_service
input[0].idempotency_key: wf/c2
userMetadata.summary: check_service(name='billing')

--------------- [14] ActivityTaskStarted ---------------
attempt: 1
scheduledEventId: 5

--------------- [19] ActivityTaskStarted ---------------
attempt: 3
lastFailure.applicationFailureInfo.type: ConnectionError
lastFailure.message: billing: connection reset by peer (attempt 2)
lastFailure.stackTrace:   File "x.py", line 1
scheduledEventId: 13

--------------- [20] ActivityTaskCompleted ---------------
result[0].result.value.attempt: 3
scheduledEventId: 13

--------------- [21] WorkflowTaskScheduled ---------------
attempt: 1

Results:
  Status          COMPLETED
"""


def test_tool_activity_events_keeps_tool_activities_only() -> None:
    assert tool_activity_events(_DETAILED) == [
        "[13] ActivityTaskScheduled",
        "    activityType.name: tool.check_service",
        "    userMetadata.summary: check_service(name='billing')",
        "[19] ActivityTaskStarted  (of [13] tool.check_service)",
        "    attempt: 3",
        "    lastFailure.applicationFailureInfo.type: ConnectionError",
        "    lastFailure.message: billing: connection reset by peer (attempt 2)",
        "[20] ActivityTaskCompleted  (of [13] tool.check_service)",
    ]
