"""MCP input-required results as durable questions, on the Temporal dev server.

The test server's `paint` (written with the `mcp` SDK's `Resolve`/`Elicit`)
asks for a form answer in two rounds. Through a conversation:

* each round is a question of the call in `pending` (the server's message,
  the requested schema, the round) and in the event stream; answers are
  checked against the schema strictly (a wrong answer is rejected, the
  question stays); the call is retried with the answers and the exact
  `requestState`, and the server runs its tool body exactly once;
* decline and cancel reach the server as such;
* an expired `requestState` restarts the call once, then is a `Failure`;
* the `requestState` appears in no event, no `pending` answer and no log
  record (it sits only in the tool activities' results and inputs);
* a question past its deadline ends the call `expired`, a cancelled
  conversation ends it `interrupted`: one output each.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_support import http_test_server
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from tracing_support import RAW, tracer_provider
from typer.testing import CliRunner
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import ConversationOptions, PendingInteraction
from durable_tools.errors import DecisionRejected
from durable_tools.mcp import McpServerConfig
from durable_tools.worker.cli import app
from durable_tools.worker.plugin import sandbox_runner
from durable_tools.workflows.agent_workflow import StrictAgentWorkflow

SERVER = Path(__file__).with_name("mcp_test_server.py")
runner = CliRunner()


def _turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps({"turns": [[list(c) for c in calls]]})


def _log_events(log: Path, event: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["event"] == event]


def _server(log: Path, *extra: str) -> McpServerConfig:
    return McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log), *extra],
        trust_annotations=True,  # `paint` is not destructive: no approval first
    )


@asynccontextmanager
async def _harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, server: McpServerConfig
) -> AsyncIterator[Harness]:
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=[server]) as h:
        yield h


def _painted(content: str) -> Any:
    """What `paint` returned (the SDK wraps a `str` result as `{"result": ...}`)."""
    return json.loads(json.loads(content)["result"])


async def question(h: Harness, workflow_id: str, call_id: str, round_: int) -> PendingInteraction:
    """The call's pending question of input round `round_`."""

    async def probe() -> PendingInteraction | None:
        pending = await h.conversations.pending(workflow_id)
        for item in pending.interactions:
            asked = item.input_request
            if item.call_id == call_id and asked is not None and asked.round == round_:
                return item
        return None

    return await eventually(probe, what=f"question of round {round_}")


async def request_states(h: Harness, workflow_id: str) -> list[str]:
    """Every `requestState` the tool activities returned, from the history."""
    history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    converter = h.client.data_converter.payload_converter
    states: list[str] = []
    for event in history.events:
        attrs = event.activity_task_completed_event_attributes
        if not attrs.HasField("result"):
            continue
        for payload in attrs.result.payloads:
            value = converter.from_payload(payload)
            if isinstance(value, dict):
                asked = value.get("input_required")  # pyright: ignore[reportUnknownMemberType]
                if isinstance(asked, dict) and asked.get("request_state"):  # pyright: ignore
                    states.append(str(asked["request_state"]))  # pyright: ignore
    return states


