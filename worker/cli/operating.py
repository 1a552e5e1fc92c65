"""Commands for operators around the workers: `inbox`, `health`, `check-upgrade`, `codec-server`."""

from __future__ import annotations

import base64
import os
import secrets
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from durable_tools.codec import load_codec
from durable_tools.decision_keys import generate_ed25519_entries
from durable_tools.errors import ConfigurationError
from durable_tools.worker.cli.shared import (
    DEFAULT_ADDRESS,
    DEFAULT_INBOX_PORT,
    DEFAULT_NAMESPACE,
    EXIT_BAD_INPUT,
    EXIT_FAILURE,
    FOREVER,
    Address,
    Connection,
    Namespace,
    cli_options,
    fail,
    out,
    run_reported,
    stop_on_signals,
    whoami,
)
from durable_tools.worker.extras import require_extra


def inbox_command(
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    host: Annotated[
        str, typer.Option(help="Address to bind; dev mode binds only 127.0.0.1.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind.")] = DEFAULT_INBOX_PORT,
    dev_user: Annotated[
        str | None,
        typer.Option(
            "--dev-user",
            help="Dev mode: everyone reaching the inbox is this name (127.0.0.1 only). The "
            "default when no other authentication is given: your login name.",
        ),
    ] = None,
    trust_proxy_header: Annotated[
        bool,
        typer.Option(
            "--trust-proxy-header",
            help="Take the user (and groups) from headers a reverse proxy sets, from the "
            "--trusted-proxy addresses only (default, on 127.0.0.1: this machine). On another "
            "address it refuses to start without --trusted-proxy or --proxy-jwks.",
        ),
    ] = False,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            "--trusted-proxy",
            metavar="CIDR",
            help="The proxy's address range (e.g. 127.0.0.1/32 for a sidecar), checked against "
            "the connection's peer, never X-Forwarded-For. Identity headers from anyone else "
            "are refused (401). Repeatable.",
        ),
    ] = None,
    proxy_jwks: Annotated[
        str | None,
        typer.Option(
            "--proxy-jwks",
            metavar="URL|FILE",
            help="Verify the proxy's signed assertion (a JWT in --proxy-jwt-header) against "
            "the issuer's keys (a JWKS URL or file) instead of trusting its plain headers.",
        ),
    ] = None,
    proxy_jwt_header: Annotated[
        str,
        typer.Option(
            help="The header with the proxy's JWT: X-Goog-IAP-JWT-Assertion (Google IAP), "
            "Cf-Access-Jwt-Assertion (Cloudflare Access), Authorization (oauth2-proxy "
            "--pass-authorization-header)."
        ),
    ] = "Authorization",
    proxy_jwt_issuer: Annotated[
        str | None, typer.Option(help="The JWT's required issuer (iss).")
    ] = None,
    proxy_jwt_audience: Annotated[
        str | None, typer.Option(help="The JWT's required audience (aud).")
    ] = None,
    proxy_jwt_user_claim: Annotated[
        str, typer.Option(help="The JWT claim naming the user.")
    ] = "email",
    proxy_jwt_groups_claim: Annotated[
        str, typer.Option(help="The JWT claim listing the user's groups ('': none).")
    ] = "groups",
    proxy_jwt_algorithm: Annotated[
        list[str] | None,
        typer.Option(
            "--proxy-jwt-algorithm",
            help="A signature algorithm accepted (default RS256 and ES256). Repeatable.",
        ),
    ] = None,
    user_header: Annotated[str, typer.Option(help="The proxy's user header.")] = (
        "X-Forwarded-User"
    ),
    groups_header: Annotated[str, typer.Option(help="The proxy's groups header.")] = (
        "X-Forwarded-Groups"
    ),
    tokens_file: Annotated[
        Path | None,
        typer.Option(
            "--tokens-file",
            help="Static tokens / basic auth, lines NAME:SECRET[:GROUPS] (SECRET may be "
            "sha256:HEX); else $DURABLE_TOOLS_INBOX_TOKENS.",
        ),
    ] = None,
    decision_key_file: Annotated[
        Path | None,
        typer.Option(
            "--decision-key-file",
            help="Sign decisions with the key in this file: KEY_ID:BASE64 (an HMAC secret, one "
            "of the workers' DURABLE_TOOLS_DECISION_KEYS) or KEY_ID:ed25519-private:BASE64 "
            "(its public key on the workers; `durable-tools keygen`); else "
            "$DURABLE_TOOLS_INBOX_DECISION_KEY; else unsigned.",
        ),
    ] = None,
    team: Annotated[
        list[str] | None,
        typer.Option(
            "--team",
            help="GROUP=TEAM: members of GROUP belong to TEAM and see its conversations "
            "(repeatable; a group not named here is the team of the same name).",
        ),
    ] = None,
    admin_group: Annotated[
        list[str] | None,
        typer.Option(
            "--admin-group", help="Members of this group see every conversation (repeatable)."
        ),
    ] = None,
    require_team: Annotated[
        bool,
        typer.Option(
            "--require-team",
            help="Conversations started without a team are shown to admins only (default: "
            "to everyone).",
        ),
    ] = False,
) -> None:
    """Serve the approval inbox: a web page and an HTTP API for the people who decide.

    Each person sees only the conversations of their teams (a conversation's
    team is set when it starts: `run --team`, `start(..., team=...)`).
    Outside dev mode it needs $DURABLE_TOOLS_INBOX_SECRET, the CSRF secret
    every replica shares (at least 32 bytes).
    """
    require_extra("durable-tools inbox", "inbox")
    from durable_tools.worker.inbox import build_auth, serve_inbox
    from durable_tools.worker.inbox.assertions import DEFAULT_ALGORITHMS, ProxyAssertionAuth
    from durable_tools.worker.inbox.authz import TeamAuthorizer, parse_team_map
    from durable_tools.worker.inbox.server import (
        DECISION_KEY_ENV,
        TOKENS_ENV,
        parse_decision_key,
        require_csrf_secret,
    )

    tokens_env = os.environ.get(TOKENS_ENV)
    if dev_user is None and not (trust_proxy_header or proxy_jwks or tokens_file or tokens_env):
        dev_user = whoami() or "dev"
    try:
        assertion = None
        if proxy_jwks is not None:
            assertion = ProxyAssertionAuth.configure(
                header=proxy_jwt_header,
                jwks=proxy_jwks,
                issuer=proxy_jwt_issuer or "",
                audience=proxy_jwt_audience or "",
                user_claim=proxy_jwt_user_claim,
                groups_claim=proxy_jwt_groups_claim or None,
                algorithms=proxy_jwt_algorithm or DEFAULT_ALGORITHMS,
            )
        auth = build_auth(
            host=host,
            dev_user=dev_user,
            trust_proxy_header=trust_proxy_header,
            user_header=user_header,
            groups_header=groups_header,
            trusted_proxies=trusted_proxy or (),
            assertion=assertion,
            tokens_file=tokens_file,
            tokens_env=tokens_env,
        )
        csrf_secret = require_csrf_secret(auth)
        if decision_key_file is not None:
            try:
                key_text = decision_key_file.read_text(encoding="utf-8")
            except OSError as exc:
                problem = f"cannot read {decision_key_file}: {exc.strerror}"
                raise ConfigurationError(problem) from exc
            signing_key = parse_decision_key(key_text, source=str(decision_key_file))
        else:
            signing_key = parse_decision_key(os.environ.get(DECISION_KEY_ENV, ""))
        authorizer = TeamAuthorizer(
            parse_team_map(team or []), frozenset(admin_group or []), require_team
        )
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)

    connection = Connection(address, namespace, FOREVER)

    async def main() -> None:
        conversations = await connection.conversations()
        stop = stop_on_signals()
        modes = ", ".join(type(a).__name__ for a in auth.chain)

        def ready(url: str) -> None:
            out.print(f"Inbox: {url}", soft_wrap=True, markup=False)
            out.print(
                f"Temporal at {address}, namespace {namespace}; authentication: {modes}; "
                f"decisions {'signed with key ' + signing_key[0] if signing_key else 'unsigned'}; "
                "Ctrl-C stops it",
                soft_wrap=True,
                markup=False,
            )

        await serve_inbox(
            conversations,
            auth,
            host=host,
            port=port,
            stop=stop,
            on_ready=ready,
            decision_key=signing_key,
            authorizer=authorizer,
            csrf_secret=csrf_secret,
        )
        out.print("inbox stopped")

    connection.run(main)


