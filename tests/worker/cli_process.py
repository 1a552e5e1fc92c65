"""Running `durable-tools` as a real subprocess, with bounded waits, for the CLI tests."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CLI = str(BIN / "durable-tools")


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of CLI subprocesses: `cli_app` and `agent_support` importable,
    `durable-tools` on PATH (so printed commands run as printed), no colours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "DURABLE_TOOLS_"))}
    env.update(
        PYTHONPATH=os.pathsep.join(str(p) for p in (ROOT, ROOT / "tests", ROOT / "tests/worker")),
        PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}",
        NO_COLOR="1",
        COLUMNS="200",
        **extra,
    )
    return env


@dataclass(frozen=True)
class Completed:
    """A finished CLI subprocess."""

    code: int
    stdout: str
    stderr: str

    def error_line(self) -> str:
        """The one `error: ...` line on stderr; asserts there is exactly one, and a failure."""
        assert self.code != 0, (self.stdout, self.stderr)
        lines = self.stderr.splitlines()
        assert len(lines) == 1, self.stderr
        assert lines[0].startswith("error: "), lines[0]
        assert "Traceback" not in self.stdout + self.stderr
        return lines[0]


async def cli(
    *args: str,
    timeout: float = 60.0,
    cwd: Path = ROOT,
    shell: str | None = None,
    env: dict[str, str] | None = None,
    stdin: str = "",
) -> Completed:
    """Run `durable-tools ARGS` (or a shell command line) to completion within `timeout` s.

    `env`: variables added to `cli_env()` (e.g. a `DURABLE_TOOLS_*` one it removes).
    `stdin`: what the person types (e.g. `"y\\n"` at a confirmation); closed after it.
    """
    if shell is not None:
        process = await asyncio.create_subprocess_shell(
            shell,
            cwd=cwd,
            env=cli_env(**(env or {})),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    else:
        process = await asyncio.create_subprocess_exec(
            CLI,
            *args,
            cwd=cwd,
            env=cli_env(**(env or {})),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    try:
        async with asyncio.timeout(timeout):
            out, err = await process.communicate(stdin.encode())
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()
        what = args or shell
        raise AssertionError(f"durable-tools {what} did not exit within {timeout} s") from None
    assert process.returncode is not None
    return Completed(process.returncode, out.decode(), err.decode())


class Running:
    """A long-running CLI subprocess whose stdout is read line by line."""

    def __init__(self, process: asyncio.subprocess.Process, stderr: Path | None) -> None:
        self.process = process
        self.lines: list[str] = []
        self._stderr = stderr

    @classmethod
    async def start(
        cls,
        *args: str,
        cwd: Path = ROOT,
        python: bool = False,
        stderr: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> Running:
        """Start `durable-tools ARGS` (or `python -m durable_tools.worker.cli ARGS`).

        `stderr`: a file for a process that logs a lot (a pipe nobody reads fills up).
        `env`: variables added to `cli_env()`.
        """
        command = [sys.executable, "-m", "durable_tools.worker.cli"] if python else [CLI]
        with contextlib.ExitStack() as stack:
            err = stack.enter_context(stderr.open("wb")) if stderr else asyncio.subprocess.PIPE
            process = await asyncio.create_subprocess_exec(
                *command,
                *args,
                cwd=cwd,
                env=cli_env(**(env or {})),
                stdout=asyncio.subprocess.PIPE,
                stderr=err,
            )
        return cls(process, stderr)

    async def wait_for_line(self, needle: str, timeout: float = 60.0) -> str:
        """Read stdout until a line containing `needle` (within `timeout` seconds)."""
        for line in self.lines:
            if needle in line:
                return line
        assert self.process.stdout is not None
        try:
            async with asyncio.timeout(timeout):
                while True:
                    raw = await self.process.stdout.readline()
                    if not raw:
                        break
                    line = raw.decode().rstrip("\n")
                    self.lines.append(line)
                    if needle in line:
                        return line
        except TimeoutError:
            pass
        raise AssertionError(f"no line with {needle!r} within {timeout} s:\n" + self.output())

    def output(self) -> str:
        """Everything read from stdout so far."""
        return "\n".join(self.lines)

    async def finish(self, timeout: float = 60.0) -> Completed:
        """Wait for the exit (within `timeout` seconds); read the rest of the output."""
        try:
            async with asyncio.timeout(timeout):
                out, err = await self.process.communicate()
        except TimeoutError:
            await self.kill()
            raise AssertionError(f"no exit within {timeout} s:\n{self.output()}") from None
        self.lines += out.decode().splitlines()
        assert self.process.returncode is not None
        errors = self._stderr.read_text() if self._stderr else err.decode()
        return Completed(self.process.returncode, self.output(), errors)

    def send_signal(self, sig: signal.Signals) -> None:
        """Send a signal to the process."""
        with contextlib.suppress(ProcessLookupError):
            self.process.send_signal(sig)

    async def kill(self) -> None:
        """Kill it (cleanup after a failed assertion)."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.process.wait(), 10)
