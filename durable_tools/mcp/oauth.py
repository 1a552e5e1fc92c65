"""OAuth for streamable-HTTP MCP servers: the glue around the `mcp` SDK's client.

The SDK's `OAuthClientProvider` (an `httpx2.Auth`) does the protocol: protected
resource and authorization server metadata discovery (RFC 9728, RFC 8414),
dynamic client registration (RFC 7591), PKCE, resource indicators (RFC 8707),
the `iss` check (RFC 9207), the token exchange and refresh. What it lacks, and
this module adds:

* **Two modes.** `durable-tools mcp login NAME` runs the SDK's flow as it is,
  interactively (`durable_tools.mcp.oauth_login`). A worker never does: it
  sends the stored access token, refreshes it when it has expired (or when the
  server answers 401 to it) and otherwise lets the 401 through, which the
  connection reports as "MCP server NAME needs `durable-tools mcp login
  NAME`" (`login_hint`) and the tool call as a `Failure` the model reads. No
  client is registered and no browser is opened on a worker.
* **A store keyed by issuer and resource** (`durable_tools.mcp.token_store`),
  adapted to the SDK's one-server `TokenStorage`; tokens keep the absolute time
  they expire, so a worker started later refreshes an expired token before
  using it (the SDK forgets the lifetime of tokens it loads).
* **A URL policy.** Every request of the flow (metadata, registration, token)
  and the authorization page must be `https`, or `http` to a loopback address
  (127.0.0.0/8, ::1, localhost): a metadata document that points anywhere else
  ends the flow with `OAuthFlowError` before anything is sent there.
* **A pre-registered client** (`McpOAuth.client_id`, its secret from the
  environment) for authorization servers without dynamic registration.

Nothing of a token (access, refresh, client secret, code, verifier) is logged
or put in an exception message here.
"""

from __future__ import annotations

import importlib
import ipaddress
import os
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Final
from urllib.parse import urlsplit

import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    build_protected_resource_metadata_discovery_urls,
    create_oauth_metadata_request,
    handle_auth_metadata_response,
    handle_protected_resource_response,
    issuers_match,
    validate_metadata_issuer,
)
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from pydantic import AnyUrl

from durable_tools.errors import ConfigurationError
from durable_tools.mcp.config import McpOAuth, McpServerConfig
from durable_tools.mcp.token_store import (
    FileTokenStore,
    IssuedTokens,
    TokenStore,
    default_token_dir,
)

__all__ = [
    "OAUTH_REQUEST",
    "McpOAuthProvider",
    "check_oauth_url",
    "login_hint",
    "oauth_auth",
    "oauth_status_text",
    "preregistered_client",
    "token_store_for",
]


OAUTH_REQUEST: Final = "durable_tools.oauth"
"""Extension key marking a request the OAuth flow makes itself (not one to the MCP server)."""

_LOOPBACK_NAMES: Final = frozenset({"localhost"})
_PLACEHOLDER_REDIRECT: Final = "http://127.0.0.1/callback"
"""A worker never redirects; client metadata needs a redirect URI all the same."""


def login_hint(name: str) -> str:
    """What a call of a server without a usable token says: how to log in."""
    return f"MCP server {name!r} needs `durable-tools mcp login {name}` on the worker"


def preregistered_client(
    config: McpServerConfig, redirect_uri: str | None = None
) -> OAuthClientInformationFull | None:
    """The client `McpOAuth.client_id` names, its secret read from the environment now.

    Raises:
        ConfigurationError: `client_secret_env` names an unset variable.
    """
    oauth = config.oauth
    if oauth is None or oauth.client_id is None:
        return None
    secret: str | None = None
    if oauth.client_secret_env is not None:
        secret = os.environ.get(oauth.client_secret_env) or None
        if secret is None:
            raise ConfigurationError(
                f"MCP server {config.name!r}: environment variable "
                f"{oauth.client_secret_env!r} (oauth.client_secret_env) is not set"
            )
    method = oauth.token_endpoint_auth_method or ("client_secret_basic" if secret else "none")
    return OAuthClientInformationFull(
        client_id=oauth.client_id,
        client_secret=secret,
        redirect_uris=[AnyUrl(redirect_uri or _PLACEHOLDER_REDIRECT)],
        token_endpoint_auth_method=method,
        grant_types=["authorization_code", "refresh_token"],
    )


def oauth_status_text(name: str, status: int, reason: str) -> str | None:
    """What an OAuth server's 401 or 403 means for the operator (`None` for other statuses).

    Args:
        name: The server's configured name.
        status: The HTTP status of its answer.
        reason: The status's reason phrase.
    """
    answered = f"it answered HTTP {status} {reason}".rstrip()
    if status == 401:  # no usable token: none stored, expired and not refreshable, revoked
        return f"{login_hint(name)} ({answered})"
    if status == 403:
        return (
            f"MCP server {name!r} refused the token ({answered}): it may need more scopes "
            f"(`oauth.scope`) and `durable-tools mcp login {name}` again"
        )
    return None