def health_command(
    file: Annotated[
        Path,
        typer.Option(
            "--file", envvar="DURABLE_TOOLS_HEALTH_FILE", help="The worker's --health-file."
        ),
    ],
    max_age: Annotated[
        float, typer.Option(min=1, help="Seconds after which the file is stale.")
    ] = 30.0,
) -> None:
    """Exit 0 if the worker writing --file is alive (a container health check), else 1."""
    from durable_tools.worker.health import health_problem

    problem = health_problem(file, max_age)
    if problem is not None:
        fail(problem)
    out.print("healthy")


def keygen_command(
    key_id: Annotated[str, typer.Option("--key-id", help="The id both sides know the key by.")],
    hmac_key: Annotated[
        bool,
        typer.Option(
            "--hmac",
            help="A 32-byte HMAC secret (every worker holds it too) instead of an Ed25519 pair.",
        ),
    ] = False,
) -> None:
    """Print a new decision key: the inbox's signing entry and the workers' entry.

    Ed25519 (default): the inbox signs with the private key
    (`--decision-key-file` or DURABLE_TOOLS_INBOX_DECISION_KEY) and workers
    verify with the public key (DURABLE_TOOLS_DECISION_KEYS), so no worker
    host can sign. `--hmac`: one shared secret for both (docs/approvals.md).
    """
    if not key_id or "," in key_id or ":" in key_id:
        fail("--key-id must be non-empty, without ':' or ','", EXIT_BAD_INPUT)
    if hmac_key:
        entry = f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode()}"
        signing, verifying = entry, entry
    else:
        try:
            signing, verifying = generate_ed25519_entries(key_id)
        except ConfigurationError as exc:
            fail(str(exc), EXIT_BAD_INPUT)
    print(f"inbox (signs; keep it secret): {signing}")
    print(f"workers (DURABLE_TOOLS_DECISION_KEYS): {verifying}")


