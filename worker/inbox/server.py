"""Serving the inbox: choosing the authenticators, running uvicorn until told to stop."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import uvicorn

from durable_tools.client import Conversations
from durable_tools.decision_keys import SigningKey, parse_signing_key
from durable_tools.errors import ConfigurationError
from durable_tools.worker.dev_server import port_in_use
from durable_tools.worker.inbox.app import create_app
from durable_tools.worker.inbox.assertions import ProxyAssertionAuth
from durable_tools.worker.inbox.auth import (
    LOOPBACK_NETWORKS,
    Authenticator,
    Authenticators,
    DevAuth,
    ProxyHeaderAuth,
    TokenAuth,
    parse_networks,
)
from durable_tools.worker.inbox.authz import Authorizer
from durable_tools.worker.inbox.feeds import STREAMS_PER_IDENTITY
from durable_tools.worker.inbox.web import State
from durable_tools.worker.loopback import is_loopback_address

__all__ = [
    "CSRF_SECRET_ENV",
    "DECISION_KEY_ENV",
    "LOCAL_HOSTS",
    "MIN_CSRF_SECRET_BYTES",
    "TOKENS_ENV",
    "build_auth",
    "require_csrf_secret",
    "parse_decision_key",
    "serve_inbox",
]

TOKENS_ENV = "DURABLE_TOOLS_INBOX_TOKENS"
"""Environment variable with credential lines `NAME:SECRET[:GROUPS]` (one a line)."""

DECISION_KEY_ENV = "DURABLE_TOOLS_INBOX_DECISION_KEY"
"""Environment variable with the key the inbox signs decisions with: `KEY_ID:BASE64`."""

CSRF_SECRET_ENV = "DURABLE_TOOLS_INBOX_SECRET"
"""Environment variable with the CSRF tokens' HMAC key, the same on every replica."""

MIN_CSRF_SECRET_BYTES = 32
"""Shortest CSRF secret accepted (bytes of its UTF-8 text; `head -c 32 /dev/urandom | base64`)."""


def require_csrf_secret(
    auth: Authenticators, environ: Mapping[str, str] | None = None
) -> bytes | None:
    """The CSRF secret from `$DURABLE_TOOLS_INBOX_SECRET`, required outside dev mode.

    A form's CSRF token is an HMAC under this secret: an inbox with a random
    one per process refuses (403) forms another replica served, and every
    form after a restart.

    Args:
        auth: The inbox's authenticators; with `DevAuth` among them (dev mode,
            127.0.0.1 only, one process) a missing secret is allowed.
        environ: Where to read it (default `os.environ`).

    Returns:
        The secret's bytes, or `None` (dev mode without one: random per process).

    Raises:
        ConfigurationError: Not set outside dev mode, or shorter than
            `MIN_CSRF_SECRET_BYTES`.
    """
    text = (os.environ if environ is None else environ).get(CSRF_SECRET_ENV, "").strip()
    if text:
        if len(text.encode()) < MIN_CSRF_SECRET_BYTES:
            raise ConfigurationError(
                f"${CSRF_SECRET_ENV} is shorter than {MIN_CSRF_SECRET_BYTES} bytes; "
                "make one with: head -c 32 /dev/urandom | base64"
            )
        return text.encode()
    if any(isinstance(a, DevAuth) for a in auth.chain):
        return None
    raise ConfigurationError(
        f"${CSRF_SECRET_ENV} is not set: every inbox replica needs the same CSRF secret "
        "(head -c 32 /dev/urandom | base64); only dev mode makes a random one"
    )


def parse_decision_key(
    text: str, *, source: str = DECISION_KEY_ENV
) -> tuple[str, SigningKey] | None:
    """The inbox's signing key: `KEY_ID:BASE64` (HMAC) or `KEY_ID:ed25519-private:BASE64`.

    An HMAC key is one of the workers' `DURABLE_TOOLS_DECISION_KEYS`; an
    Ed25519 private key's public half is (`durable-tools keygen` prints both).

    Args:
        text: One entry (blanks around it ignored; `""`: no key).
        source: Where it came from, for the error message.

    Returns:
        `(key_id, key)`, or `None` for blank text.

    Raises:
        ConfigurationError: Not one well-formed entry, or an HMAC key
            shorter than 32 bytes (`durable_tools.decision_keys.parse_signing_key`).
    """
    return parse_signing_key(text, source=source)


LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
"""Hosts dev mode may bind."""


