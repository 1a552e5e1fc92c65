"""The README's Python code blocks run as written.

The first block is saved as `shop.py` and served by `durable-tools dev --app
shop:app`; the other blocks are the application's code, imported and called
here. The blocks connect to localhost:7233, where `dev` serves by default;
the test's `dev` serves a free port and that address is the one string changed
in the code that runs (7233 is one per machine: a developer's server or a test
suite running beside this one may hold it). The agent's model is
`openai:gpt-4o`: the worker's OpenAI SDK is pointed (with `OPENAI_BASE_URL`,
as the README's model table says) at a local server that replays recorded
Chat Completions answers, the only part replaced (a paid API). The model asks
for `lookup_order`, then `refund`, which waits until `approve_refunds()`
approves it, then answers.

The README's offline quickstart ("Try it offline, with no key") runs as
written too: its script saved as `shop_script.yaml`, its shell lines run as
commands (split as a shell splits them) with no API key in the environment.
The one change is again the address: `dev` is given free ports, and the other
commands find it through `DURABLE_TOOLS_ADDRESS`, which they read.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from durable_tools.client import Conversations
from durable_tools.transcript import AssistantMessage, ToolCallOutput
from durable_tools.worker.cli import dev_command
from durable_tools.worker.dev_server import free_port

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
README_ADDRESS = "localhost:7233"


def _blocks(language: str, text: str | None = None) -> list[str]:
    text = (ROOT / "README.md").read_text() if text is None else text
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.M | re.S)


def _python_blocks() -> list[str]:
    return _blocks("python")


def _section(heading: str) -> str:
    """The README's text under `heading` (a whole line), up to the next `##`/`###` heading."""
    text = (ROOT / "README.md").read_text()
    found = re.search(rf"^{re.escape(heading)}\n(.*?)(?=^#{{2,3}} )", text, re.M | re.S)
    assert found is not None, heading
    return found.group(1)


@contextlib.contextmanager
def _dev(
    argv: Callable[[], list[str]], cwd: Path, env: dict[str, str], log: Path
) -> Iterator[None]:
    """`durable-tools dev ...` in its own session until it serves, stopped on exit.

    `argv` is called for each attempt: a port picked free can be taken by a
    suite running beside this one before `dev` binds it, and `dev` then exits
    at once; it is started again on new ports, three times at most.
    """
    for attempt in range(3):
        with log.open("w") as out:
            dev = subprocess.Popen(
                argv(), cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 90
        while "try: durable-tools run" not in log.read_text() and dev.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.3)
        if dev.poll() is None:
            break
        assert attempt < 2, log.read_text()  # it exited before serving, three times
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            dev.wait()


def _dev_ports(port: int, tmp_path: Path) -> list[str]:
    return ["--port", str(port), "--ui-port", str(free_port())] + [
        "--inbox-port",
        str(free_port()),
        "--db-filename",
        str(tmp_path / "t.db"),
    ]


def _completion(message: dict[str, Any], finish: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-readme",
        "object": "chat.completion",
        "created": 1795000000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 20, "total_tokens": 140},
    }


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return _completion(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        },
        "tool_calls",
    )


ANSWERS = [
    _tool_call("call_1", "lookup_order", {"order_id": "A-1001"}),
    _tool_call("call_2", "refund", {"order_id": "A-1001", "amount_cents": 1290}),
    _completion({"role": "assistant", "content": "Done: 12.90 is refunded to your card."}, "stop"),
]


@pytest.fixture
def openai_replay() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A local Chat Completions endpoint answering ANSWERS in order; yields (base URL, requests)."""
    requests: list[dict[str, Any]] = []
    answers = list(ANSWERS)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server API
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append({"path": self.path, "body": body})
            answer = answers.pop(0) if answers else {"error": {"message": "no more answers"}}
            data = json.dumps(answer).encode()
            self.send_response(200 if "choices" in answer else 500)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", requests
    finally:
        server.shutdown()
        server.server_close()


async def test_readme_python_blocks_run_as_written(
    tmp_path: Path, openai_replay: tuple[str, list[dict[str, Any]]]
) -> None:
    shop, *application = _python_blocks()
    assert shop.startswith("# shop.py\n") and len(application) >= 2
    (tmp_path / "shop.py").write_text(shop)
    code = "\n\n".join(application)
    # The blocks' address is where `durable-tools dev` serves by default.
    assert f'"{README_ADDRESS}"' in code
    assert inspect.signature(dev_command).parameters["port"].default == 7233
    served: list[str] = []

    def dev() -> list[str]:
        """`dev` on free ports; the application's code names the same address."""
        port = free_port()
        served[:] = [f"localhost:{port}"]
        written = code.replace(f'"{README_ADDRESS}"', f'"{served[0]}"')
        assert "7233" not in written
        (tmp_path / "readme_app.py").write_text(written)
        return [str(BIN / "durable-tools"), "dev", "--app", "shop:app", *_dev_ports(port, tmp_path)]

    base_url, requests = openai_replay
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "DURABLE_"))}
    env.update(
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="sk-readme-test",
        NO_COLOR="1",
    )
    sys.path.insert(0, str(tmp_path))
    try:
        with _dev(dev, tmp_path, env, tmp_path / "dev.log"):
            await _application(served[0])
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("readme_app", None)

    # What the worker sent the model: the agent's instructions with the
    # client's variable, its settings, and the tools' results.
    assert len(requests) == 3
    first = requests[0]["body"]
    assert first["model"] == "gpt-4o" and first["temperature"] == 0.2
    assert first["messages"][0]["content"].endswith("The customer is Ana.")
    assert {t["function"]["name"] for t in first["tools"]} >= {"lookup_order", "refund"}
    last = requests[-1]["body"]["messages"]
    assert any(m["role"] == "tool" and "rf-ticket-42" in m["content"] for m in last)


