"""`durable-tools run`, `pending` (all conversations) and the printed commands, as subprocesses.

A `durable-tools worker` subprocess serves `cli_app:app` plus a `--toolkit`
on the session dev server; every command runs as its own process, as a
user types it.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import re
import shlex
import signal
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_process import Running, cli
from temporalio.testing import WorkflowEnvironment

from durable_tools.approvals import call_digest


@dataclass(frozen=True)
class Served:
    """A worker subprocess: where it polls."""

    address: str
    task_queue: str

    def opts(self) -> list[str]:
        """`--address` and `--task-queue` for `run`."""
        return ["--address", self.address, "--task-queue", self.task_queue]


@pytest.fixture(scope="module")
async def served(
    dev_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Served]:
    address = dev_env.client.service_client.config.target_host
    task_queue = f"cli-run-{uuid.uuid4().hex[:8]}"
    log = tmp_path_factory.mktemp("worker") / "stderr.log"
    worker = await Running.start(
        "worker",
        "--app",
        "cli_app:app",
        "--toolkit",
        "agent_support:TOOLKIT",
        "--address",
        address,
        "--task-queue",
        task_queue,
        "--graceful-shutdown",
        "2",
        "--allow-offline-models",
        stderr=log,
    )
    try:
        line = await worker.wait_for_line("worker polling", timeout=60)
        assert "agent_support:TOOLKIT" in line and "default" in line
        assert "offline models (test, scripted:FILE): allowed" in line
        yield Served(address, task_queue)
    finally:
        worker.send_signal(signal.SIGTERM)
        done = await worker.finish(timeout=30)
        assert done.code == 0, done.stderr
        assert "worker stopped" in done.stdout


def directed(*turns: list[tuple[str, str, dict[str, object]]]) -> str:
    """A prompt the `directed` model plays: each argument is one turn's (id, tool, args)."""
    return json.dumps({"turns": [[list(c) for c in turn] for turn in turns]})


async def test_run_shows_tool_calls_and_the_final_answer(served: Served) -> None:
    prompt = directed(
        [("c1", "get_weather", {"city": "Oslo"})],
        [("c2", "finish", {"output": {"forecast": "mild"}})],
    )
    done = await cli("run", "--model", "directed", *served.opts(), prompt)
    assert done.code == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r'→ get_weather \{"city": "Oslo"\} \(c1\) started', out), out
    assert re.search(r'✓ get_weather \(c1\) ok: \{"city":"Oslo","temp_c":21\}', out), out
    assert "final answer" in out and '"forecast": "mild"' in out, out
    assert out.index("started") < out.index("✓ get_weather") < out.index("final answer")
    assert done.stderr == ""


async def test_run_with_a_text_answer_returns_and_says_how_to_continue(served: Served) -> None:
    prompt = directed([("c1", "boom", {})])
    done = await cli("run", "--model", "directed", "--id", wf := _id(), *served.opts(), prompt)
    assert done.code == 0, done.stdout + done.stderr
    assert re.search(r"✗ boom \(c1\) failed: \w+: ", done.stdout), done.stdout
    assert "answer: done (directed)" in done.stdout
    assert f"durable-tools send {wf} MESSAGE --address {served.address}" in done.stdout


async def test_run_shows_retries_and_progress(served: Served) -> None:
    prompt = directed(
        [("c1", "unsteady", {})],
        [("c2", "slow_heartbeat", {"seconds": 2.5})],
    )
    done = await cli("run", "--model", "directed", "--toolkit", "cli", *served.opts(), prompt)
    assert done.code == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(r"↻ unsteady \[c1\] attempt 2 of 3; last failure: .*upstream flaked", out), out
    assert "✓ unsteady (c1) ok: ok on attempt 3" in out
    assert re.search(r'… slow_heartbeat \[c2\] progress: \{"left": [\d.]+\}', out), out
    assert "✓ slow_heartbeat (c2) ok" in out


async def test_run_shows_a_retry_on_the_call_that_was_retried(served: Served) -> None:
    # Two calls to one tool, both running while the second one is retried.
    prompt = directed([("c1", "fetch", {"key": "slow"}), ("c2", "fetch", {"key": "bad"})])
    done = await cli("run", "--model", "directed", "--toolkit", "cli", *served.opts(), prompt)
    assert done.code == 0, done.stdout + done.stderr
    out = done.stdout
    assert re.search(
        r"↻ fetch \[c2\] attempt 2 of 3; last failure: ConnectionError: .*fetching bad", out
    ), out
    assert "↻ fetch [c1]" not in out and out.count("↻") == 1, out
    assert "✓ fetch (c1) ok: got slow" in out and "✓ fetch (c2) ok: got bad" in out, out


