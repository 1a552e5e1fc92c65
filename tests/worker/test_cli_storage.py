"""The CLI with external storage: `dev` stores large payloads under .durable-tools/payloads,
and `run`, `history` and `status` read them back (docs/operations.md, "Large payloads")."""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

from cli_process import cli
from test_cli_dev import _start_dev

from durable_tools.worker.dev_server import free_port

SIZE = 3_000_000  # over the 1.5 MB a result may have without external storage


async def test_dev_stores_a_large_output_and_the_commands_read_it(tmp_path: Path) -> None:
    port, ui_port = free_port(), free_port()
    address = f"127.0.0.1:{port}"
    payloads = tmp_path / ".durable-tools" / "payloads"
    dev = await _start_dev(tmp_path, port, ui_port)
    try:
        line = await dev.wait_for_line("external storage: ", timeout=20)
        assert f"stored in {payloads}" in line, line
        assert "largest tool result or arguments: 67108864 bytes" in line

        wf = f"large-{uuid.uuid4().hex[:8]}"
        prompt = json.dumps({"turns": [[["c1", "big", {"n_bytes": SIZE}]]]})
        ran = await cli(
            "run", "--id", wf, "--model", "directed", "--address", address, prompt, cwd=tmp_path
        )
        assert ran.code == 0, ran.stdout + ran.stderr
        assert "✓ big (c1) ok" in ran.stdout
        assert any(p.stat().st_size > SIZE for p in payloads.glob("sha256/*/*"))

        # From the directory `dev` runs in, the commands find its storage.
        history = await cli("history", wf, "--address", address, "--json", cwd=tmp_path)
        assert history.code == 0, history.stderr
        (output,) = [i for i in json.loads(history.stdout) if i["role"] == "tool"]
        assert output["content"] == "x" * SIZE and not output["is_error"]
        table = await cli("history", wf, "--address", address, cwd=tmp_path)
        assert table.code == 0, table.stderr
        assert f"({SIZE} characters in all; --json prints everything)" in table.stdout
        assert len(table.stdout) < 20_000
        status = await cli("status", wf, "--address", address, cwd=tmp_path)
        assert status.code == 0, status.stderr

        # Elsewhere they need the option, and say so in one line.
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        missing = await cli("history", wf, "--address", address, cwd=elsewhere)
        assert "--storage-dir" in missing.error_line()
        given = await cli(
            "--storage-dir",
            str(payloads),
            "history",
            wf,
            "--address",
            address,
            "--json",
            cwd=elsewhere,
        )
        assert given.code == 0, given.stderr
        assert len(json.loads(given.stdout)) == len(json.loads(history.stdout))

        dev.send_signal(signal.SIGINT)
        done = await dev.finish(timeout=30)
        assert done.code == 0, done.stdout + done.stderr
    finally:
        await dev.kill()


async def test_a_size_without_storage_is_refused_in_one_line(tmp_path: Path) -> None:
    done = await cli("--max-payload-bytes", "5000000", "history", "x", cwd=tmp_path)
    assert done.code == 2
    assert "needs external storage" in done.error_line()
    both = await cli(
        "--storage-dir", str(tmp_path), "--storage-s3-bucket", "b", "history", "x", cwd=tmp_path
    )
    assert both.code == 2
    assert "not both" in both.error_line()