def is_loopback(host: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 and `localhost`."""
    if not host:
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_oauth_url(url: str, what: str) -> None:
    """Refuse a URL the OAuth flow must not use.

    Args:
        url: A URL from a metadata document (or the authorization page).
        what: What it is, for the message (`"token endpoint"`, ...).

    Raises:
        OAuthFlowError: It is neither `https` nor `http` to a loopback
            address; the message names the scheme and host only.
    """
    try:
        parts = urlsplit(url)
        host = parts.hostname
    except ValueError:
        raise OAuthFlowError(f"the {what} is not a valid URL") from None
    if parts.scheme == "https" and host:
        return
    if parts.scheme == "http" and is_loopback(host):
        return
    shown = f"{parts.scheme}://{host or ''}"[:200]
    raise OAuthFlowError(
        f"the {what} ({shown}) is neither https nor on this machine (loopback): refused"
    )


_stores: dict[str, TokenStore] = {}


def token_store_for(oauth: McpOAuth) -> TokenStore:
    """The token store a server's `McpOAuth` names (one instance per process and name).

    Raises:
        ConfigurationError: `token_store` does not name a `module:factory`
            that returns a `TokenStore`.
    """
    if oauth.token_store is None:
        directory = oauth.token_dir or str(default_token_dir())
        return _stores.setdefault(f"file:{directory}", FileTokenStore(directory))
    spec = oauth.token_store
    if spec in _stores:
        return _stores[spec]
    module_name, _, attribute = spec.partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), attribute)
        store: object = factory()
    except Exception as exc:
        raise ConfigurationError(
            f"token_store {spec!r} (expected 'package.module:factory'): {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(store, TokenStore):
        raise ConfigurationError(f"token_store {spec!r} did not return a TokenStore")
    _stores[spec] = store
    return store


class _ServerStorage:
    """The SDK's `TokenStorage` for one server, over a `TokenStore` keyed by issuer."""

    def __init__(self, store: TokenStore, provider: McpOAuthProvider) -> None:
        self._store = store
        self._provider = provider

    async def get_tokens(self) -> OAuthToken | None:
        issued = await self._store.get_tokens(*self._provider.key())
        return None if issued is None else issued.for_client()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        await self._store.set_tokens(*self._provider.key(), IssuedTokens.received(tokens))

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await self._store.get_client_info(self._provider.key()[0])

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._store.set_client_info(self._provider.key()[0], client_info)


class McpOAuthProvider(OAuthClientProvider):
    """The SDK's OAuth provider for one MCP server, as a worker or a login uses it.

    Args:
        config: The server (its `oauth` settings must be set).
        store: Where its tokens and registered client live.
        redirect_handler: Login only: shows the authorization URL to a person.
        callback_handler: Login only: waits for the redirect back.
        redirect_uri: Login only: the loopback redirect URI it listens on.

    Without the two handlers the provider is a worker's: it never runs an
    interactive flow and never registers a client.
    """

    def __init__(
        self,
        config: McpServerConfig,
        store: TokenStore,
        *,
        redirect_handler: Callable[[str], Awaitable[None]] | None = None,
        callback_handler: Callable[[], Awaitable[AuthorizationCodeResult]] | None = None,
        redirect_uri: str | None = None,
    ) -> None:
        oauth = config.oauth
        if oauth is None or config.url is None:
            raise ConfigurationError(f"MCP server {config.name!r} is not configured for OAuth")
        self.server_name = config.name
        self.interactive = redirect_handler is not None and callback_handler is not None
        metadata = OAuthClientMetadata(
            client_name=oauth.client_name,
            redirect_uris=[AnyUrl(redirect_uri or _PLACEHOLDER_REDIRECT)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            scope=oauth.scope,
        )
        super().__init__(
            server_url=config.url,
            client_metadata=metadata,
            storage=_ServerStorage(store, self),
            redirect_handler=redirect_handler,
            callback_handler=callback_handler,
            client_metadata_url=oauth.client_metadata_url,
        )
        self._store = store
        self._preregistered = preregistered_client(config, redirect_uri)
        self.failure: Exception | None = None
        """The error that ended the last flow, if one did (its message quotes no token)."""
        if self.interactive:
            # A login starts afresh: no stored token is sent, so the server
            # answers 401 and the SDK's flow (discovery, registration unless
            # the client is pre-registered, authorization, token) runs.
            self._initialized = True
            self.context.client_info = self._preregistered

    def key(self) -> tuple[str, str]:
        """`(issuer, resource)` the tokens are stored under (meaningful once discovery ran)."""
        context = self.context
        if context.oauth_metadata is not None:
            issuer = str(context.oauth_metadata.issuer)
        else:
            # No metadata: the PRM's server, or (MCP 2025-03-26 servers without
            # metadata) the MCP server's own origin, whose /authorize, /token
            # and /register the SDK falls back to.
            issuer = self._expected_issuer()
        return issuer, context.get_resource_url()

    @property
    def issuer(self) -> str:
        """The authorization server's issuer identifier (once discovery ran)."""
        return self.key()[0]

    async def _load(self) -> None:
        """Read this server's tokens and client from the store (what a worker sends)."""
        context = self.context
        tokens = await self.context.storage.get_tokens()
        context.current_tokens = tokens
        context.token_expiry_time = None
        if tokens is not None and tokens.expires_in is not None:
            context.update_token_expiry(tokens)
        context.client_info = self._preregistered or await self.context.storage.get_client_info()

    def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = super()._auth_flow(request) if self.interactive else self._worker_flow(request)
        return self._guarded(flow, request)

    async def _guarded(
        self, flow: AsyncGenerator[httpx2.Request, httpx2.Response], request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Drive `flow`, refusing any request of its own to a URL `check_oauth_url` refuses.

        An error that ends the flow is kept in `failure`: the MCP transport
        reports it only as a closed connection.
        """
        try:
            outgoing = await flow.__anext__()
            while True:
                if outgoing is not request:
                    check_oauth_url(str(outgoing.url), _what(outgoing))
                    outgoing.extensions[OAUTH_REQUEST] = True
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        except Exception as exc:
            self.failure = exc
            raise
        finally:
            await flow.aclose()

    async def _worker_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        """Send the stored token, refreshed when expired; never authorize interactively."""
        context = self.context
        async with context.lock:
            if not self._initialized:
                for url in build_protected_resource_metadata_discovery_urls(
                    None, context.server_url
                ):
                    found = await handle_protected_resource_response(
                        (yield create_oauth_metadata_request(url))
                    )
                    if found is not None:
                        await self._validate_resource_match(found)
                        context.protected_resource_metadata = found
                        context.auth_server_url = self._select_authorization_server(
                            [str(u) for u in found.authorization_servers]
                        )
                        break
                expected = self._expected_issuer()
                for url in build_oauth_authorization_server_metadata_discovery_urls(
                    context.auth_server_url, context.server_url
                ):
                    ok, metadata = await handle_auth_metadata_response(
                        (yield create_oauth_metadata_request(url))
                    )
                    if not ok:
                        break
                    if metadata is not None:
                        if context.auth_server_url is None and issuers_match(
                            str(metadata.issuer), expected
                        ):
                            expected = str(metadata.issuer)
                        validate_metadata_issuer(metadata, expected)
                        context.oauth_metadata = metadata
                        break
                await self._load()
                self._initialized = True
            if not context.is_token_valid():
                # Another worker process sharing the store may have refreshed
                # already (a refresh token may be good for one use only).
                await self._load()
            if not context.is_token_valid() and context.can_refresh_token():
                if not await self._handle_refresh_response((yield await self._refresh_token())):
                    await self._load()  # lost a race for a rotating refresh token?
            sent = self._authorize(request)
        response = yield request
        if response.status_code != 401:
            return
        async with context.lock:
            # A login since this connection read the store, or a token the
            # server already considers expired: try once more.
            await self._load()
            fresh = context.current_tokens
            if (fresh is None or fresh.access_token == sent) and context.can_refresh_token():
                if not await self._handle_refresh_response((yield await self._refresh_token())):
                    await self._load()
            if not context.is_token_valid() or context.current_tokens is None:
                return
            if context.current_tokens.access_token == sent:
                return
            self._authorize(request)
        await response.aclose()
        yield request

    def _authorize(self, request: httpx2.Request) -> str | None:
        """Put the current access token on `request` (or none); the token sent."""
        context = self.context
        if context.is_token_valid() and context.current_tokens is not None:
            self._add_auth_header(request)
            return context.current_tokens.access_token
        request.headers.pop("Authorization", None)
        return None


def _what(request: httpx2.Request) -> str:
    if request.method == "GET":
        return "metadata URL"
    return "authorization server endpoint"


def oauth_auth(config: McpServerConfig) -> httpx2.Auth | None:
    """The `httpx2.Auth` a worker's connection to `config` uses (`None` without `oauth`).

    Raises:
        ConfigurationError: Its `token_store` cannot be built.
    """
    if config.oauth is None:
        return None
    return McpOAuthProvider(config, token_store_for(config.oauth))
