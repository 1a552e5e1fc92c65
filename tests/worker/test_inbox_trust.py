"""Identity the inbox can trust (issue 23, item 3): proxy headers only from the
proxy's own addresses, signed proxy assertions verified against the issuer's JWKS,
one authentication method per request, and the CSRF secret every replica shares."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from cli_process import cli
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from inbox_support import CREDENTIALS, bearer
from starlette.requests import Request
from temporalio.testing import WorkflowEnvironment

from durable_tools.client import Conversations
from durable_tools.errors import ConfigurationError
from durable_tools.worker.inbox import (
    Authenticators,
    ProxyAssertionAuth,
    ProxyHeaderAuth,
    Rejected,
    TokenAuth,
    build_auth,
    create_app,
)
from durable_tools.worker.inbox.assertions import Jwks

ISSUER = "https://idp.test"
AUDIENCE = "durable-tools-inbox"
UNTRUSTED_PEER = ("10.9.8.7", 40000)
"""A pod that reaches the Service directly, around the proxy."""


@asynccontextmanager
async def _inbox(
    dev_env: WorkflowEnvironment, auth: Authenticators, *, peer: tuple[str, int]
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client on the inbox app whose requests come from TCP peer `peer`."""
    app = create_app(Conversations(dev_env.client, task_queue="agents"), auth, refresh_seconds=0)
    transport = httpx.ASGITransport(app=app, client=peer)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        yield client


FORGED = {"X-Forwarded-User": "mallory", "X-Forwarded-Groups": "finance,approvers"}


async def test_forged_proxy_headers_from_an_untrusted_peer_are_refused(
    dev_env: WorkflowEnvironment,
) -> None:
    """The k8s inbox of 1988051: any pod that reached it was whoever it named."""
    auth = Authenticators([ProxyHeaderAuth(), TokenAuth.parse(CREDENTIALS)])
    async with _inbox(dev_env, auth, peer=UNTRUSTED_PEER) as client:
        response = await client.get("/api/session", headers=FORGED)
        assert response.status_code == 401, response.text
        assert "not a trusted proxy" in response.json()["message"]
        # Never mixed: a valid token beside forged headers is refused too, not
        # answered as the token's owner.
        response = await client.get("/api/session", headers={**FORGED, **bearer("bob-secret")})
        assert response.status_code == 401, response.text
        only_groups = {"X-Forwarded-Groups": "finance"}
        assert (await client.get("/api/session", headers=only_groups)).status_code == 401
        # X-Forwarded-For is a header like any other: it cannot make a peer trusted.
        spoofed = {**FORGED, "X-Forwarded-For": "127.0.0.1"}
        assert (await client.get("/api/session", headers=spoofed)).status_code == 401
        # Without identity headers, the token alone still works.
        response = await client.get("/api/session", headers=bearer("bob-secret"))
        assert response.status_code == 200 and response.json()["name"] == "bob"


async def test_proxy_headers_from_a_trusted_cidr_are_accepted(
    dev_env: WorkflowEnvironment,
) -> None:
    auth = build_auth(
        host="0.0.0.0",
        trust_proxy_header=True,
        trusted_proxies=["10.0.0.0/24"],
        tokens_env=CREDENTIALS,
    )
    async with _inbox(dev_env, auth, peer=("10.0.0.7", 50000)) as client:
        response = await client.get("/api/session", headers=FORGED)
        assert response.status_code == 200, response.text
        session = response.json()
        assert session["name"] == "mallory" and session["groups"] == ["finance", "approvers"]
        assert session["method"] == "proxy"
        # The proxy's identity wins over an Authorization header it passes along.
        response = await client.get("/api/session", headers={**FORGED, **bearer("bob-secret")})
        assert response.json()["name"] == "mallory"
    async with _inbox(dev_env, auth, peer=("10.0.1.7", 50000)) as client:
        assert (await client.get("/api/session", headers=FORGED)).status_code == 401
    # An IPv4 proxy reaching a dual-stack socket shows up IPv4-mapped.
    async with _inbox(dev_env, auth, peer=("::ffff:10.0.0.7", 50000)) as client:
        assert (await client.get("/api/session", headers=FORGED)).status_code == 200


async def test_a_wrong_token_is_refused_not_taken_for_dev_mode(
    dev_env: WorkflowEnvironment,
) -> None:
    """A request never mixes methods: bad credentials do not fall through to `DevAuth`."""
    auth = build_auth(host="127.0.0.1", dev_user="dev", tokens_env=CREDENTIALS)
    async with _inbox(dev_env, auth, peer=("127.0.0.1", 1)) as client:
        no_credentials = await client.get("/api/session", headers={"Host": "127.0.0.1"})
        assert no_credentials.json()["name"] == "dev"
        headers = {"Host": "127.0.0.1", **bearer("not-a-token")}
        assert (await client.get("/api/session", headers=headers)).status_code == 401


def test_build_auth_refuses_proxy_headers_from_anyone() -> None:
    with pytest.raises(ConfigurationError, match="--trusted-proxy"):
        build_auth(host="0.0.0.0", trust_proxy_header=True)
    with pytest.raises(ConfigurationError, match="add --trust-proxy-header"):
        build_auth(host="0.0.0.0", trusted_proxies=["10.0.0.0/8"], tokens_env=CREDENTIALS)
    with pytest.raises(ConfigurationError, match="not an address range"):
        build_auth(host="0.0.0.0", trust_proxy_header=True, trusted_proxies=["10.0.0.0/33"])
    # On loopback the proxy can only be on this machine (or in this pod).
    (proxy,) = build_auth(host="127.0.0.1", trust_proxy_header=True).chain
    assert isinstance(proxy, ProxyHeaderAuth)
    assert [str(n) for n in proxy.trusted_proxies] == ["127.0.0.0/8", "::1/128"]


async def test_trust_proxy_header_on_a_public_address_refuses_to_start() -> None:
    done = await cli("inbox", "--host", "0.0.0.0", "--trust-proxy-header", timeout=30)
    assert done.code == 2
    assert "--trusted-proxy" in done.error_line() and "--proxy-jwks" in done.error_line()


async def test_non_dev_inbox_refuses_to_start_without_the_csrf_secret(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(CREDENTIALS)
    done = await cli("inbox", "--tokens-file", str(tokens), timeout=30)
    assert done.code == 2
    assert "DURABLE_TOOLS_INBOX_SECRET" in done.error_line()
    short = {"DURABLE_TOOLS_INBOX_SECRET": "too-short"}
    done = await cli("inbox", "--tokens-file", str(tokens), env=short, timeout=30)
    assert done.code == 2 and "32 bytes" in done.error_line()


# A signed assertion (Google IAP, Cloudflare Access, oauth2-proxy's ID token).


@contextmanager
def _jwks_server(document: dict[str, Any]) -> Iterator[str]:
    """`document` served as JSON on 127.0.0.1; yields its URL."""
    body = json.dumps(document).encode()
    fetches: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetches.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/certs"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def _public_jwk(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey, kid: str) -> dict[str, Any]:
    if isinstance(key, rsa.RSAPrivateKey):
        jwk: dict[str, Any] = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
        jwk["alg"] = "RS256"
    else:
        jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
        jwk["alg"] = "ES256"
    return {**jwk, "kid": kid, "use": "sig"}


RSA_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC_KEY = ec.generate_private_key(ec.SECP256R1())
OTHER_KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWKS = {"keys": [_public_jwk(RSA_KEY, "rsa-1"), _public_jwk(EC_KEY, "ec-1")]}


def _token(
    key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = RSA_KEY,
    *,
    kid: str = "rsa-1",
    **claims: Any,
) -> str:
    now = int(time.time())
    body = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "email": "ana@example.com",
        "groups": ["finance", "approvers"],
        "iat": now,
        "exp": now + 300,
        **claims,
    }
    body = {k: v for k, v in body.items() if v is not None}
    algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
    return jwt.encode(body, key, algorithm=algorithm, headers={"kid": kid})


def _assertion(jwks: str, header: str) -> ProxyAssertionAuth:
    return ProxyAssertionAuth.configure(header=header, jwks=jwks, issuer=ISSUER, audience=AUDIENCE)


async def test_a_jwt_signed_by_a_key_in_the_jwks_is_accepted_and_forgeries_are_refused(
    dev_env: WorkflowEnvironment,
) -> None:
    header = "X-Goog-IAP-JWT-Assertion"
    with _jwks_server(JWKS) as url:
        auth = build_auth(host="0.0.0.0", assertion=_assertion(url, header))
        async with _inbox(dev_env, auth, peer=UNTRUSTED_PEER) as client:

            async def status(token: str, extra: dict[str, str] | None = None) -> httpx.Response:
                return await client.get("/api/session", headers={header: token, **(extra or {})})

            response = await status(_token())
            assert response.status_code == 200, response.text
            session = response.json()
            assert session["name"] == "ana@example.com"
            assert session["groups"] == ["finance", "approvers"]
            assert session["method"] == "proxy"
            assert (await status(_token(EC_KEY, kid="ec-1"))).json()["groups"] == [
                "finance",
                "approvers",
            ]
            refused = {
                "expired": _token(exp=int(time.time()) - 3600),
                "wrong audience": _token(aud="someone-else"),
                "wrong issuer": _token(iss="https://evil.example"),
                "wrong key": _token(OTHER_KEY),
                "unknown key": _token(OTHER_KEY, kid="other"),
                "no expiry": _token(exp=None),
                "no user": _token(email=None),
                "unsigned": jwt.encode(
                    {"iss": ISSUER, "aud": AUDIENCE, "email": "x", "exp": 2**40},
                    None,
                    algorithm="none",
                ),
                "not a jwt": "mallory",
            }
            for what, token in refused.items():
                response = await status(token)
                assert response.status_code == 401, (what, response.text)
            # Plain identity headers mean nothing here: the assertion is the identity.
            response = await status(_token(), FORGED)
            assert response.json()["name"] == "ana@example.com"
            assert (await client.get("/api/session", headers=FORGED)).status_code == 401


async def test_a_jwt_in_authorization_beside_static_tokens_and_from_a_jwks_file(
    dev_env: WorkflowEnvironment, tmp_path: Path
) -> None:
    """oauth2-proxy's `--pass-authorization-header`: the ID token as a bearer token;
    the inbox's static bearer tokens still work beside it."""
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(JWKS))
    auth = build_auth(
        host="127.0.0.1",
        assertion=_assertion(str(jwks), "Authorization"),
        trusted_proxies=["127.0.0.1/32"],
        tokens_env=CREDENTIALS,
    )
    async with _inbox(dev_env, auth, peer=("127.0.0.1", 2)) as client:
        response = await client.get("/api/session", headers=bearer(_token()))
        assert response.json()["name"] == "ana@example.com"
        response = await client.get("/api/session", headers=bearer("ana-secret"))
        assert response.json()["name"] == "ana"
        wrong = await client.get("/api/session", headers=bearer(_token(aud="other")))
        assert wrong.status_code == 401
    # With --trusted-proxy too, the assertion counts only from the proxy.
    async with _inbox(dev_env, auth, peer=UNTRUSTED_PEER) as client:
        response = await client.get("/api/session", headers=bearer(_token()))
        assert response.status_code == 401