async def _application(address: str) -> None:
    """The README's application blocks (`readme_app`, on sys.path), run against `address`."""
    import readme_app  # the README's application code, as written

    await readme_app.open_ticket()
    client = await Client.connect(address, data_converter=pydantic_data_converter)
    conversations = Conversations(client, task_queue="agents")
    # Until the conversation settles: lookup_order ran, refund waits.
    waiting = await conversations.wait_turn("ticket-42")
    assert [a.call_id for a in waiting.pending.approvals] == ["call_2"], waiting
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        await readme_app.approve_refunds()
    # The summary the README's comment shows.
    assert printed.getvalue().strip() == "refund(order_id='A-1001', amount_cents=1290)"

    answered = await conversations.wait_turn("ticket-42", after_turns=waiting.turns)
    assert answered.reply == "Done: 12.90 is refunded to your card.", answered
    items = await conversations.history("ticket-42")
    outputs = {i.call_id: i for i in items if isinstance(i, ToolCallOutput)}
    assert '"status":"delivered"' in outputs["call_1"].content.replace(" ", "")
    assert "rf-ticket-42/call_2" in outputs["call_2"].content
    last = items[-1]
    assert isinstance(last, AssistantMessage)
    assert last.text == "Done: 12.90 is refunded to your card."


def _command(line: str) -> list[str]:
    """A README shell line as the argv a shell runs (its `# comment` dropped)."""
    argv = shlex.split(line, comments=True)
    assert argv and argv[0] == "durable-tools", line
    return [str(BIN / "durable-tools"), *argv[1:]]


def test_readme_offline_quickstart_runs_as_written(tmp_path: Path) -> None:
    """Issue 25: the README's example needed OPENAI_API_KEY; offline, it waited in model_failed."""
    section = _section("### Try it offline, with no key")
    script = _blocks("yaml", section)[0]
    assert script.startswith("# shop_script.yaml")
    shell = _blocks("sh", section)[0]
    lines = [line for line in shell.splitlines() if line.strip()]
    assert [line.split()[1] for line in lines] == ["dev", "run", "pending", "approve"], lines
    (tmp_path / "shop.py").write_text(_python_blocks()[0])
    (tmp_path / "shop_script.yaml").write_text(script)

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TEMPORAL_", "DURABLE_", "OPENAI_", "ANTHROPIC_"))
    }
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", NO_COLOR="1", COLUMNS="200")

    def command(line: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            _command(line), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
        )

    dev, run, pending, approve = lines

    def dev_argv() -> list[str]:
        """The README's `dev` line on free ports; the other lines find it by the variable."""
        port = free_port()
        env["DURABLE_TOOLS_ADDRESS"] = f"localhost:{port}"
        return [*_command(dev), *_dev_ports(port, tmp_path)]

    with _dev(dev_argv, tmp_path, env, tmp_path / "dev.log"):
        run_log = tmp_path / "run.log"
        with run_log.open("w") as out:
            running = subprocess.Popen(
                _command(run), cwd=tmp_path, env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            # Terminal 3, as a person would: once terminal 2 shows the refund
            # waiting (after the lookup), with the command that approves it.
            deadline = time.monotonic() + 60
            while "durable-tools approve ticket-1 refund" not in run_log.read_text():
                assert running.poll() is None, run_log.read_text()
                assert time.monotonic() < deadline, run_log.read_text()
                time.sleep(0.3)
            shown = command(pending)
            assert shown.returncode == 0, shown.stdout + shown.stderr
            assert "durable-tools approve ticket-1 refund" in shown.stdout, shown.stdout
            assert "refund(order_id='A-1001', amount_cents=1290)" in shown.stdout, shown.stdout

            approved = command(approve)
            assert approved.returncode == 0, approved.stdout + approved.stderr
            assert running.wait(timeout=60) == 0, run_log.read_text()
        finally:
            if running.poll() is None:
                running.kill()
                running.wait()
    shown_run = " ".join(run_log.read_text().split())
    assert "Order A-1001 was delivered; I'm refunding it." in shown_run, shown_run
    assert "Done: refund rf-ticket-1/refund of 1290 cents is on its way." in shown_run, shown_run
    assert "model_failed" not in shown_run and "OPENAI_API_KEY" not in shown_run