def check_upgrade_command(
    query: Annotated[
        str | None,
        typer.Option(help="Visibility query (default: every running AgentWorkflow)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Most runs to replay.")] = 100,
    address: Address = DEFAULT_ADDRESS,
    namespace: Namespace = DEFAULT_NAMESPACE,
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds for the whole check.")
    ] = 300.0,
) -> None:
    """Replay running conversations against the code installed here; exit 1 if any would fail."""
    from durable_tools.worker.check_upgrade import DEFAULT_QUERY, check_upgrade

    connection = Connection(address, namespace, timeout)

    async def main() -> list[Any]:
        client = await connection.client()
        return await check_upgrade(client, query=query or DEFAULT_QUERY, limit=limit)

    verdicts = connection.run(main)
    failing = [v for v in verdicts if v.problem]
    for verdict in verdicts:
        mark = "✗" if verdict.problem else "✓"
        line = f"{mark} {verdict.workflow_id} (run {verdict.run_id})"
        out.print(
            escape(line + (f": {verdict.problem}" if verdict.problem else "")), soft_wrap=True
        )
    out.print(
        f"{len(verdicts)} replayed, {len(failing)} would fail on this code"
        + (" (keep their old workers, or pin them: docs/operations.md)" if failing else "")
    )
    if failing:
        raise typer.Exit(EXIT_FAILURE)


def codec_server_command(
    codec: Annotated[
        str | None,
        typer.Argument(help="The payload codec 'module:attr' (default: --codec)."),
    ] = None,
    ip: Annotated[
        str,
        typer.Option(help="Address to bind; any but loopback needs --tokens-file."),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8081,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(
            "--cors-origin",
            help="Origin allowed to call it: the Temporal Web UI's (default "
            "http://localhost:8233 and http://127.0.0.1:8233). Repeatable.",
        ),
    ] = None,
    tokens_file: Annotated[
        Path | None,
        typer.Option(
            "--tokens-file",
            help="Who may call it: lines NAME:SECRET[:GROUPS] as the inbox's; a request sends "
            "Authorization: Bearer SECRET (the Web UI passes its user's header). Else "
            "$DURABLE_TOOLS_CODEC_TOKENS; else anyone who reaches it (loopback only).",
        ),
    ] = None,
    encode: Annotated[
        bool,
        typer.Option(
            "--encode", help="Serve POST /encode too (an encryption oracle; default: /decode only)."
        ),
    ] = False,
) -> None:
    """Serve Temporal's codec server protocol (POST /decode, /encode if asked) for the Web UI."""
    require_extra("durable-tools codec-server", "inbox")  # starlette and uvicorn
    from durable_tools.worker.codec_server import DEFAULT_ORIGINS, TOKENS_ENV, serve
    from durable_tools.worker.inbox.auth import Authenticators, TokenAuth

    spec = codec or cli_options.codec_spec
    if not spec:
        fail("give the codec: durable-tools codec-server module:attr", EXIT_BAD_INPUT)
    tokens_env = os.environ.get(TOKENS_ENV)
    try:
        loaded = load_codec(spec)
        auth = None
        if tokens_file is not None:
            auth = Authenticators([TokenAuth.from_file(tokens_file)])
        elif tokens_env:
            auth = Authenticators([TokenAuth.parse(tokens_env, source=TOKENS_ENV)])
    except ConfigurationError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    origins = tuple(cors_origin) if cors_origin else DEFAULT_ORIGINS

    def ready(url: str) -> None:
        out.print(f"Codec server: {url} (allowing {', '.join(origins)})", soft_wrap=True)
        served = "/decode and /encode" if encode else "/decode"
        who = "tokens" if auth is not None else "none (loopback only)"
        out.print(f"Serving {served}; authentication: {who}", soft_wrap=True)
        out.print("In the Web UI: Settings → Codec Server → this URL")

    run_reported(
        lambda: serve(
            loaded, host=ip, port=port, origins=origins, on_ready=ready, auth=auth, encode=encode
        ),
        address=f"{ip}:{port}",
        namespace="",
        timeout=FOREVER,
    )
