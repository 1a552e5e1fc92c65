"""Helpers of the MCP OAuth tests: run tests/mcp/oauth_test_servers.py, act as the person."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from durable_tools.mcp import McpServerConfig
from durable_tools.mcp.config import McpOAuth
from durable_tools.worker.dev_server import free_port

OAUTH_SERVERS = Path(__file__).resolve().parent / "mcp" / "oauth_test_servers.py"


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if process.poll() is not None:
                raise RuntimeError("the OAuth test servers exited") from None
            if time.monotonic() > deadline:
                raise RuntimeError("the OAuth test servers did not listen within 30 s") from None
            time.sleep(0.05)


@dataclass
class OAuthServers:
    """The running authorization server and protected MCP server."""

    issuer: str
    url: str
    log: Path

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        lines = self.log.read_text(encoding="utf-8").splitlines() if self.log.exists() else []
        events = [json.loads(line) for line in lines]
        return [e for e in events if kind is None or e.get("event") == kind]

    def secrets(self) -> set[str]:
        """Every secret issued or received: client secrets, codes, verifiers, tokens."""
        found: set[str] = set()
        for event in self.events():
            for name in ("access_token", "refresh_token", "client_secret", "code", "code_verifier"):
                value = event.get(name)
                if isinstance(value, str) and value:
                    found.add(value)
        return found

    def admin(self, action: str) -> None:
        httpx.post(f"{self.issuer}/admin/{action}").raise_for_status()

    def config(self, tmp: Path, name: str = "notes", **fields: Any) -> McpServerConfig:
        return McpServerConfig(
            name=name,
            url=self.url,
            oauth=McpOAuth(token_dir=str(tmp / "tokens"), login_timeout=30),
            **fields,
        )


@contextmanager
def oauth_servers(tmp: Path, *extra: str) -> Iterator[OAuthServers]:
    """Start the servers on two ephemeral loopback ports; stop them on exit."""
    as_port, rs_port = free_port(), free_port()
    log = tmp / f"oauth-{rs_port}.jsonl"
    with (tmp / f"oauth-{rs_port}.stderr").open("wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, str(OAUTH_SERVERS), "--log", str(log)]
            + ["--as-port", str(as_port), "--rs-port", str(rs_port), *extra],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        _wait_listening(as_port, process)
        _wait_listening(rs_port, process)
        yield OAuthServers(
            issuer=f"http://127.0.0.1:{as_port}", url=f"http://127.0.0.1:{rs_port}/mcp", log=log
        )
    finally:
        process.terminate()
        process.wait(10)


def consent(authorization_url: str, *, approve: bool = True) -> httpx.Response:
    """Act as the person in the browser: open the page, answer the form, follow the redirect.

    Returns:
        The loopback redirect listener's answer.
    """
    with httpx.Client(timeout=20) as browser:
        page = browser.get(authorization_url)
        page.raise_for_status()
        answer = browser.post(authorization_url, data={"confirm": "yes" if approve else "no"})
        assert answer.status_code == 302, (answer.status_code, answer.text[:200])
        return browser.get(answer.headers["location"])
