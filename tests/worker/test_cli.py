"""The `durable-tools` CLI: one clear line and a non-zero exit on bad input, and the demo.

Bad-input tests need no server (a closed loopback port stands in for a
missing one). The live tests run the CLI against a real embedded dev server
and a worker serving `examples.support:app`, both on their own thread and
event loop, because the CLI runs its own `asyncio.run`.
"""

from __future__ import annotations

import asyncio
import base64
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from typer.testing import CliRunner

from durable_tools._wire import ConversationInput
from durable_tools.worker.cli import app
from durable_tools.worker.dev_server import DevServer
from durable_tools.worker.runner import load_app, run_worker

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def assert_one_line_error(result: Any, code: int | None = None) -> str:
    assert result.exit_code != 0, result.output
    if code is not None:
        assert result.exit_code == code, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.output
    return lines[0]


def test_answer_with_invalid_json_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["answer", "ticket-1", "call_1", "{not json"])
    line = assert_one_line_error(result, code=2)
    assert "not valid JSON" in line


@pytest.mark.parametrize(
    "command",
    [
        ["approve", "ticket-1", "call_1"],
        ["deny", "ticket-1", "call_1", "--reason", "no"],
        ["approve", "ticket-1", "call_1", "--signal", "--hash", "ab" * 32],
        ["answer", "ticket-1", "call_1", '{"order_id": "A-1001"}'],
        ["pending", "ticket-1"],
        ["history", "ticket-1"],
        ["status", "ticket-1"],
        ["send", "ticket-1", "hello"],
        ["start", "ticket-1", "--model", "m", "--toolkit", "t", "--message", "hi"],
    ],
    ids=lambda c: "-".join(c[:1] + [a for a in c[1:] if a.startswith("--")]),
)
def test_commands_against_a_closed_port_fail_fast_with_one_line(command: list[str]) -> None:
    address = f"127.0.0.1:{closed_port()}"
    started = time.monotonic()
    result = runner.invoke(app, [*command, "--address", address, "--timeout", "10"])
    line = assert_one_line_error(result, code=1)
    assert f"cannot connect to Temporal at {address}" in line
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_colon_here", "invalid app spec"),
        ("no_such_module_xyz:app", "cannot import module"),
        ("examples.support:nope", "has no attribute"),
        ("examples.support:kit", "not an application"),
    ],
)
def test_worker_with_a_bad_app_is_one_line_and_exit_2(spec: str, expected: str) -> None:
    result = runner.invoke(app, ["worker", "--app", spec, "--address", "127.0.0.1:1"])
    line = assert_one_line_error(result, code=2)
    assert expected in line


def test_worker_with_a_malformed_decision_key_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DURABLE_TOOLS_DECISION_KEYS", "k1:not base64!")
    result = runner.invoke(
        app, ["worker", "--app", "examples.support:app", "--address", "127.0.0.1:1"]
    )
    line = assert_one_line_error(result, code=2)
    assert "DURABLE_TOOLS_DECISION_KEYS" in line and "KEY_ID:BASE64" in line


