"""Hostile HTTP gets a 4xx, never a 500; pages carry a strict CSP (issue 23, item 7).

Every header, cookie, form field and query value the inbox reads is sent as
raw bytes a browser would never send (non-ASCII, invalid UTF-8, overlong,
malformed base64 and tokens), through the real app on a real Temporal
server. Each answer must be a documented client error or a success.
"""

from __future__ import annotations

import base64
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from inbox_support import CREDENTIALS, basic, inbox_client, turns
from workflow_helpers import Harness

from durable_tools.worker.inbox.app import create_app
from durable_tools.worker.inbox.auth import Authenticators, ProxyHeaderAuth, TokenAuth
from durable_tools.worker.inbox.authz import TeamAuthorizer
from durable_tools.worker.inbox.headers import CONTENT_SECURITY_POLICY

ANA = basic("ana", "ana-secret")

# Header values as bytes: anything but CR, LF and NUL (which HTTP/1.1 forbids
# outright), up to far past any sane length.
_VALUE = st.binary(max_size=300).map(
    lambda b: b.replace(b"\r", b"").replace(b"\n", b"").replace(b"\0", b"")
) | st.sampled_from(
    [
        b"Basic " + base64.b64encode("añá:sécret".encode()),
        b"Basic " + base64.b64encode(b"\xff\xfe:\x80"),
        b"Basic !!!not-base64",
        b"Basic " + base64.b64encode(b"no-colon"),
        b"Bearer " + b"x" * 5000,
        "Bearer ünïcode".encode(),
        b"dt_csrf=" + b"\xc3\x28" * 50,
        b"-1" * 100,
        b"9" * 400,
    ]
)
_HEADER = st.sampled_from(
    ["Authorization", "Cookie", "X-CSRF-Token", "Last-Event-ID", "X-Forwarded-User",
     "X-Forwarded-Groups", "Content-Type", "Origin", "Referer", "Host"]
)  # fmt: skip
_FORM = st.dictionaries(
    st.sampled_from(["csrf_token", "call_id", "arguments_hash", "decision", "reason", "text",
                     "message", "value_json", "grant", "grant_fields", "grant_for", "x" * 300]),
    st.text(max_size=200) | st.sampled_from(["\ud800", "a" * 100_000, "null", "{", "[]",
                                             "nan", "-inf", "1e400", "approve"]),
    max_size=4,
)  # fmt: skip


@asynccontextmanager
async def _client(harness: Harness) -> AsyncIterator[httpx.AsyncClient]:
    """The inbox app (tokens, then proxy headers) on the shared dev server, seeing no team.

    The lists it serves are then empty: on a server shared by the whole suite
    they would otherwise query every waiting conversation of every test, and
    120 of them (each `/`) took longer than the test's time limit beside
    another suite. What is tested is how hostile input is read, not listing.
    """
    app = create_app(
        harness.conversations,
        Authenticators([ProxyHeaderAuth(), TokenAuth.parse(CREDENTIALS)], basic_realm="inbox"),
        refresh_seconds=0,
        authorizer=TeamAuthorizer(require_team=True),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        yield client


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    header=_HEADER,
    value=_VALUE,
    form=_FORM,
    query=st.text(max_size=60),
    target=st.sampled_from(["/", "/api/pending", "/api/session", "/conversations/W",
                            "/api/conversations/W", "/conversations/W/send",
                            "/conversations/W/decide", "/api/conversations/W/messages",
                            "/conversations/W/answer", "/api/conversations/W/events"]),
)  # fmt: skip
async def test_hostile_headers_forms_and_queries_get_a_client_error_never_a_500(
    harness: Harness, header: str, value: bytes, form: dict[str, str], query: str, target: str
) -> None:
    path = target.replace("W", "conv-hostile")
    async with _client(harness) as client:
        headers = httpx.Headers([(b"authorization", ANA["Authorization"].encode())])
        headers[header.encode("latin-1").decode("latin-1")] = value.decode("latin-1")
        is_post = path.endswith(("send", "decide", "answer", "messages"))
        request = client.build_request(
            "POST" if is_post else "GET",
            path,
            params={"older_than": query, "after": query, "tool": query},
            headers=headers,
            data={k: v.encode("utf-8", "surrogatepass") for k, v in form.items()}
            if is_post
            else None,
        )
        response = await client.send(request)
        assert response.status_code < 500, (header, value, form, response.text[:500])


async def test_pages_send_a_strict_content_security_policy(harness: Harness) -> None:
    wf = await harness.start(turns(("r1", "refund", {"order": "o1", "amount": 5})))
    await harness.wait_approval(wf, "r1")
    async with inbox_client(harness) as client:
        for path in ("/", f"/conversations/{wf}", "/api/pending", "/static/inbox.js", "/nope"):
            response = await client.get(path, headers=ANA)
            assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, path
            assert response.headers["X-Content-Type-Options"] == "nosniff", path
            assert response.headers["X-Frame-Options"] == "DENY", path
        page = (await client.get(f"/conversations/{wf}", headers=ANA)).text
        # No inline script runs under `script-src 'self'`: only data blocks and /static.
        for tag in page.split("<script")[1:]:
            head = tag.split(">", 1)[0]
            assert 'src="/static/' in head or 'type="application/json"' in head, head
        assert not re.search(r"<[^>]*\son[a-z]+\s*=", page), "an inline event handler"
        assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
        assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY
