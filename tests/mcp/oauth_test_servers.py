"""An OAuth authorization server (authlib) and an MCP server that requires its tokens.

    python tests/mcp/oauth_test_servers.py --log FILE --as-port P --rs-port Q

* The authorization server (authlib's Flask integration, on
  `http://127.0.0.1:P`): RFC 8414 metadata, dynamic client registration
  (RFC 7591), the authorization-code grant with PKCE (S256, required), the
  refresh-token grant (rotating), RFC 9207 `iss` in redirects, and RFC 8707:
  the `resource` asked for at `/authorize` is bound to the code and its tokens
  (`aud`). `GET /authorize` shows a consent form; `POST /authorize` with
  `confirm=yes` approves (a 302 to the client's redirect URI), `confirm=no`
  denies (`error=access_denied`). Test hooks: `POST /introspect` (what the
  resource server asks: `active`, `aud`, `scope`, `client_id`), `POST
  /admin/expire` (every access token expires now), `POST /admin/revoke`
  (every token, refresh tokens too, revoked).
* The MCP server (the `mcp` SDK's `MCPServer`, streamable HTTP at
  `http://127.0.0.1:Q/mcp`) with the SDK's bearer-auth middleware: a token
  verifier that introspects at the authorization server, `AuthSettings` that
  publish protected resource metadata naming it, and `validate_token_resource`
  (tokens must be bound to this server). Its tool `whoami` answers the
  token's client id; with `--ask`, `open_notes` asks whose notes first (a
  form, as an input-required result).

Every secret the servers issue or receive (client secrets, codes, PKCE
verifiers, access and refresh tokens) is appended to the JSON-lines `--log`,
so the tests can look for each of them where it must not be.
`--authorization-servers URL` makes the resource metadata name another
authorization server and `--authorize-endpoint URL` makes the authorization
server's metadata name another authorization page (hostile metadata).
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import urlsplit

import httpx
import uvicorn
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc9207 import IssuerParameter
from flask import Flask, jsonify, request
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    Resolve,
)
from pydantic import BaseModel
from werkzeug.serving import make_server

parser = argparse.ArgumentParser()
parser.add_argument("--log", required=True)
parser.add_argument("--as-port", type=int, required=True)
parser.add_argument("--rs-port", type=int, required=True)
parser.add_argument("--access-ttl", type=int, default=3600)
parser.add_argument("--authorization-servers", default="")
parser.add_argument("--authorize-endpoint", default="")
parser.add_argument("--ask", action="store_true")
options = parser.parse_args()
LOG = Path(options.log)
ISSUER = f"http://127.0.0.1:{options.as_port}"
RESOURCE = f"http://127.0.0.1:{options.rs_port}/mcp"
_lock = threading.Lock()


def log(**event: Any) -> None:
    with _lock, LOG.open("a", encoding="utf-8") as file:
        file.write(json.dumps(event) + "\n")


# ----------------------------------------------------------------- storage


class Client(ClientMixin):
    def __init__(self, info: dict[str, Any], metadata: dict[str, Any]) -> None:
        self.client_id: str = info["client_id"]
        self.client_secret: str | None = info.get("client_secret")
        self.metadata = metadata

    def get_client_id(self) -> str:
        return self.client_id

    def get_default_redirect_uri(self) -> str:
        return self.metadata["redirect_uris"][0]

    def get_allowed_scope(self, scope: str) -> str:
        return scope or "notes"

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        # RFC 8252 §7.3: a loopback redirect URI matches on any port.
        asked = urlsplit(redirect_uri)
        for registered in map(urlsplit, self.metadata["redirect_uris"]):
            same = (asked.scheme, asked.hostname, asked.path, asked.query) == (
                registered.scheme,
                registered.hostname,
                registered.path,
                registered.query,
            )
            if same and (asked.port == registered.port or asked.hostname == "127.0.0.1"):
                return True
        return False

    def check_client_secret(self, client_secret: str) -> bool:
        return self.client_secret is not None and client_secret == self.client_secret

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.metadata.get("token_endpoint_auth_method", "client_secret_basic")

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in ("authorization_code", "refresh_token")


class Code:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.code_challenge = fields["code_challenge"]
        self.code_challenge_method = fields["code_challenge_method"]

    def get_redirect_uri(self) -> str:
        return self.fields["redirect_uri"]

    def get_scope(self) -> str:
        return self.fields["scope"]

    def get_code_challenge(self) -> str:
        return self.fields["code_challenge"]

    def get_code_challenge_method(self) -> str:
        return self.fields["code_challenge_method"]

    def get_nonce(self) -> None:
        return None

    def get_auth_time(self) -> int:
        return int(self.fields["issued_at"])


class Token:
    def __init__(self, **fields: Any) -> None:
        self.fields = fields
        self.revoked = False

    def check_client(self, client: Client) -> bool:
        return self.fields["client_id"] == client.client_id

    def get_scope(self) -> str:
        return self.fields["scope"]

    def get_expires_in(self) -> int:
        return int(self.fields["expires_in"])

    def is_revoked(self) -> bool:
        return self.revoked

    def is_expired(self) -> bool:
        return time.time() >= self.fields["expires_at"]

    def get_user(self) -> str:
        return "ada"

    def get_client(self) -> Client:
        return clients[self.fields["client_id"]]


clients: dict[str, Client] = {}
codes: dict[str, Code] = {}
tokens: list[Token] = []


def save_token(token: dict[str, Any], oauth_request: Any) -> None:
    resource = getattr(oauth_request, "bound_resource", None)
    record = Token(
        **token,
        client_id=oauth_request.client.client_id,
        aud=resource,
        expires_at=time.time() + int(token["expires_in"]),
    )
    tokens.append(record)
    log(
        event="token",
        access_token=token["access_token"],
        refresh_token=token.get("refresh_token"),
        resource=resource,
    )


# ----------------------------------------------------------------- grants


class AuthorizationCodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]

    def save_authorization_code(self, code: str, oauth_request: Any) -> None:
        data = oauth_request.payload.data
        codes[code] = Code(
            client_id=oauth_request.client.client_id,
            redirect_uri=oauth_request.payload.redirect_uri,
            scope=oauth_request.payload.scope or "notes",
            code_challenge=data.get("code_challenge"),
            code_challenge_method=data.get("code_challenge_method"),
            resource=data.get("resource"),
            issued_at=time.time(),
        )
        log(event="code", code=code, resource=data.get("resource"))

    def query_authorization_code(self, code: str, client: Client) -> Code | None:
        found = codes.get(code)
        return found if found and found.fields["client_id"] == client.client_id else None

    def delete_authorization_code(self, authorization_code: Code) -> None:
        codes.pop(next(k for k, v in codes.items() if v is authorization_code), None)

    def authenticate_user(self, authorization_code: Code) -> str:
        # RFC 8707: the token is bound to the resource asked for at /authorize.
        self.request.bound_resource = authorization_code.fields["resource"]
        log(
            event="token_request",
            grant_type="authorization_code",
            resource=self.request.payload.data.get("resource"),
            code_verifier=self.request.payload.data.get("code_verifier"),
        )
        return "ada"


class RefreshTokenGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post", "none"]
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> Token | None:
        for token in tokens:
            if token.fields.get("refresh_token") == refresh_token and not token.revoked:
                return token
        return None

    def authenticate_user(self, refresh_token: Token) -> str:
        self.request.bound_resource = refresh_token.fields["aud"]
        log(
            event="token_request",
            grant_type="refresh_token",
            resource=self.request.payload.data.get("resource"),
        )
        return "ada"

    def revoke_old_credential(self, refresh_token: Token) -> None:
        refresh_token.revoked = True


class Registration(ClientRegistrationEndpoint):
    def authenticate_token(self, oauth_request: Any) -> bool:
        return True  # open registration, as MCP clients expect

    def get_server_metadata(self) -> dict[str, Any]:
        return metadata()

    def save_client(self, info: dict[str, Any], client_metadata: dict[str, Any], _: Any) -> Client:
        client = Client(info, client_metadata)
        clients[client.client_id] = client
        log(event="client", client_id=client.client_id, client_secret=client.client_secret)
        return client


class Issuer(IssuerParameter):
    def get_issuer(self) -> str:
        return ISSUER


def metadata() -> dict[str, Any]:
    return {
        "issuer": ISSUER,
        "authorization_endpoint": options.authorize_endpoint or f"{ISSUER}/authorize",
        "token_endpoint": f"{ISSUER}/token",
        "registration_endpoint": f"{ISSUER}/register",
        "scopes_supported": ["notes"],
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": [
            "client_secret_basic",
            "client_secret_post",
            "none",
        ],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
    }


flask_app = Flask(__name__)
flask_app.config["OAUTH2_REFRESH_TOKEN_GENERATOR"] = True
flask_app.config["OAUTH2_TOKEN_EXPIRES_IN"] = {
    "authorization_code": options.access_ttl,
    "refresh_token": options.access_ttl,
}
server = AuthorizationServer(flask_app, query_client=clients.get, save_token=save_token)
server.register_grant(AuthorizationCodeGrant, [CodeChallenge(required=True)])
server.register_grant(RefreshTokenGrant)
server.register_endpoint(Registration)
server.register_extension(Issuer())


@flask_app.get("/.well-known/oauth-authorization-server")
def well_known() -> Any:
    return jsonify(metadata())


@flask_app.route("/authorize", methods=["GET", "POST"])
def authorize() -> Any:
    if request.method == "GET":
        grant = server.get_consent_grant(end_user="ada")
        log(event="authorize", resource=request.args.get("resource"), client=grant.client.client_id)
        return "<form method=post><button name=confirm value=yes>Allow</button></form>"
    approved = request.form.get("confirm") == "yes"
    return server.create_authorization_response(grant_user="ada" if approved else None)


@flask_app.post("/token")
def issue_token() -> Any:
    return server.create_token_response()


@flask_app.post("/register")
def register() -> Any:
    return server.create_endpoint_response("client_registration")


@flask_app.post("/introspect")
def introspect() -> Any:
    presented = request.form.get("token", "")
    for token in tokens:
        if token.fields["access_token"] == presented:
            if token.revoked or token.is_expired():
                break
            return jsonify(
                active=True,
                client_id=token.fields["client_id"],
                scope=token.fields["scope"],
                aud=token.fields["aud"],
                exp=int(token.fields["expires_at"]),
            )
    return jsonify(active=False)


@flask_app.post("/admin/expire")
def expire() -> Any:
    for token in tokens:
        token.fields["expires_at"] = time.time() - 1
    return jsonify(expired=len(tokens))


@flask_app.post("/admin/revoke")
def revoke() -> Any:
    for token in tokens:
        token.revoked = True
    return jsonify(revoked=len(tokens))


# ----------------------------------------------------------------- resource server


class IntrospectingVerifier:
    """The SDK's `TokenVerifier`, asking the authorization server (RFC 7662 style)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        async with httpx.AsyncClient() as http:
            answer = (await http.post(f"{ISSUER}/introspect", data={"token": token})).json()
        if not answer.get("active"):
            return None
        return AccessToken(
            token=token,
            client_id=answer["client_id"],
            scopes=str(answer["scope"]).split(),
            expires_at=answer["exp"],
            resource=answer["aud"],
        )


mcp = MCPServer(
    "oauth-notes",
    token_verifier=IntrospectingVerifier(),
    auth=AuthSettings(
        issuer_url=options.authorization_servers or ISSUER,  # pyright: ignore[reportArgumentType]
        resource_server_url=RESOURCE,  # pyright: ignore[reportArgumentType]
        required_scopes=["notes"],
        validate_token_resource=True,
    ),
)


@mcp.tool()
async def whoami(ctx: Context) -> str:
    """Say which OAuth client called (read-only)."""
    log(event="call", tool="whoami")
    return "a client of the notes server"


class Owner(BaseModel):
    name: str


def ask_owner() -> Elicit[Owner]:
    return Elicit("Whose notes should I open?", Owner)


async def open_notes(owner: Annotated[ElicitationResult[Owner], Resolve(ask_owner)]) -> str:
    """Open someone's notes: asks whose first (a form the person answers; read-only)."""
    said = owner.data.name if isinstance(owner, AcceptedElicitation) else owner.action
    log(event="call", tool="open_notes", owner=said)
    return f"the notes of {said}"


if options.ask:  # off by default: the other OAuth tests count one tool
    mcp.tool()(open_notes)


if __name__ == "__main__":
    web = make_server("127.0.0.1", options.as_port, flask_app, threaded=True)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    log(event="start")
    uvicorn.run(
        mcp.streamable_http_app(),
        host="127.0.0.1",
        port=options.rs_port,
        log_level="warning",
    )