def test_assertion_configuration_errors(tmp_path: Path) -> None:
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps(JWKS))
    with pytest.raises(ConfigurationError, match="issuer and audience"):
        ProxyAssertionAuth.configure(header="X", jwks=str(jwks), issuer=ISSUER, audience="")
    with pytest.raises(ConfigurationError, match="public-key"):
        ProxyAssertionAuth.configure(
            header="X", jwks=str(jwks), issuer=ISSUER, audience=AUDIENCE, algorithms=["HS256"]
        )
    with pytest.raises(ConfigurationError, match="cannot read"):
        Jwks(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text('{"keys": "no"}')
    with pytest.raises(ConfigurationError, match="not a JWKS"):
        Jwks(str(tmp_path / "bad.json"))


_HEADER_TEXT = st.text(
    st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=80
)


@pytest.fixture(scope="module")
def hostile_chains(tmp_path_factory: pytest.TempPathFactory) -> list[Authenticators]:
    jwks = tmp_path_factory.mktemp("jwks") / "jwks.json"
    jwks.write_text(json.dumps(JWKS))
    return [
        build_auth(host="127.0.0.1", trust_proxy_header=True, tokens_env=CREDENTIALS),
        build_auth(
            host="0.0.0.0",
            assertion=_assertion(str(jwks), "Cf-Access-Jwt-Assertion"),
            tokens_env=CREDENTIALS,
        ),
        build_auth(
            host="127.0.0.1",
            assertion=_assertion(str(jwks), "Authorization"),
            tokens_env=CREDENTIALS,
            dev_user="dev",
        ),
    ]


@settings(max_examples=300, deadline=None)
@given(
    user=st.none() | _HEADER_TEXT,
    groups=st.none() | _HEADER_TEXT,
    authorization=st.none()
    | _HEADER_TEXT
    | st.builds(lambda t: "Bearer " + t, _HEADER_TEXT)
    | st.builds(lambda t: "Basic " + t, _HEADER_TEXT)
    | st.builds(lambda t: "Basic " + base64.b64encode(t.encode()).decode(), st.text(max_size=30))
    | st.sampled_from([f"Bearer {_token()}", f"Bearer {_token(OTHER_KEY)}"]),
    assertion=st.none() | _HEADER_TEXT | st.sampled_from([_token(), _token(OTHER_KEY)]),
    peer=st.sampled_from([("127.0.0.1", 3), ("::ffff:127.0.0.1", 3), UNTRUSTED_PEER, None]),
)
def test_hostile_identity_headers_give_an_identity_or_a_refusal_never_an_error(
    hostile_chains: list[Authenticators],
    user: str | None,
    groups: str | None,
    authorization: str | None,
    assertion: str | None,
    peer: tuple[str, int] | None,
) -> None:
    """Whatever the headers, each chain answers an identity, none (401) or `Rejected`
    (401): nothing else escapes to become a 500."""
    sent = {
        "x-forwarded-user": user,
        "x-forwarded-groups": groups,
        "authorization": authorization,
        "cf-access-jwt-assertion": assertion,
    }
    scope: dict[str, Any] = {
        "type": "http",
        "method": "GET",
        "path": "/api/session",
        "query_string": b"",
        "headers": [(k.encode(), v.encode("latin-1")) for k, v in sent.items() if v is not None],
        "client": peer,
    }
    for auth in hostile_chains:
        try:
            identity = auth.authenticate(Request(scope))
        except Rejected:
            continue
        assert identity is None or identity.name, (sent, identity)


async def test_rejected_identity_headers_are_answered_401_by_every_route(
    dev_env: WorkflowEnvironment,
) -> None:
    auth = build_auth(host="127.0.0.1", trust_proxy_header=True, tokens_env=CREDENTIALS)
    async with _inbox(dev_env, auth, peer=UNTRUSTED_PEER) as client:
        for path in ("/", "/api/pending", "/api/session", "/conversations/x"):
            response = await client.get(path, headers=FORGED)
            assert response.status_code == 401, (path, response.text)
        response = await client.post("/api/conversations/x/messages", headers=FORGED, json={})
        assert response.status_code == 401