async def test_two_rounds_answered_through_the_client_api(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    tracer_provider()  # tracing on: the spans of every activity are read below
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(_turns(("p", "notes__paint", {"thing": "fence"})))
        first = await question(h, workflow_id, "p", 1)
        assert first.input_request is not None
        assert first.input_request.message == "What is your name?"
        assert first.input_request.server == "notes"
        assert first.answer_schema is not None
        assert first.answer_schema["required"] == ["name"]
        assert (await h.conversations.status(workflow_id)).state == "waiting"
        # Strictly checked against the requested schema: the question stays.
        with pytest.raises(DecisionRejected, match="answer schema"):
            await h.conversations.answer(
                workflow_id, "p", {"name": 7}, arguments_hash=first.arguments_hash, wait=True
            )
        with pytest.raises(DecisionRejected, match="answer schema"):
            await h.conversations.answer(
                workflow_id, "p", {"nom": "Ada"}, arguments_hash=first.arguments_hash, wait=True
            )
        await h.conversations.answer(
            workflow_id,
            "p",
            {"name": "Ada"},
            arguments_hash=first.arguments_hash,
            answered_by="ada",
            wait=True,
        )
        second = await question(h, workflow_id, "p", 2)
        assert second.input_request is not None
        assert second.input_request.message == "Which color, Ada?"
        assert second.arguments_hash != first.arguments_hash
        # An answer bound to round 1 does not apply to round 2.
        with pytest.raises(DecisionRejected):
            await h.conversations.answer(
                workflow_id, "p", {"color": "red"}, arguments_hash=first.arguments_hash, wait=True
            )
        pending_text = (await h.conversations.pending(workflow_id)).model_dump_json()
        await h.conversations.answer(
            workflow_id,
            "p",
            {"color": "green", "coats": 2},
            arguments_hash=second.arguments_hash,
            wait=True,
        )
        outputs = await h.wait_outputs(workflow_id, "p")
        await h.wait_assistant_text(workflow_id, "done (directed)")
        events, _ = await h.conversations.retained_events(workflow_id)
        states = await request_states(h, workflow_id)
        history = await h.client.get_workflow_handle(workflow_id).fetch_history()
    # The rounds replay deterministically, in the strict sandbox too (invariant 6).
    replayed = await Replayer(
        workflows=[StrictAgentWorkflow],
        data_converter=pydantic_data_converter,
        workflow_runner=sandbox_runner(strict=True),
    ).replay_workflow(history, raise_on_replay_failure=False)
    assert replayed.replay_failure is None
    assert _painted(outputs["p"].content) == {
        "thing": "fence",
        "name": {"name": "Ada"},
        "color": {"color": "green", "coats": 2},
    }
    finals = _log_events(log, "call")
    assert len(finals) == 1 and finals[0]["key"] == f"{workflow_id}/p"
    asked = [e for e in events if e.kind == "question_asked" and e.call_id == "p"]
    assert [e.text for e in asked] == ["What is your name?", "Which color, Ada?"]
    assert asked[0].answer_schema == first.answer_schema
    answered = [e for e in events if e.kind == "question_answered" and e.call_id == "p"]
    assert [e.outcome for e in answered] == ["accept", "accept"]
    assert answered[0].sent_by == "ada"
    finished = [e for e in events if e.kind == "tool_call_finished" and e.call_id == "p"]
    assert [e.outcome for e in finished] == ["ok"]
    # The opaque state went back to the server, and nowhere else.
    assert len(states) == 2 and all(len(s) > 20 for s in states)
    events_text = "\n".join(e.model_dump_json() for e in events)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    spans_text = "\n".join(
        repr(
            (
                s.name,
                dict(s.attributes or {}),
                [(e.name, dict(e.attributes or {})) for e in s.events],
            )
        )
        for s in RAW.get_finished_spans()
    )
    assert "notes__paint" in spans_text
    for state in states:
        assert state not in events_text
        assert state not in pending_text
        assert state not in logged
        assert state not in spans_text


async def test_decline_and_cancel_reach_the_server(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(_turns(("p", "notes__paint", {"thing": "door"})))
        first = await question(h, workflow_id, "p", 1)
        # A decline carries no value.
        with pytest.raises(DecisionRejected, match="no value"):
            await h.conversations.answer(
                workflow_id,
                "p",
                {"name": "x"},
                arguments_hash=first.arguments_hash,
                action="decline",
                wait=True,
            )
        await h.conversations.answer(
            workflow_id, "p", None, arguments_hash=first.arguments_hash, action="decline"
        )
        second = await question(h, workflow_id, "p", 2)
        assert second.input_request is not None
        assert second.input_request.message == "Which color, stranger?"
        await h.conversations.answer(
            workflow_id, "p", None, arguments_hash=second.arguments_hash, action="cancel"
        )
        outputs = await h.wait_outputs(workflow_id, "p")
    assert _painted(outputs["p"].content) == {
        "thing": "door",
        "name": "decline",
        "color": "cancel",
    }
    assert len(_log_events(log, "call")) == 1


async def test_an_expired_request_state_restarts_the_call_once(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log, "--state-ttl", "1")) as h:
        workflow_id = await h.start(_turns(("p", "notes__paint", {"thing": "gate"})))
        first = await question(h, workflow_id, "p", 1)
        await asyncio.sleep(1.5)  # the server's requestState lives 1 s
        await h.conversations.answer(
            workflow_id, "p", {"name": "Bo"}, arguments_hash=first.arguments_hash
        )
        # Restarted: asked again from round 1 (a new question, a new digest).
        again = await question(h, workflow_id, "p", 1)
        assert again.requested_at > first.requested_at
        await asyncio.sleep(1.5)
        await h.conversations.answer(
            workflow_id, "p", {"name": "Bo"}, arguments_hash=again.arguments_hash
        )
        outputs = await h.wait_outputs(workflow_id, "p")
        await h.wait_assistant_text(workflow_id, "done (directed)")
    assert outputs["p"].is_error
    assert "requestState" in outputs["p"].content
    assert _log_events(log, "call") == []


async def test_a_question_past_its_deadline_expires_the_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(
            _turns(("p", "notes__paint", {"thing": "roof"})),
            options=ConversationOptions(approval_deadline=2, search_attributes=True),
        )
        await question(h, workflow_id, "p", 1)
        outputs = await h.wait_outputs(workflow_id, "p")
        assert (await h.conversations.pending(workflow_id)).interactions == []
        events, _ = await h.conversations.retained_events(workflow_id)
    assert outputs["p"].is_error and "expired" in outputs["p"].content
    finished = [e for e in events if e.kind == "tool_call_finished" and e.call_id == "p"]
    assert [e.outcome for e in finished] == ["expired"]
    assert _log_events(log, "call") == []


async def test_a_cancelled_conversation_interrupts_the_waiting_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(_turns(("p", "notes__paint", {"thing": "wall"})))
        await question(h, workflow_id, "p", 1)
        await h.conversations.cancel(workflow_id)
        items = await h.conversations.history(workflow_id)
    outputs = [i for i in items if getattr(i, "call_id", None) == "p" and hasattr(i, "is_error")]
    assert len(outputs) == 1 and outputs[0].is_error
    assert json.loads(outputs[0].content)["error"] == "interrupted"
    assert _log_events(log, "call") == []


async def test_two_rounds_answered_through_the_cli(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    address = dev_env.client.service_client.config.target_host
    log = tmp_path / "server.jsonl"

    async def cli(*args: str) -> Any:
        argv = [*args, "--address", address, "--timeout", "20"]
        result = await asyncio.to_thread(runner.invoke, app, argv)
        assert result.exit_code == 0, result.output
        return result

    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(_turns(("p", "notes__paint", {"thing": "shed"})))
        await question(h, workflow_id, "p", 1)
        shown = " ".join((await cli("pending", workflow_id)).stdout.split())
        assert "What is your name?" in shown and "round 1" in shown and "--decline" in shown
        listed = json.loads((await cli("pending", workflow_id, "--json")).stdout)
        (asked,) = listed["interactions"]
        assert asked["input_request"]["message"] == "What is your name?"
        assert asked["answer_schema"]["required"] == ["name"]
        await cli("answer", workflow_id, "p", '{"name": "Cy"}', "--yes", "--by", "cy")
        await question(h, workflow_id, "p", 2)
        second = " ".join((await cli("pending", workflow_id)).stdout.split())
        assert "Which color, Cy?" in second and "round 2" in second
        declined = await cli("answer", workflow_id, "p", "--decline", "--yes")
        assert "declined p" in declined.stdout
        outputs = await h.wait_outputs(workflow_id, "p")
        states = await request_states(h, workflow_id)
    painted = _painted(outputs["p"].content)
    assert painted == {"thing": "shed", "name": {"name": "Cy"}, "color": "decline"}
    assert len(_log_events(log, "call")) == 1
    for state in states:
        assert state not in shown and state not in second and state not in json.dumps(listed)


async def test_a_new_message_supersedes_the_question_and_interrupts_the_call(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(
            _turns(("p", "notes__paint", {"thing": "car"})),
            options=ConversationOptions(messages_supersede="anyone", search_attributes=True),
        )
        asked = await question(h, workflow_id, "p", 1)
        await h.conversations.send(workflow_id, "never mind", sent_by="dee")
        outputs = await h.wait_outputs(workflow_id, "p")
        # The question is gone; an answer to it now is refused.
        assert (await h.conversations.pending(workflow_id)).interactions == []
        with pytest.raises(DecisionRejected):
            await h.conversations.answer(
                workflow_id, "p", {"name": "x"}, arguments_hash=asked.arguments_hash, wait=True
            )
        events, _ = await h.conversations.retained_events(workflow_id)
    assert json.loads(outputs["p"].content)["error"] == "interrupted"
    assert "new user message" in outputs["p"].content
    finished = [e.outcome for e in events if e.kind == "tool_call_finished" and e.call_id == "p"]
    assert finished == ["interrupted"]
    assert _log_events(log, "call") == []


async def test_two_rounds_over_streamable_http(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DT_TEST_MCP_TOKEN", "tok-input-rounds")
    log = tmp_path / "http.jsonl"
    with http_test_server(log, "DT_TEST_MCP_TOKEN") as url:
        server = McpServerConfig(
            name="notes", url=url, token_env="DT_TEST_MCP_TOKEN", trust_annotations=True
        )
        async with _harness(dev_env, task_queue, tmp_path, server) as h:
            workflow_id = await h.start(_turns(("p", "notes__paint", {"thing": "kite"})))
            first = await question(h, workflow_id, "p", 1)
            await h.conversations.answer(
                workflow_id, "p", {"name": "Flo"}, arguments_hash=first.arguments_hash, wait=True
            )
            second = await question(h, workflow_id, "p", 2)
            await h.conversations.answer(
                workflow_id, "p", None, arguments_hash=second.arguments_hash, action="cancel"
            )
            outputs = await h.wait_outputs(workflow_id, "p")
    painted = _painted(outputs["p"].content)
    assert painted == {"thing": "kite", "name": {"name": "Flo"}, "color": "cancel"}
    calls = [r for r in _log_events(log, "request") if r.get("method") == "tools/call"]
    assert len(calls) == 3  # the first call and two retries, one per round
    assert len(_log_events(log, "call")) == 1


async def test_two_requests_of_one_round_are_asked_in_turn(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _server(log)) as h:
        workflow_id = await h.start(_turns(("o", "notes__order", {"item": "hat"})))
        seen: list[tuple[int, int, str]] = []
        for value in ({"name": "Hal"}, {"size": 7}):

            async def probe(n: int = len(seen)) -> PendingInteraction | None:
                pending = await h.conversations.pending(workflow_id)
                for item in pending.interactions:
                    if item.input_request is not None and item.input_request.index == n + 1:
                        return item
                return None

            asked = await eventually(probe, what="the next request of the round")
            assert asked.input_request is not None
            request = asked.input_request
            seen.append((request.round, request.index, request.message))
            assert request.count == 2
            await h.conversations.answer(
                workflow_id, "o", value, arguments_hash=asked.arguments_hash, wait=True
            )
        outputs = await h.wait_outputs(workflow_id, "o")
    assert seen == [(1, 1, "What is your name?"), (1, 2, "Which size?")]
    assert _painted(outputs["o"].content) == {
        "item": "hat",
        "name": {"name": "Hal"},
        "size": {"size": 7},
    }
    assert len(_log_events(log, "call")) == 1