def test_worker_against_a_closed_port_is_one_line() -> None:
    address = f"127.0.0.1:{closed_port()}"
    result = runner.invoke(app, ["worker", "--app", "examples.support:app", "--address", address])
    line = assert_one_line_error(result, code=1)
    assert f"cannot connect to Temporal at {address}" in line


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--key-env", "DT_NO_SUCH_KEY_VAR", "--key-id", "k1"], "holds no key"),
        (["--key-env", "HOME"], "--key-env needs --key-id"),
        # Issue 23: a 16-byte HMAC key was accepted.
        (["--key-env", "DT_SHORT_KEY", "--key-id", "k1"], "has 16 bytes"),
        (["--key-env", "DT_NOT_BASE64", "--key-id", "k1"], "is not KEY_ID:BASE64"),
    ],
)
def test_a_bad_signing_key_is_refused_before_connecting(
    extra: list[str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DT_SHORT_KEY", base64.b64encode(b"k" * 16).decode())
    monkeypatch.setenv("DT_NOT_BASE64", "not base64!")
    address = f"127.0.0.1:{closed_port()}"
    command = ["approve", "ticket-1", "call_1", "--hash", "ab" * 32, "--address", address]
    line = assert_one_line_error(runner.invoke(app, [*command, *extra]), code=2)
    assert expected in line


def test_unknown_command_option_is_a_usage_error() -> None:
    result = runner.invoke(app, ["approve", "ticket-1"])  # CALL_ID missing
    assert result.exit_code == 2
    assert "Traceback" not in result.output


# --------------------------------------------------------------------- live


class Live:
    """An embedded dev server and a worker on a background thread."""

    def __init__(self) -> None:
        self.address = ""
        self.task_queue = f"cli-{uuid.uuid4().hex[:8]}"
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported by start()
            self.error = exc
            self.ready.set()

    async def _serve(self) -> None:
        application = load_app("examples.support:app")
        async with DevServer(headless=True) as server:
            self.address = server.address
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            await run_worker(
                server.address,
                "default",
                self.task_queue,
                application.toolkits,
                application.models,
                graceful_shutdown_timeout=2,
                handle_signals=False,
                stop=self._stop,
                on_ready=lambda _: self.ready.set(),
            )

    def start(self) -> None:
        self._thread.start()
        assert self.ready.wait(60), "the dev server and worker did not start within 60 s"
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)

    def cli(self, *args: str, task_queue: bool = False, input: str | None = None) -> Any:
        extra = ["--address", self.address, "--timeout", "20"]
        if task_queue:
            extra += ["--task-queue", self.task_queue]
        return runner.invoke(app, [*args, *extra], input=input)


@pytest.fixture(scope="module")
def live() -> Iterator[Live]:
    server = Live()
    server.start()
    try:
        yield server
    finally:
        server.stop()


def wait_for_approval(live: Live, workflow_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = live.cli("pending", workflow_id, "--json")
        assert result.exit_code == 0, result.output
        approvals = json.loads(result.stdout)["approvals"]
        if approvals:
            return approvals[0]
        time.sleep(0.1)
    raise AssertionError("no pending approval within 30 s")


def pending_json(live: Live, workflow_id: str) -> dict[str, Any]:
    result = live.cli("pending", workflow_id, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_unknown_workflow_id_is_one_line(live: Live) -> None:
    result = live.cli("pending", "no-such-conversation")
    line = assert_one_line_error(result, code=1)
    assert "'no-such-conversation' does not exist" in line


def test_unknown_namespace_is_one_line(live: Live) -> None:
    for command in (
        ["pending", "x", "--address", live.address, "--namespace", "nope"],
        ["worker", "--app", "examples.support:app", "--address", live.address, "-n", "nope"],
    ):
        result = runner.invoke(app, command)
        line = assert_one_line_error(result, code=1)
        assert "namespace 'nope' does not exist" in line
        assert "polling" not in result.stdout


def test_query_without_a_worker_times_out_with_one_line(live: Live) -> None:
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = runner.invoke(
        app,
        ["start", workflow_id, "--model", "m", "--toolkit", "t", "--address", live.address]
        + ["--task-queue", "nobody-polls-this"],
    )
    assert started.exit_code == 0, started.output
    began = time.monotonic()
    command = ["pending", workflow_id, "--address", live.address, "--timeout", "2"]
    result = runner.invoke(app, command)
    line = assert_one_line_error(result, code=1)
    assert "no answer within 2 s" in line and "--signal" in line
    assert time.monotonic() - began < 10


def test_start_puts_settings_into_the_agent_configuration(live: Live) -> None:
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = runner.invoke(
        app,
        ["start", workflow_id, "--model", "m", "--toolkit", "t", "--address", live.address]
        + ["--task-queue", "nobody-polls-this", "--setting", "temperature=0.2"]
        + ["--setting", "reasoning_effort=low"],
    )
    assert started.exit_code == 0, started.output

    async def recorded_settings() -> dict[str, Any]:
        client = await Client.connect(live.address, data_converter=pydantic_data_converter)
        handle = client.get_workflow_handle(workflow_id)
        history = await handle.fetch_history()
        payloads = history.events[0].workflow_execution_started_event_attributes.input.payloads
        [conversation] = await client.data_converter.decode(payloads, [ConversationInput])
        await handle.terminate("test over")
        return conversation.agents["default"].settings

    assert asyncio.run(recorded_settings()) == {"temperature": 0.2, "reasoning_effort": "low"}


def test_cli_round_trip_with_rejected_decisions(live: Live) -> None:
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = live.cli(
        "start",
        workflow_id,
        "--model",
        "scripted",
        "--toolkit",
        "support",
        "--message",
        "Please refund order A-1002",
        task_queue=True,
    )
    assert started.exit_code == 0, started.output
    approval = wait_for_approval(live, workflow_id)
    assert approval["tool"] == "refund"
    call_id = approval["call_id"]

    table = live.cli("pending", workflow_id)
    assert table.exit_code == 0 and call_id in table.stdout and "refund" in table.stdout

    unknown = live.cli("approve", workflow_id, "call_nope")
    assert "not waiting for a decision" in assert_one_line_error(unknown, code=1)

    forged = live.cli("approve", workflow_id, call_id, "--hash", "0" * 64)
    assert "arguments hash does not match" in assert_one_line_error(forged, code=1)

    not_a_question = live.cli("answer", workflow_id, call_id, '{"order_id": "A-1002"}')
    assert_one_line_error(not_a_question, code=1)

    # Without --hash or --yes the call is shown and must be confirmed.
    for answer in (None, "n\n"):
        refused = live.cli("approve", workflow_id, call_id, "--by", "ana", input=answer)
        assert "not confirmed; nothing was sent" in assert_one_line_error(refused, code=2)
        assert f"digest:    {approval['arguments_hash']}" in refused.stdout
    assert [a["call_id"] for a in pending_json(live, workflow_id)["approvals"]] == [call_id]

    approved = live.cli(
        "approve", workflow_id, call_id, "--by", "ana", "--reason", "damaged", input="y\n"
    )
    assert approved.exit_code == 0, approved.output
    shown = approved.stdout
    assert "tool:      refund" in shown and '"order_id": "A-1002"' in shown
    assert "summary:   refund(order_id='A-1002'" in shown
    assert "approved refund(order_id='A-1002'" in shown

    again = live.cli("approve", workflow_id, call_id)
    assert_one_line_error(again, code=1)  # already decided, or the conversation has ended

    result = live.cli("result", workflow_id)
    assert result.exit_code == 0, result.output
    output = json.loads(result.stdout)["output"]
    assert output["resolution"] == "refunded" and output["amount_cents"] == 3450

    history = live.cli("history", workflow_id, "--json")
    assert history.exit_code == 0, history.output
    items = json.loads(history.stdout)
    refund_outputs = [i for i in items if i["role"] == "tool" and i["tool"] == "refund"]
    assert len(refund_outputs) == 1 and not refund_outputs[0]["is_error"]
    window = live.cli("history", workflow_id, "--json", "--start", "1", "--limit", "2")
    assert window.exit_code == 0, window.output
    assert json.loads(window.stdout) == items[1:3]

    status = live.cli("status", workflow_id)
    assert status.exit_code == 0 and "finished" in status.stdout

    # The event stream of the ended conversation: printed in order, then the command exits.
    followed = live.cli("follow", workflow_id)
    assert followed.exit_code == 0, followed.output
    lines = followed.stdout.splitlines()
    assert lines[0].split()[0] == "0" and lines[0].split()[2] == "message_received:"
    assert any(f"approval_decided {call_id} refund -> approved by ana" in line for line in lines)
    assert lines[-1].split()[2:] == ["conversation_finished", "->", "finished"]
    resumed = live.cli("follow", workflow_id, "--after", str(len(lines) - 2), "--json")
    assert [json.loads(line)["kind"] for line in resumed.stdout.splitlines()] == [
        "conversation_finished"
    ]


def test_deny_by_signal_reaches_the_model(live: Live) -> None:
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = live.cli(
        "start",
        workflow_id,
        "--model",
        "scripted",
        "--toolkit",
        "support",
        "--message",
        "Refund A-1001",
        task_queue=True,
    )
    assert started.exit_code == 0, started.output
    call_id = wait_for_approval(live, workflow_id)["call_id"]
    denied = live.cli(
        "deny", workflow_id, call_id, "--reason", "over the limit", "--signal", "--yes"
    )
    assert denied.exit_code == 0, denied.output
    assert "--yes: using the digest the worker reports" in denied.stdout
    result = live.cli("result", workflow_id)
    assert result.exit_code == 0, result.output
    output = json.loads(result.stdout)["output"]
    assert output["resolution"] == "refund_not_issued"
    assert "over the limit" in output["note"]


def test_pending_lists_a_questions_answer_fields(live: Live) -> None:
    """Issue 25, item 5: the answer schema as fields, not JSON in a narrow column."""
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = live.cli(
        "start",
        workflow_id,
        "--model",
        "scripted",
        "--toolkit",
        "support",
        "--message",
        "I want my money back",  # no order id: the model asks which order
        task_queue=True,
    )
    assert started.exit_code == 0, started.output
    deadline = time.monotonic() + 30
    while not (questions := pending_json(live, workflow_id)["interactions"]):
        assert time.monotonic() < deadline, "no question within 30 s"
        time.sleep(0.1)
    [question] = questions
    shown = runner.invoke(
        app,
        ["pending", workflow_id, "--address", live.address, "--timeout", "20"],
        env={"COLUMNS": "100"},
    )
    assert shown.exit_code == 0, shown.output
    lines = [line.strip() for line in shown.stdout.splitlines()]
    rows = [[cell.strip() for cell in line.replace("┃", "│").split("│")[1:-1]] for line in lines]
    assert f"Answer to {question['call_id']}" in lines
    assert ["field", "type", "required", "description", "constraints"] in rows
    assert ["order_id", "string", "yes", "", "pattern ^[A-Za-z]-[0-9]{3,}$"] in rows
    assert ["note", "string", "no", "", ""] in rows
    assert '"properties"' not in shown.stdout  # no JSON Schema text
    assert question["arguments_hash"][:20] in shown.stdout  # what `answer --hash` takes
    answer = ("answer", workflow_id, question["call_id"], '{"order_id": "A-1001"}')
    answered = live.cli(*answer, "--hash", question["arguments_hash"])
    assert answered.exit_code == 0, answered.output


def test_a_model_failure_is_shown_by_run_status_and_pending_and_retry_reruns_it(
    live: Live,
) -> None:
    """A toolkit this worker does not serve (e.g. during a rolling deploy)."""
    wf = f"model-failed-{uuid.uuid4().hex[:8]}"
    ran = live.cli("run", "--id", wf, "--toolkit", "not-served", "hello", task_queue=True)
    assert ran.exit_code == 1, ran.output
    assert "model turn 1 failed" in ran.output
    assert "no toolkit named 'not-served'" in ran.output
    assert f"durable-tools retry {wf}" in ran.output

    status = live.cli("status", wf)
    assert status.exit_code == 0, status.output
    assert "model_failed" in status.output and "no toolkit named" in status.output
    pending = live.cli("pending", wf)
    assert pending.exit_code == 0, pending.output
    assert "no toolkit named 'not-served'" in pending.output

    retried = live.cli("retry", wf, "--wait")
    assert retried.exit_code == 0, retried.output
    cancelled = live.cli("cancel", wf)
    assert cancelled.exit_code == 0, cancelled.output


def test_a_run_the_worker_refuses_cancels_the_conversation_it_started(live: Live) -> None:
    """Issue 25: a refused `run` exited 1 but left a conversation waiting in `model_failed`.

    This worker declares no agents, so an agent named without a model is
    refused (`AGENT_REFUSED`); a toolkit it lacks is not (the test above).
    """
    wf = f"refused-{uuid.uuid4().hex[:8]}"
    ran = live.cli("run", "--id", wf, "--agent", "suport", "hello", task_queue=True)
    assert ran.exit_code == 1, ran.output
    assert "model turn 1 failed" in ran.output
    assert f"conversation '{wf}' is cancelled" in ran.output
    assert "names no model" in ran.output

    status = live.cli("status", wf)
    assert status.exit_code == 0, status.output
    assert "cancelled" in status.output and "model_failed" not in status.output
    pending = live.cli("pending")
    assert pending.exit_code == 0, pending.output
    assert wf not in pending.output
    # An ended conversation takes no message: one line, exit 1.
    sent = live.cli("send", wf, "hello again")
    assert sent.exit_code == 1, sent.output
    assert sent.output.count("\n") == 1 and "has already ended" in sent.output, sent.output


def test_resume_and_retry_fail_when_the_conversation_cannot_take_them(live: Live) -> None:
    """Issue 25: they said "resumed" and exited 0 for a conversation that was not paused."""
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = live.cli(
        "start",
        workflow_id,
        "--model",
        "scripted",
        "--toolkit",
        "support",
        "--message",
        "Refund A-1001",
        task_queue=True,
    )
    assert started.exit_code == 0, started.output
    wait_for_approval(live, workflow_id)  # waiting for a decision: not paused, not failed

    resumed = live.cli("resume", workflow_id, "-m", "go on")
    line = assert_one_line_error(resumed, code=1)
    assert "not paused" in line and "'waiting'" in line
    retried = live.cli("retry", workflow_id)
    line = assert_one_line_error(retried, code=1)
    assert "not waiting after a model failure" in line
    # The durable signal forms stay, and say what they do.
    signalled = live.cli("resume", workflow_id, "--signal")
    assert signalled.exit_code == 0, signalled.output
    assert "resumes the pause, or the next one" in signalled.stdout

    # `follow --timeout` is how long to watch: the time running out is not a failure.
    followed = runner.invoke(
        app, ["follow", workflow_id, "--address", live.address, "--timeout", "2"]
    )
    assert followed.exit_code == 0, followed.output
    assert followed.stdout.splitlines()[0].split()[0] == "0"
    assert "stopped following after 2 s; the conversation goes on" in followed.stderr
    assert f"durable-tools follow {workflow_id} --after " in followed.stderr

    assert live.cli("cancel", workflow_id).exit_code == 0


def test_help_texts_show_their_brackets() -> None:
    """Issue 25: Rich read `[servers.NAME]` as markup and the help said "( tables)"."""
    shown = runner.invoke(app, ["worker", "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert "([servers.NAME] tables)" in shown.output
    # No option or command help holds a bracket Rich would take for a tag.
    import re

    import click
    import typer

    unescaped: list[str] = []

    def walk(command: click.Command, path: str) -> None:
        texts = [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]
        unescaped.extend(f"{path}: {t}" for t in texts if re.search(r"(?<!\\)\[[\w/#.]", t))
        if isinstance(command, click.Group):
            for name, sub in command.commands.items():
                walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "durable-tools")
    assert unescaped == []


def test_send_as_an_operator_and_history_shows_who_sent_each_message(live: Live) -> None:
    """Issue 23, item 2: `send --operator --by`, and `history` names the sender."""
    workflow_id = f"cli-{uuid.uuid4().hex[:8]}"
    started = live.cli(
        "start",
        workflow_id,
        "--model",
        "scripted",
        "--toolkit",
        "support",
        "--message",
        "Refund A-1001",
        task_queue=True,
    )
    assert started.exit_code == 0, started.output
    wait_for_approval(live, workflow_id)

    sent = live.cli("send", workflow_id, "hold the refund", "--operator", "--by", "ana")
    assert sent.exit_code == 0, sent.output
    assert "sent an operator's note from ana" in sent.stdout
    deadline = time.monotonic() + 30
    notes: list[dict[str, Any]] = []
    while not notes and time.monotonic() < deadline:
        history = live.cli("history", workflow_id, "--json")
        assert history.exit_code == 0, history.output
        notes = [i for i in json.loads(history.stdout) if i.get("operator")]
        time.sleep(0.1)
    assert notes == [
        {"role": "user", "text": "hold the refund", "sent_by": "ana", "operator": True}
    ]
    superseded = [
        i for i in json.loads(history.stdout) if i["role"] == "tool" and i.get("sent_by") == "ana"
    ]
    assert [i["failure_kind"] for i in superseded] == ["cancelled"]  # the approval it superseded
    shown = live.cli("history", workflow_id)
    assert shown.exit_code == 0, shown.output
    assert "operator note" in shown.stdout and "from ana" in shown.stdout
    assert live.cli("cancel", workflow_id, "--by", "carol").exit_code == 0
