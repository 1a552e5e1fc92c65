"""Workflow ids and call ids with `/` and `%` in the inbox's URLs.

A workflow id may be any text (`tenant/42`); the inbox quotes it as one path
segment (`tenant%2F42`) and routes on the path as sent. The ids `.` and `..`,
which clients would drop as dot segments, travel as `:.` and `:..`."""

from __future__ import annotations

import re
import uuid
from html import unescape
from typing import Any
from urllib.parse import unquote

import httpx
from hypothesis import example, given, settings
from hypothesis import strategies as st
from inbox_support import basic, csrf_token, inbox_client, listed, turns
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from workflow_helpers import Harness

from durable_tools.worker.inbox.paths import KeepEncodedSlashes, quote_segment

ANA = basic("ana", "ana-secret")


async def _echo(request: Request) -> JSONResponse:
    return JSONResponse(dict(request.path_params))


_ECHO = KeepEncodedSlashes(
    Starlette(
        routes=[
            Route("/c/{workflow_id:segment}", _echo),
            Route("/c/{workflow_id:segment}/calls/{call_id:segment}/decision", _echo),
        ]
    )
)

# Any text a workflow or call id may hold: `/`, `%`, escapes that look like
# `%2F` or `%3A`, spaces, `?`, `#`, dots, `:` and characters past ASCII included.
_ID = st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)) | st.sampled_from("/%2F5#?.:3A"),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(workflow_id=_ID, call_id=_ID)
# Dot segments, which httpx (as browsers) removes from a path: once found at
# random in a `make test` run ('.' reached `/c/`, a 404); and the ids their
# escape would look like.
@example(workflow_id=".", call_id="..")
@example(workflow_id="..", call_id=".")
@example(workflow_id=":.", call_id=":..")
@example(workflow_id="%3A.", call_id="...")
async def test_any_id_quoted_as_one_segment_reaches_the_endpoint_unchanged(
    workflow_id: str, call_id: str
) -> None:
    transport = httpx.ASGITransport(app=_ECHO)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        response = await client.get(f"/c/{quote_segment(workflow_id)}")
        assert response.status_code == 200, (workflow_id, response.text)
        assert response.json() == {"workflow_id": workflow_id}
        path = f"/c/{quote_segment(workflow_id)}/calls/{quote_segment(call_id)}/decision"
        response = await client.get(path)
        assert response.status_code == 200, (workflow_id, call_id, response.text)
        assert response.json() == {"workflow_id": workflow_id, "call_id": call_id}


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=60))
async def test_any_raw_path_gets_an_answer_never_a_server_error(raw: bytes) -> None:
    """Bytes no browser would send (bad escapes, invalid UTF-8) still get an answer."""
    raw_path = b"/c/" + raw.replace(b"?", b"").replace(b"#", b"")
    sent: list[int] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            sent.append(message["status"])

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": unquote(raw_path.decode("latin-1"), errors="replace"),
        "raw_path": raw_path,
        "query_string": b"",
        "root_path": "",
        "headers": [],
        "server": ("inbox.test", 80),
        "client": ("127.0.0.1", 1),
    }
    await _ECHO(scope, receive, send)
    assert sent and sent[0] < 500, (raw_path, sent)  # routed, redirected or not found


async def test_an_unquoted_slash_is_still_two_segments() -> None:
    transport = httpx.ASGITransport(app=_ECHO)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        assert (await client.get("/c/plain")).json() == {"workflow_id": "plain"}
        assert (await client.get("/c/a%20b")).json() == {"workflow_id": "a b"}
        assert (await client.get("/c/tenant/42")).status_code == 404


async def test_a_conversation_whose_id_has_slashes_is_listed_opened_and_decided(
    harness: Harness,
) -> None:
    wf = await harness.start(
        turns(("r1", "refund", {"order": "A-9", "amount": 3})),
        workflow_id=f"tenant/{uuid.uuid4()}/literal%2F",
    )
    await harness.wait_approval(wf, "r1")
    quoted = quote_segment(wf)
    assert "/" not in quoted
    async with inbox_client(harness) as client:
        await listed(client, ANA, wf)
        front = await client.get("/", headers=ANA)
        assert f'href="/conversations/{quoted}"' in front.text

        page = await client.get(f"/conversations/{quoted}", headers=ANA)
        assert page.status_code == 200, page.text
        assert f'data-segment="{quoted}"' in page.text  # what the page's script follows
        actions = {unescape(a) for a in re.findall(r'action="([^"]+)"', page.text)}
        assert f"/conversations/{quoted}/decide" in actions
        assert f"/conversations/{quoted}/send" in actions

        view = await client.get(f"/api/conversations/{quoted}", headers=ANA)
        assert view.status_code == 200, view.text
        [item] = view.json()["items"]
        version = await client.get(f"/api/conversations/{quoted}/version", headers=ANA)
        assert version.status_code == 200, version.text

        # Decided through the page's form, which comes back to the same page.
        token = await csrf_token(client, ANA)
        response = await client.post(
            f"/conversations/{quoted}/decide",
            data={
                "csrf_token": token,
                "call_id": "r1",
                "arguments_hash": item["arguments_hash"],
                "decision": "approve",
            },
            headers=ANA,
        )
        assert response.status_code in (302, 303), response.text
        assert response.headers["location"].startswith(f"/conversations/{quoted}?")
    outputs = await harness.wait_outputs(wf, "r1")
    assert outputs["r1"].content == "refunded 3 on A-9"
