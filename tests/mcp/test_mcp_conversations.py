"""MCP tools in whole conversations on the Temporal dev server, with real servers.

* `mcp-server-time` (PyPI) over stdio through a conversation;
* the test server of `mcp_test_server.py` over stdio and over streamable HTTP
  with a bearer token from `token_env` that never reaches workflow history;
* a server killed in the middle of a call, and a call that hangs past its
  timeout: each ends as a Failure the model sees, and the next call works; the
  hanging call alone is cancelled (`notifications/cancelled`), a call beside
  it on the same session completes;
* arguments that violate the server's schema never reach the server;
* one handshake and one `tools/list` per server per worker across 20 calls.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_support import http_test_server
from temporalio.api.enums.v1 import EventType
from temporalio.testing import WorkflowEnvironment
from tracing_support import RAW, tracer_provider
from workflow_helpers import Harness, assistant_texts, eventually, running

from durable_tools.errors import ConfigurationError, DuplicateToolName
from durable_tools.mcp import IDEMPOTENCY_KEY_META, McpServerConfig, McpToolPolicy
from durable_tools.worker.plugin import DurableToolsPlugin

SERVER = Path(__file__).with_name("mcp_test_server.py")
BIN = Path(sys.executable).parent
TOKEN = "tok-3f9a1c-never-in-history"


def _turns(*turns: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    return json.dumps({"turns": [[list(c) for c in turn] for turn in turns]})


def _events(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _calls(log: Path, tool: str | None = None) -> list[dict[str, Any]]:
    return [e for e in _events(log) if e["event"] == "call" and (tool is None or e["tool"] == tool)]


def _stdio(log: Path, **fields: Any) -> McpServerConfig:
    """The test server over stdio, trusted unless `trust_annotations=False` is given
    (these tests are about transports and failures; test_mcp_trust.py is about trust)."""
    fields.setdefault("trust_annotations", True)
    return McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        **fields,
    )


@asynccontextmanager
async def _harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, *servers: McpServerConfig
) -> AsyncIterator[Harness]:
    async with running(
        dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=servers
    ) as harness:
        yield harness


@pytest.fixture
def http_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """The test server over streamable HTTP on 127.0.0.1, requiring `TOKEN`."""
    monkeypatch.setenv("DT_TEST_MCP_TOKEN", TOKEN)
    log = tmp_path / "http.jsonl"
    with http_test_server(log, "DT_TEST_MCP_TOKEN") as url:
        yield url, log


async def test_time_server_through_a_conversation(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    time_server = McpServerConfig(
        name="time", command=str(BIN / "mcp-server-time"), trust_annotations=True
    )
    async with _harness(dev_env, task_queue, tmp_path, time_server) as h:
        workflow_id = await h.start(
            _turns(
                [("now", "time__get_current_time", {"timezone": "Europe/Paris"})],
                [
                    (
                        "conv",
                        "time__convert_time",
                        {
                            "source_timezone": "Europe/Paris",
                            "time": "12:00",
                            "target_timezone": "Asia/Tokyo",
                        },
                    )
                ],
            )
        )
        outputs = await h.wait_outputs(workflow_id, "now", "conv")
        items = await h.wait_assistant_text(workflow_id, "done (directed)")
    now = json.loads(outputs["now"].content)
    assert now["timezone"] == "Europe/Paris" and "T" in now["datetime"]
    converted = json.loads(outputs["conv"].content)
    assert converted["target"]["timezone"] == "Asia/Tokyo"
    assert converted["target"]["datetime"].split("T")[1].startswith("20:00")
    assert "done (directed)" in assistant_texts(items)
    history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    types = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    assert "tool.time__get_current_time" in types and "tool.time__convert_time" in types


async def test_http_server_token_stays_on_the_worker(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, http_server: tuple[str, Path]
) -> None:
    url, log = http_server
    server = McpServerConfig(
        name="remote", url=url, token_env="DT_TEST_MCP_TOKEN", trust_annotations=True
    )
    async with _harness(dev_env, task_queue, tmp_path, server) as h:
        workflow_id = await h.start(
            _turns(
                [
                    ("sum", "remote__add", {"a": 2, "b": 40}),
                    ("rec", "remote__record", {"note": "hello"}),
                ]
            )
        )
        outputs = await h.wait_outputs(workflow_id, "sum", "rec")
        await h.wait_assistant_text(workflow_id, "done (directed)")
    assert json.loads(outputs["sum"].content) == {"result": 42}
    assert not outputs["rec"].is_error
    # The idempotency key travelled in `_meta`: workflow id / call id.
    keys = {c["tool"]: c["key"] for c in _calls(log)}
    assert keys == {"add": f"{workflow_id}/sum", "record": f"{workflow_id}/rec"}
    assert IDEMPOTENCY_KEY_META == "durable-tools/idempotency-key"
    # Without the token the server refuses (the secret is what authenticates).
    shown = subprocess.run(
        [str(BIN / "temporal"), "workflow", "show", "-w", workflow_id, "-o", "json"]
        + ["--address", dev_env.client.service_client.config.target_host],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert workflow_id in shown.stdout and "remote__add" in shown.stdout
    assert TOKEN not in shown.stdout
    assert "DT_TEST_MCP_TOKEN" not in shown.stdout


async def test_a_server_killed_mid_call_gives_interrupted_and_restarts(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _stdio(log)) as h:
        workflow_id = await h.start(
            _turns(
                [("slow", "notes__slow_record", {"note": "first", "seconds": 60})],
                [("again", "notes__record", {"note": "second"})],
            )
        )

        async def started() -> dict[str, Any] | None:
            return next(iter(_calls(log, "slow_record")), None)

        call = await eventually(started, what="the slow call reaching the server")
        os.kill(call["pid"], signal.SIGKILL)
        outputs = await h.wait_outputs(workflow_id, "slow", "again")
    slow, again = outputs["slow"], outputs["again"]
    assert slow.is_error and slow.failure_kind == "interrupted", slow
    assert "not idempotent" in slow.content
    assert not again.is_error, again
    # Not retried (at-most-once), and the next call ran on a restarted server.
    assert len(_calls(log, "slow_record")) == 1
    (second,) = _calls(log, "record")
    assert second["pid"] != call["pid"]
    assert len([e for e in _events(log) if e["event"] == "start"]) == 2


async def test_a_hanging_call_times_out_alone_and_the_next_call_works(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    server = _stdio(log, tool_policy={"slow_record": McpToolPolicy(call_timeout=1.5)})
    async with _harness(dev_env, task_queue, tmp_path, server) as h:
        workflow_id = await h.start(
            _turns(
                # Two calls in flight on the one session: only the hanging one ends.
                [
                    ("hang", "notes__slow_record", {"note": "stuck", "seconds": 600}),
                    ("beside", "notes__wait", {"seconds": 3.0}),
                ],
                [("next", "notes__add", {"a": 1, "b": 1})],
            )
        )
        outputs = await h.wait_outputs(workflow_id, "hang", "beside", "next")
        stats = h.plugin.mcp.stats()["notes"] if h.plugin.mcp else {}
        cancelled = [e for e in _events(log) if e["event"] == "notification"]
    hang, beside, following = outputs["hang"], outputs["beside"], outputs["next"]
    assert hang.is_error and hang.failure_kind == "timed_out", hang
    assert "1.5 s" in hang.content
    assert not beside.is_error and "waited 3 s" in beside.content, beside
    assert len(_calls(log, "wait")) == 1  # not interrupted and retried
    assert json.loads(following.content) == {"result": 2}
    # The server got `notifications/cancelled` for the hanging call's request,
    # and its one process and session served every call.
    (stuck,) = [c for c in _calls(log, "slow_record") if c["args"]["note"] == "stuck"]
    assert [e["request_id"] for e in cancelled] == [stuck["request_id"]]
    assert stats["starts"] == 1
    assert len([e for e in _events(log) if e["event"] == "start"]) == 1


async def test_mcp_requests_carry_a_trace_context_under_their_execute_tool_span(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    tracer_provider()  # tracing on: DurableToolsPlugin adds the interceptor
    log = tmp_path / "notes.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _stdio(log)) as h:
        workflow_id = await h.start(_turns([("sum", "notes__add", {"a": 1, "b": 2})]))
        await h.wait_outputs(workflow_id, "sum")
    [call] = _calls(log, "add")
    version, trace_id, span_id, flags = call["traceparent"].split("-")
    spans = RAW.get_finished_spans()
    [tool] = [
        s
        for s in spans
        if (s.attributes or {}).get("gen_ai.tool.call.id") == "sum"
        and (s.attributes or {}).get("gen_ai.conversation.id") == workflow_id
    ]
    assert tool.name == "execute_tool notes__add"
    assert (version, flags) == ("00", "01")
    assert int(trace_id, 16) == tool.context.trace_id
    # The mcp SDK's client span of the request, a child of `execute_tool`.
    [request] = [s for s in spans if s.context.span_id == int(span_id, 16)]
    assert request.parent is not None and request.parent.span_id == tool.context.span_id


async def test_arguments_violating_the_schema_never_reach_the_server(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _stdio(log)) as h:
        workflow_id = await h.start(
            _turns(
                [
                    ("bad", "notes__add", {"a": "one", "b": 2}),
                    ("missing", "notes__record", {}),
                    ("good", "notes__add", {"a": 1, "b": 2}),
                ]
            )
        )
        outputs = await h.wait_outputs(workflow_id, "bad", "missing", "good")
        calls_sent = h.plugin.mcp.stats()["notes"]["tools/call"] if h.plugin.mcp else -1
    assert outputs["bad"].failure_kind == "input_validation_error"
    assert "$.a" in outputs["bad"].content
    assert outputs["missing"].failure_kind == "input_validation_error"
    assert "note" in outputs["missing"].content
    assert not outputs["good"].is_error
    assert [c["args"] for c in _calls(log)] == [{"a": 1, "b": 2}]
    assert calls_sent == 1


async def test_one_handshake_per_server_per_worker_across_20_calls(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    turns = [[(f"c{t}-{i}", "notes__add", {"a": t, "b": i}) for i in range(5)] for t in range(4)]
    async with _harness(dev_env, task_queue, tmp_path, _stdio(log)) as h:
        workflow_id = await h.start(_turns(*turns))
        outputs = await h.wait_outputs(workflow_id, *(c[0] for turn in turns for c in turn))
        await h.wait_assistant_text(workflow_id, "done (directed)")
        assert h.plugin.mcp is not None
        stats = h.plugin.mcp.stats()["notes"]
    assert all(not o.is_error for o in outputs.values())
    assert len(_calls(log, "add")) == 20
    assert len([e for e in _events(log) if e["event"] == "start"]) == 1  # one server process
    assert stats["tools/call"] == 20
    assert stats["tools/list"] == 1
    assert stats.get("initialize", 0) + stats.get("server/discover", 0) == 1
    assert stats["starts"] == 1


async def test_approval_policy_comes_from_trusted_annotations(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _stdio(log)) as h:
        workflow_id = await h.start(
            _turns(
                [
                    ("del", "notes__delete_note", {"note": "x"}),
                    ("sum", "notes__add", {"a": 1, "b": 2}),
                ]
            )
        )
        outputs = await h.wait_outputs(workflow_id, "sum")  # read-only: no approval
        approval = await h.wait_approval(workflow_id, "del")  # destructive: approval
        assert _calls(log, "delete_note") == []
        await h.conversations.approve(
            workflow_id, "del", arguments_hash=approval.arguments_hash, decided_by="ops"
        )
        outputs = await h.wait_outputs(workflow_id, "del", "sum")
    assert not outputs["del"].is_error
    assert len(_calls(log, "delete_note")) == 1


async def test_policy_overrides_waive_approval(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    # Untrusted (the default): the operator's override still waives approval.
    server = _stdio(
        log,
        trust_annotations=False,
        tool_policy={"delete_note": McpToolPolicy(needs_approval=False)},
    )
    async with _harness(dev_env, task_queue, tmp_path, server) as h:
        workflow_id = await h.start(_turns([("del", "notes__delete_note", {"note": "x"})]))
        outputs = await h.wait_outputs(workflow_id, "del")
    assert not outputs["del"].is_error
    assert len(_calls(log, "delete_note")) == 1


async def _start_worker(
    dev_env: WorkflowEnvironment, task_queue: str, plugin: DurableToolsPlugin
) -> None:
    from temporalio.client import Client
    from temporalio.worker import Worker

    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    worker = Worker(client, task_queue=task_queue)
    await asyncio.wait_for(worker.run(), 30)


async def test_allow_listed_server_that_fails_stops_the_worker(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    broken = McpServerConfig(name="broken", command="/nonexistent/mcp-server", tools=["x"])
    plugin = DurableToolsPlugin(toolkits={}, models={}, mcp_servers=[broken])
    with pytest.raises(ConfigurationError, match="MCP server 'broken' did not start"):
        await _start_worker(dev_env, task_queue, plugin)


async def test_colliding_names_after_prefixing_stop_the_worker(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    one = _stdio(tmp_path / "a.jsonl", prefix="n")
    two = _stdio(tmp_path / "b.jsonl").model_copy(update={"name": "other", "prefix": "n"})
    plugin = DurableToolsPlugin(toolkits={}, models={}, mcp_servers=[one, two])
    with pytest.raises(DuplicateToolName) as caught:
        await _start_worker(dev_env, task_queue, plugin)
    assert caught.value.sources == ("MCP server 'notes'", "MCP server 'other'")