def build_auth(
    *,
    host: str,
    dev_user: str | None = None,
    trust_proxy_header: bool = False,
    user_header: str = "X-Forwarded-User",
    groups_header: str = "X-Forwarded-Groups",
    trusted_proxies: Sequence[str] = (),
    assertion: ProxyAssertionAuth | None = None,
    tokens_file: Path | None = None,
    tokens_env: str | None = None,
) -> Authenticators:
    """The authenticators the options ask for.

    Proxy identity is trusted in one of two ways: headers from the proxy's
    own addresses (`trusted_proxies`; on a loopback `host` the default is
    this machine), or a JWT the proxy signed (`assertion`), then from any
    peer unless `trusted_proxies` are named too. With `assertion` the plain
    user and groups headers are not read.

    Args:
        host: The address the server binds (dev mode needs a local one).
        dev_user: Dev mode: everyone is this name.
        trust_proxy_header: Accept the proxy's user and groups headers.
        user_header: The proxy's user header.
        groups_header: The proxy's groups header.
        trusted_proxies: CIDR ranges of the proxy's addresses (`127.0.0.1/32`),
            checked against the TCP peer.
        assertion: Verify a signed JWT from the proxy instead of its headers.
        tokens_file: A file of credential lines (`TokenAuth`).
        tokens_env: Credential lines from the environment (`TOKENS_ENV`).

    Returns:
        The chain, proxy first, then tokens, then dev mode.

    Raises:
        ConfigurationError: No authentication chosen; dev mode on a
            non-local address; proxy headers trusted on a non-local address
            with neither trusted proxies nor an assertion; trusted proxies
            without proxy authentication; a malformed range.
    """
    chain: list[Authenticator] = []
    realm: str | None = None
    networks = parse_networks(trusted_proxies)
    if networks and not (trust_proxy_header or assertion):
        raise ConfigurationError(
            "--trusted-proxy names the proxy whose identity headers count: add "
            "--trust-proxy-header (or verify its signed assertion with --proxy-jwks)"
        )
    if assertion is not None:
        chain.append(dataclasses.replace(assertion, trusted_proxies=networks or None))
    elif trust_proxy_header:
        if not networks:
            if not is_loopback_address(host):
                raise ConfigurationError(
                    f"--trust-proxy-header on {host} would take X-Forwarded-User from anyone "
                    "who reaches it: name the proxy with --trusted-proxy CIDR, verify its "
                    "signed assertion with --proxy-jwks, or bind 127.0.0.1"
                )
            networks = LOOPBACK_NETWORKS
        chain.append(ProxyHeaderAuth(user_header, groups_header, networks))
    if tokens_file is not None:
        chain.append(TokenAuth.from_file(tokens_file))
        realm = "durable-tools inbox"
    elif tokens_env:
        chain.append(TokenAuth.parse(tokens_env, source=TOKENS_ENV))
        realm = "durable-tools inbox"
    if dev_user is not None:
        if host not in LOCAL_HOSTS:
            raise ConfigurationError(
                f"dev mode (everyone is {dev_user!r}) binds 127.0.0.1 only, not {host}; "
                "use --trust-proxy-header or --tokens-file on other addresses"
            )
        chain.append(DevAuth(dev_user))
    if not chain:
        raise ConfigurationError(
            "no authentication: pass --dev (local only), --trust-proxy-header behind an "
            f"authenticating proxy, or --tokens-file / ${TOKENS_ENV}"
        )
    return Authenticators(chain, basic_realm=realm)


async def serve_inbox(
    conversations: Conversations,
    auth: Authenticators,
    *,
    host: str = "127.0.0.1",
    port: int = 8234,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[str], None] | None = None,
    refresh_seconds: float = 5.0,
    decision_key: tuple[str, SigningKey] | None = None,
    authorizer: Authorizer | None = None,
    csrf_secret: bytes | None = None,
    streams_per_identity: int = STREAMS_PER_IDENTITY,
) -> None:
    """Serve the inbox until `stop` is set (or the task is cancelled).

    Args:
        conversations: The client API on the namespace to serve.
        auth: How requests authenticate.
        host: Address to bind.
        port: Port to bind.
        stop: Set to stop serving.
        on_ready: Called with the URL once the server listens.
        refresh_seconds: How often the list's live updates ask Temporal
            visibility for changes (0: pages update only when reloaded).
        decision_key: `(key_id, key)` to sign decisions with; default
            `$DURABLE_TOOLS_INBOX_DECISION_KEY` (`KEY_ID:BASE64`), else unsigned.
        authorizer: What each identity may see and do (default
            `TeamAuthorizer()`; `authz.py`).
        csrf_secret: The CSRF tokens' key; default `$DURABLE_TOOLS_INBOX_SECRET`,
            else random per process (`durable-tools inbox` refuses that outside
            dev mode: `require_csrf_secret`).
        streams_per_identity: Event streams one identity may hold open
            (default 16; `create_app`).

    Raises:
        ConfigurationError: The port is taken, or the decision key is malformed.
    """
    if port_in_use(host, port):
        raise ConfigurationError(
            f"port {port} on {host} is in use; pass another port (--port / --inbox-port)"
        )
    if csrf_secret is None:
        csrf_secret = os.environ.get(CSRF_SECRET_ENV, "").strip().encode() or None
    if decision_key is None:
        decision_key = parse_decision_key(os.environ.get(DECISION_KEY_ENV, ""))
    app = create_app(
        conversations,
        auth,
        csrf_secret=csrf_secret,
        refresh_seconds=refresh_seconds,
        decision_key=decision_key,
        authorizer=authorizer,
        streams_per_identity=streams_per_identity,
    )
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", lifespan="off", access_log=False
    )
    server = uvicorn.Server(config)

    async def serve() -> None:
        try:
            await server.serve()
        except SystemExit as exc:
            # uvicorn logs the OSError and calls sys.exit(3) when it cannot bind
            # (e.g. the port was taken since the check above). Raised in a task,
            # SystemExit leaves the caller's event loop at once: `durable-tools
            # dev` ended with status 3 and no `error:` line.
            reason = exc.__context__ if isinstance(exc.__context__, OSError) else exc
            raise ConfigurationError(
                f"the inbox could not listen on {host}:{port} ({reason}); "
                "pass another port (--port / --inbox-port)"
            ) from exc

    serving = asyncio.create_task(serve())
    try:
        while not server.started:
            if serving.done():
                await serving  # re-raises a bind failure
                raise ConfigurationError(f"the inbox could not listen on {host}:{port}")
            await asyncio.sleep(0.05)
        if on_ready is not None:
            shown = f"[{host}]" if ":" in host else host
            on_ready(f"http://{shown}:{port}/")
        if stop is None:
            await serving
        else:
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
    finally:
        server.should_exit = True
        state: State = app.state.inbox
        await state.service.feeds.close()  # open event streams end, uvicorn can stop
        await asyncio.wait({serving}, timeout=5)
