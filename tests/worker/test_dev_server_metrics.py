"""`DevServer.metrics_url`: the dev server's Prometheus endpoint, where the bench reads it.

`bench/scale.py` counts the server's requests per phase from it (workflow
tasks completed, execution writes, history reads), so the port must be
the one the server serves, and the counters must move with the requests a
client sends.
"""

from __future__ import annotations

import asyncio
import re
import socket
import urllib.request

from temporalio.client import Client

from durable_tools.worker.dev_server import DevServer, DevServerError, free_port


def _count(text: str, operation: str) -> float:
    """The frontend's `service_requests` for `operation`, summed over its label sets."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("service_requests{") and f'operation="{operation}"' in line:
            if 'service_name="frontend"' in line:
                total += float(line.rsplit(" ", 1)[1])
    return total


async def _scrape(url: str) -> str:
    def get() -> str:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.read().decode()

    return await asyncio.to_thread(get)


REPORTING_SECONDS = 1.0
"""How often the server's metrics reach the endpoint (measured: a request
shows up there about a second after it was answered)."""


async def test_metrics_url_serves_counters_that_follow_requests() -> None:
    port = free_port("127.0.0.1")
    async with DevServer(headless=True, search_attributes={}, metrics_port=port) as server:
        assert server.metrics_url == f"http://127.0.0.1:{port}/metrics"
        client = await Client.connect(server.address)
        # Listing is a request nothing else sends here (the readiness check counts).
        text = await _scrape(server.metrics_url)
        assert re.search(r"^# TYPE service_requests counter", text, re.MULTILINE)
        assert _count(text, "ListWorkflowExecutions") == 0
        for _ in range(3):
            assert [w async for w in client.list_workflows()] == []
        deadline = asyncio.get_running_loop().time() + 10 * REPORTING_SECONDS
        while (listed := _count(await _scrape(server.metrics_url), "ListWorkflowExecutions")) < 3:
            assert asyncio.get_running_loop().time() < deadline, f"{listed} of 3 lists counted"
            await asyncio.sleep(REPORTING_SECONDS / 10)
        assert listed == 3


async def test_a_metrics_port_in_use_is_refused_before_the_server_starts() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = DevServer(headless=True, search_attributes={}, metrics_port=port)
        try:
            await server.start()
        except DevServerError as exc:
            assert f"metrics port 127.0.0.1:{port} is in use" in str(exc)
        else:
            await server.stop()
            raise AssertionError("a server started on a metrics port in use")
