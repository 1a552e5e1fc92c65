"""Helpers of the inbox tests: an app on a harness, scripted turns, credentials."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from workflow_helpers import Harness, eventually

from durable_tools.worker.inbox import Authenticators, TokenAuth, create_app
from durable_tools.worker.inbox.auth import ProxyHeaderAuth

CREDENTIALS = "ana:ana-secret:approvers\nbob:bob-secret\n"
"""Token file of the API tests: ana and bob."""


def basic(name: str, secret: str) -> dict[str, str]:
    token = base64.b64encode(f"{name}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    """A `directed` model message: one turn per call."""
    return json.dumps({"turns": [[[c[0], c[1], c[2]]] for c in calls]})


@asynccontextmanager
async def inbox_client(
    harness: Harness, *, proxy: bool = False
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the inbox app (token auth; proxy headers too when `proxy`)."""
    chain = [TokenAuth.parse(CREDENTIALS)]
    if proxy:
        chain.insert(0, ProxyHeaderAuth())  # pyright: ignore[reportArgumentType]
    app = create_app(
        harness.conversations, Authenticators(chain, basic_realm="inbox"), refresh_seconds=0
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        yield client


async def csrf_token(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    response = await client.get("/api/session", headers=headers)
    assert response.status_code == 200, response.text
    token: str = response.json()["csrf_token"]
    return token


async def listed(client: httpx.AsyncClient, headers: dict[str, str], workflow_id: str) -> Any:
    """The `/api/pending` entry of `workflow_id`, once visibility lists it with items."""

    async def probe() -> Any:
        response = await client.get("/api/pending", headers=headers)
        assert response.status_code == 200, response.text
        return next(
            (w for w in response.json() if w["workflow_id"] == workflow_id and w["items"]),
            None,
        )

    return await eventually(probe, what=f"{workflow_id} in /api/pending")