async def test_run_shows_progress_on_the_call_that_sent_it(served: Served) -> None:
    # Two calls to one tool, both running for longer than STARTED_DELAY, each with progress.
    prompt = directed([("c1", "count", {"to": 12}), ("c2", "count", {"to": 8})])
    done = await cli("run", "--model", "directed", "--toolkit", "cli", *served.opts(), prompt)
    assert done.code == 0, done.stdout + done.stderr
    out = done.stdout
    for call_id in ("c1", "c2"):
        lines = [line for line in out.splitlines() if f"… count [{call_id}] progress" in line]
        assert lines, out
        # Each progress line shows that call's own value (the tool echoes its call id).
        assert all(f'"call": "{call_id}"' in line for line in lines), lines
        assert out.index(f"… count [{call_id}]") < out.index(f"✓ count ({call_id}) ok")
    assert "✓ count (c1) ok: counted to 12" in out and "✓ count (c2) ok: counted to 8" in out


async def read_until(process: Running, needle: str, seen: str = "", timeout: float = 30) -> str:
    """Raw stdout (not lines: streamed text ends no line) until `needle` shows."""
    assert process.process.stdout is not None
    async with asyncio.timeout(timeout):
        while needle not in seen:
            chunk = await process.process.stdout.read(4096)
            assert chunk, f"exited before {needle!r}:\n{seen}"
            seen += chunk.decode()
    return seen


async def test_follow_prints_text_deltas_as_they_arrive(served: Served, tmp_path: Path) -> None:
    # The model streams "before the gate;" then waits for the gate file: seeing
    # that half printed before the file exists shows the text as it arrives.
    gate, wf = tmp_path / "gate", _id()
    started = await cli(
        "run", "--detach", "--id", wf, "--model", "gated", *served.opts(), str(gate)
    )
    assert started.code == 0, started.stdout + started.stderr
    follow = await Running.start("follow", wf, "--address", served.address)
    try:
        out = await read_until(follow, "before the gate;")
        assert "after it" not in out and "turn_finished" not in out
        gate.touch()
        out = await read_until(follow, "turn_finished", out)
    finally:
        await follow.kill()
        await cli("cancel", wf, "--address", served.address)
    assert re.search(
        r"\d+ \S+ model_text_delta turn 1 attempt 1: before the gate; after it\n", out
    ), out
    assert out.count("model_text_delta") == 1, out  # the second delta continued the line


async def test_run_detach_returns_at_once_with_the_id(served: Served) -> None:
    wf = _id()
    began = time.monotonic()
    done = await cli("run", "--detach", "--id", wf, "--model", "directed", *served.opts(), "hello")
    assert done.code == 0, done.stdout + done.stderr
    assert time.monotonic() - began < 15  # no waiting for the conversation
    assert f"started conversation {wf}" in done.stdout
    assert f"durable-tools history {wf} --address {served.address}" in done.stdout
    status = await cli("status", wf, "--address", served.address)
    assert status.code == 0, status.stderr


async def test_pending_without_an_id_lists_a_paused_conversation(served: Served) -> None:
    """A pause waits for a person too: `pending` lists it beside approvals."""
    wf = _id()
    prompt = directed([("p1", "pause", {"reason": "waiting for the invoice"})])
    done = await cli("run", "--detach", "--id", wf, "--model", "directed", *served.opts(), prompt)
    assert done.code == 0, done.stdout + done.stderr
    assert await _wait_listed(served.address, wf, count=0) == "pause"
    resumed = await cli("resume", wf, "-m", "invoice is in", "--as", "ana", *served.opts()[:2])
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert f"resumed {wf}" in resumed.stdout
    history = await cli("history", wf, "--address", served.address)
    assert "invoice is in" in history.stdout, history.stdout


async def test_approval_command_printed_by_run_lets_it_finish(served: Served) -> None:
    wf = _id()
    prompt = directed([("c1", "refund", {"order": "A-7", "amount": 500})])
    run = await Running.start("run", "--id", wf, "--model", "directed", *served.opts(), prompt)
    try:
        line = await run.wait_for_line("approve: ", timeout=60)
        command = line.split("approve: ", 1)[1].strip()
        # The printed command carries the digest of the call shown above it.
        digest = call_digest("refund", "c1", {"order": "A-7", "amount": 500})
        assert (
            command == f"durable-tools approve {wf} c1 --hash {digest} --address {served.address}"
        )
        deny = await run.wait_for_line("deny: ", timeout=5)
        assert f"durable-tools deny {wf} c1 --hash {digest} --reason REASON" in deny

        listed = await _wait_listed(served.address, wf)
        assert "approval" in listed

        unknown = await cli("approve", wf, "call_nope", "--address", served.address)
        assert "'call_nope'" in unknown.error_line() and unknown.code == 1

        approved = await cli(shell=command + " --as ana")
        assert approved.code == 0, approved.stdout + approved.stderr
        assert f"approved c1 in {wf}" in approved.stdout

        done = await run.finish(timeout=60)
        assert done.code == 0, done.stdout + done.stderr
        assert "✓ refund (c1) ok: refunded 500 on A-7" in done.stdout
        assert "answer: done (directed)" in done.stdout

        again = await cli(shell=command)  # the decision was already made
        assert "not waiting for a decision" in again.error_line()
    finally:
        await run.kill()


