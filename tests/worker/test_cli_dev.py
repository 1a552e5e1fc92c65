"""`durable-tools dev`: server, Web UI and worker in one process; SQLite persists; clean stops."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from cli_process import Running, cli

from durable_tools.worker.dev_server import free_port


async def _get(url: str, timeout: float = 30.0) -> int:
    """GET `url` until it answers (within `timeout` seconds); its HTTP status."""
    deadline = time.monotonic() + timeout
    problem: Exception | None = None
    while time.monotonic() < deadline:
        try:
            response = await asyncio.to_thread(urllib.request.urlopen, url, timeout=5)
            with response:
                return int(response.status)
        except OSError as exc:
            problem = exc
            await asyncio.sleep(0.3)
    raise AssertionError(f"{url} did not answer within {timeout} s: {problem}")


async def _start_dev(
    tmp_path: Path, port: int, ui_port: int, inbox_port: int | None = None
) -> Running:
    dev = await Running.start(
        "dev",
        "--app",
        "cli_app:app",
        "--toolkit",
        "agent_support:TOOLKIT",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--inbox-port",
        str(inbox_port or free_port()),
        cwd=tmp_path,
        python=True,  # `python -m durable_tools.worker.cli` works as well as the script
        stderr=tmp_path / "dev.stderr",
    )
    await dev.wait_for_line("Temporal frontend: ", timeout=60)
    return dev


async def test_dev_serves_ui_and_worker_persists_and_stops_cleanly(tmp_path: Path) -> None:
    port, ui_port, inbox_port = free_port(), free_port(), free_port()
    address = f"127.0.0.1:{port}"
    dev = await _start_dev(tmp_path, port, ui_port, inbox_port)
    try:
        assert f"Temporal frontend: {address}" in dev.output()
        ui = await dev.wait_for_line("Web UI: ", timeout=10)
        assert ui.endswith(f"http://127.0.0.1:{ui_port}")
        inbox = await dev.wait_for_line("Inbox: ", timeout=10)
        assert inbox.startswith(f"Inbox: http://127.0.0.1:{inbox_port}/"), inbox
        assert await _get(f"http://127.0.0.1:{inbox_port}/api/pending") == 200  # dev mode
        await dev.wait_for_line("try: durable-tools run", timeout=10)
        assert await _get(f"http://127.0.0.1:{ui_port}/") == 200

        wf = f"dev-{uuid.uuid4().hex[:8]}"
        prompt = json.dumps({"turns": [[["c1", "get_weather", {"city": "Lima"}]]]})
        ran = await cli("run", "--id", wf, "--model", "directed", "--address", address, prompt)
        assert ran.code == 0, ran.stdout + ran.stderr
        assert "✓ get_weather (c1) ok" in ran.stdout

        # `dev` allows the offline models; scripts are read under its working directory.
        assert "offline models (test, scripted:FILE): allowed" in dev.output()
        ran = await cli(
            "run", "--model", "test", "--toolkit", "weather", "--address", address, "hi"
        )
        assert ran.code == 0 and "✓ get_weather" in ran.stdout, ran.stdout + ran.stderr
        (tmp_path / "hello.yaml").write_text("- text: scripted hello\n")
        ran = await cli(
            "run", "--model", "scripted:hello.yaml", "--address", address, "hi", cwd=tmp_path
        )
        assert ran.code == 0 and "scripted hello" in ran.stdout, ran.stdout + ran.stderr

        dev.send_signal(signal.SIGINT)
        done = await dev.finish(timeout=30)
        assert done.code == 0, done.stdout + done.stderr
        assert "worker and dev server stopped" in done.stdout
        assert "Traceback" not in done.stderr
    finally:
        await dev.kill()
    assert (tmp_path / ".durable-tools" / "temporal.db").is_file()

    # A second start on the same SQLite file still has the conversation; SIGTERM stops it too.
    dev = await _start_dev(tmp_path, port, ui_port)
    try:
        history = await cli("history", wf, "--address", address, "--json")
        assert history.code == 0, history.stderr
        assert [i["tool"] for i in json.loads(history.stdout) if i["role"] == "tool"] == [
            "get_weather"
        ]
        dev.send_signal(signal.SIGTERM)
        done = await dev.finish(timeout=30)
        assert done.code == 0, done.stdout + done.stderr
    finally:
        await dev.kill()


async def test_a_model_failure_is_one_line_on_the_dev_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, item 5: no traceback for an expected failure (a model spec without its key)."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    dev = await _start_dev(tmp_path, port, free_port())
    try:
        await dev.wait_for_line("try: durable-tools run", timeout=30)
        ran = await cli(
            "run", "--model", "openai:gpt-4o-mini", "--address", f"127.0.0.1:{port}", "hi"
        )
        assert ran.code == 1 and "no OpenAI API key" in ran.stdout, ran.stdout + ran.stderr
        dev.send_signal(signal.SIGINT)
        done = await dev.finish(timeout=30)
    finally:
        await dev.kill()
    failed = [line for line in done.stderr.splitlines() if "model turn 1 failed" in line]
    assert len(failed) == 1, done.stderr  # the workflow's; the activity's only at DEBUG
    assert "(ConfigurationError): no model named 'openai:gpt-4o-mini'" in failed[0]
    assert "no OpenAI API key" in failed[0]
    assert "Traceback" not in done.stderr and "Completing activity as failed" not in done.stderr
