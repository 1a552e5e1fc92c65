"""Bad input to the `durable-tools` executable: one `error:` line on stderr, a non-zero exit.

Run as real subprocesses, so anything the process writes to file descriptor
2 (the SDK's Rust core logs there directly) and its real exit status count:
a failed connect once ended in `Fatal Python error: PyGILState_Release`
(exit 134) as the interpreter finalized.
"""

from __future__ import annotations

import inspect
import socket
import uuid
from pathlib import Path

import pytest
from cli_process import cli
from temporalio.testing import WorkflowEnvironment

from durable_tools.worker.dev_server import DevServer, DevServerError, free_port, port_in_use


def closed_address() -> str:
    """A loopback address nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.mark.parametrize(
    "command",
    [
        ["run", "hello"],
        ["run", "--detach", "hello"],
        ["pending"],
        ["pending", "wf-1"],
        ["approve", "wf-1", "call_1", "--as", "ana"],
        ["deny", "wf-1", "call_1"],
        ["answer", "wf-1", "call_1", '"yes"'],
        ["send", "wf-1", "hi"],
        ["history", "wf-1"],
        ["worker", "--toolkit", "agent_support:TOOLKIT"],
    ],
    ids=lambda c: "-".join(a for a in c if not a.startswith(("wf-", "call_", '"'))),
)
async def test_no_server_is_one_line(command: list[str]) -> None:
    address = closed_address()
    done = await cli(*command, "--address", address, timeout=30)
    line = done.error_line()
    assert done.code == 1
    assert f"cannot connect to Temporal at {address}" in line
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_module_xyz:kit", "cannot import module 'no_such_module_xyz'"),
        ("agent_support:no_such_kit", "has no attribute 'no_such_kit'"),
        ("agent_support:get_weather", "not a Toolkit"),
        ("no_colon", "invalid toolkit spec"),
    ],
)
@pytest.mark.parametrize("command", ["worker", "dev"])
async def test_toolkit_that_does_not_import_is_one_line(
    command: str, spec: str, expected: str, tmp_path: Path
) -> None:
    where = ["--address", closed_address()] if command == "worker" else ["--port", "1"]
    done = await cli(command, "--toolkit", spec, *where, cwd=tmp_path)
    line = done.error_line()
    assert done.code == 2
    assert expected in line
    assert not (tmp_path / ".durable-tools").exists()  # nothing started


async def test_module_raising_on_import_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken_kit.py").write_text("raise RuntimeError('boom at import')\n")
    done = await cli("worker", "--toolkit", "broken_kit:kit", cwd=tmp_path)
    line = done.error_line()
    assert done.code == 2
    assert "RuntimeError: boom at import" in line


async def test_missing_mcp_config_is_one_line(tmp_path: Path) -> None:
    done = await cli("worker", "--mcp-config", str(tmp_path / "nope.toml"), cwd=tmp_path)
    line = done.error_line()
    assert done.code == 2
    assert "nope.toml" in line


@pytest.mark.parametrize(
    "script",
    [
        '[{"tool_calls": [{"name": "x"}]}, {"text": "{{ missing.field }}"}]',
        "{not json",
        '{"turns": [{"text": 5, "tool_calls": "no"}]}',
    ],
    ids=["unknown-reference", "not-json", "wrong-types"],
)
async def test_malformed_script_file_is_one_line(script: str, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text(script)
    done = await cli(
        "run", "--model", "scripted:bad.json", "hello", "--address", closed_address(), cwd=tmp_path
    )
    line = done.error_line()
    assert done.code == 2
    assert "bad.json" in line
    assert "cannot connect" not in line  # rejected before connecting


async def test_missing_script_file_is_one_line(tmp_path: Path) -> None:
    done = await cli("run", "--model", "scripted:nope.yaml", "hi", cwd=tmp_path)
    assert "nope.yaml" in done.error_line()
    assert done.code == 2


async def test_unknown_workflow_is_one_line(dev_env: WorkflowEnvironment) -> None:
    address = dev_env.client.service_client.config.target_host
    wf = f"no-such-{uuid.uuid4().hex[:8]}"
    for command in (
        ["history", wf],
        ["pending", wf],
        ["approve", wf, "call_1"],
        ["send", wf, "hi"],
    ):
        done = await cli(*command, "--address", address)
        line = done.error_line()
        assert done.code == 1
        assert f"conversation {wf!r} does not exist" in line, line


async def test_dev_with_its_port_taken_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = await cli("dev", "--port", str(port), "--ui-port", "0", cwd=tmp_path)
    line = done.error_line()
    assert done.code == 1
    assert f"127.0.0.1:{port} is in use" in line


async def test_dev_with_its_inbox_port_taken_is_one_line_and_stops_its_server(
    tmp_path: Path,
) -> None:
    """Two `dev`s on one machine, the second on the first's inbox port (8234 by
    default). It used to stop its Temporal server and hang with its worker still
    running, printing nothing; now it exits 2 with the one line."""
    # dev starts its server (bounded by DevServer's startup_timeout), the inbox
    # fails, and the server is stopped (SIGTERM, SIGKILL after stop's timeout);
    # cli's own default covers starting and ending the process, as elsewhere.
    exits_within = sum(
        [
            inspect.signature(DevServer).parameters["startup_timeout"].default,
            inspect.signature(DevServer.stop).parameters["timeout"].default,
            inspect.signature(cli).parameters["timeout"].default,
        ]
    )
    port = free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        inbox_port = taken.getsockname()[1]
        done = await cli(
            "dev",
            "--port",
            str(port),
            "--ui-port",
            "0",
            "--inbox-port",
            str(inbox_port),
            cwd=tmp_path,
            timeout=exits_within,
        )
    assert done.error_line() == (
        f"error: port {inbox_port} on 127.0.0.1 is in use; pass another port "
        "(--port / --inbox-port)"
    )
    assert done.code == 2
    assert not port_in_use("127.0.0.1", port), "dev left its Temporal server running"


async def test_a_dev_server_that_exits_names_its_reason_and_log(tmp_path: Path) -> None:
    """The CI run that found it printed only "exited with code 1": the reason
    (the server's FATAL line, its JSON `message`) and where the log is were
    in a file nobody was told about."""
    fake = tmp_path / "temporal"
    fake.write_text(
        "#!/bin/sh\n"
        'echo \'{"level":"FATAL","message":"listen tcp 127.0.0.1:1: '
        "bind: address already in use\"}'\n"
        "exit 1\n"
    )
    fake.chmod(0o755)
    log = tmp_path / "server.log"
    server = DevServer(executable=str(fake), port=free_port(), headless=True, log_path=log)
    with pytest.raises(DevServerError) as raised:
        await server.start()
    first = str(raised.value).splitlines()[0]
    assert first.startswith("the Temporal dev server exited with code 1 (")
    assert "bind: address already in use" in first
    assert f"log: {log}" in first


def test_free_ports_come_from_below_the_ephemeral_range() -> None:
    """Outgoing connections take their local ports from the ephemeral range; a
    port picked there was taken by one before the dev server's Web UI bound it."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < low for port in ports), ports
    assert len(ports) > 1
    assert not any(port_in_use("127.0.0.1", port, reuse=False) for port in ports)