async def _wait_listed(address: str, wf: str, *, count: int = 1) -> str:
    """`pending` without an id, until it lists `wf` (visibility is eventually consistent).

    `count`: the calls it must show waiting (a pause counts none).
    """
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = await cli("pending", "--address", address, "--json")
        assert listed.code == 0, listed.stderr
        rows = {row["workflow_id"]: row for row in json.loads(listed.stdout)}
        if wf in rows:
            assert rows[wf]["pending"] == count
            table = await cli("pending", "--address", address)
            assert table.code == 0 and wf in table.stdout, table.stdout
            assert f"durable-tools pending WORKFLOW_ID --address {address}" in table.stdout
            return ", ".join(rows[wf]["kinds"])
        await asyncio.sleep(0.3)
    raise AssertionError(f"`pending` did not list {wf} within 30 s")


async def test_ctrl_c_detaches_and_the_conversation_goes_on(served: Served) -> None:
    wf = _id()
    prompt = directed([("c1", "refund", {"order": "A-8", "amount": 1})])
    run = await Running.start("run", "--id", wf, "--model", "directed", *served.opts(), prompt)
    try:
        await run.wait_for_line("approve: ", timeout=60)
        run.send_signal(signal.SIGINT)
        done = await run.finish(timeout=20)
        assert done.code == 130, done.stdout + done.stderr
        assert f"detached: conversation {wf} goes on" in done.stdout
        assert "Traceback" not in done.stderr
        pending = await cli("pending", wf, "--address", served.address, "--json")
        assert json.loads(pending.stdout)["approvals"][0]["call_id"] == "c1"
    finally:
        await run.kill()


async def test_answer_command_printed_by_run(served: Served) -> None:
    wf = _id()
    prompt = directed([("c1", "ask", {"question": "Proceed?"})])
    run = await Running.start("run", "--id", wf, "--model", "directed", *served.opts(), prompt)
    try:
        field = await run.wait_for_line("  - (answer)", timeout=60)
        assert 'one of "yes", "no"' in field, field  # the answer's fields, not minified JSON
        line = await run.wait_for_line("  answer: ", timeout=60)
        command = line.split("answer: ", 1)[1].strip()
        digest = call_digest("ask", "c1", {"question": "Proceed?"})
        assert command == (
            f"durable-tools answer {wf} c1 VALUE --hash {digest} --address {served.address}"
        )
        answered = await cli(*shlex.split(command.replace("VALUE", "'\"yes\"'"))[1:])
        assert answered.code == 0, answered.stdout + answered.stderr
        done = await run.finish(timeout=60)
        assert done.code == 0, done.stdout + done.stderr
        assert "✓ ask (c1) ok: yes" in done.stdout, done.stdout
    finally:
        await run.kill()


@pytest.mark.skipif(
    importlib.util.find_spec("durable_tools.models.registry") is None,
    reason="the model registry (durable_tools.models.registry) is not there yet",
)
async def test_run_with_the_test_model(served: Served) -> None:
    done = await cli("run", "--toolkit", "weather", *served.opts(), "Weather in Oslo?")
    assert done.code == 0, done.stdout + done.stderr
    assert "→ get_weather" in done.stdout and "✓ get_weather" in done.stdout, done.stdout
    assert "answer" in done.stdout


def _id() -> str:
    return f"cli-run-{uuid.uuid4().hex[:8]}"


async def test_history_after_run_lists_the_transcript(served: Served, tmp_path: Path) -> None:
    wf = _id()
    done = await cli(
        "run",
        "--id",
        wf,
        "--model",
        "directed",
        *served.opts(),
        directed([("c1", "get_weather", {"city": "Rome"})]),
    )
    assert done.code == 0, done.stderr
    history = await cli("history", wf, "--address", served.address, "--json")
    assert history.code == 0, history.stderr
    tools = [i["tool"] for i in json.loads(history.stdout) if i["role"] == "tool"]
    assert tools == ["get_weather"]


async def test_run_passes_model_settings_to_the_model(served: Served) -> None:
    done = await cli(
        "run",
        "--model",
        "settings-echo",
        "--setting",
        "temperature=0.2",
        "--setting",
        'stop=["END"]',
        "--setting",
        "reasoning_effort=low",
        "--setting",
        'seed="7"',
        "--setting",
        "tool_choice=required",
        *served.opts(),
        "hi",
    )
    assert done.code == 0, done.stdout + done.stderr
    # JSON where it parses (0.2, a list, the string "7"), else the text as a string.
    expected = {
        "reasoning_effort": "low",
        "seed": "7",
        "stop": ["END"],
        "temperature": 0.2,
        "tool_choice": "required",
    }
    assert f"answer: {json.dumps(expected, sort_keys=True)}" in done.stdout, done.stdout


async def test_run_refuses_a_setting_the_adapter_renders_with_one_line(served: Served) -> None:
    done = await cli("run", "--setting", "tools=[]", *served.opts(), "hi")
    line = done.error_line()
    assert done.code == 2
    assert "--setting: ['tools'] cannot be set" in line
    malformed = await cli("run", "--setting", "temperature", *served.opts(), "hi")
    assert malformed.code == 2
    assert "use key=value" in malformed.error_line()
