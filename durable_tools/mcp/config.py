"""Configuration of MCP servers, in Python or in a TOML file the worker reads.

A server is reached over stdio (`command`, `args`, `env`, `cwd`) or streamable
HTTP (`url`, `headers`, `token` or `token_env`): exactly one of `command` and
`url`. Its tools appear to the model as `{prefix}__{tool}`, the prefix being
the configured server name unless `prefix` says otherwise.

```toml
# mcp.toml: `durable-tools worker --mcp-config mcp.toml`
[servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "Etc/UTC"]
tools = ["get_current_time"]          # allow-list (optional)
trust_annotations = true              # policy from the server's annotations

[servers.files]
url = "http://127.0.0.1:8000/mcp"
token_env = "FILES_TOKEN"             # bearer token read on the worker
call_timeout = 20
needs_approval = true                 # server-wide policy override

[servers.files.tool_policy.read_file] # per-tool policy override
needs_approval = false
idempotent = true
```

Secrets (`token`, `token_env`, `env`, `headers`) are resolved on the worker
when it connects; none of them is ever part of a workflow's input or history.

A server's tool annotations are hints from that server, untrusted unless its
configuration says `trust_annotations = true` (MCP specification 2025-06-18,
"Tool annotations"): by default every tool of a server needs approval and runs
at most once; the overrides (`needs_approval`, `idempotent`, per server and
per tool) are the operator's word and always win.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationError, model_validator

from durable_tools.errors import ConfigurationError

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "McpOAuth",
    "McpServerConfig",
    "McpToolPolicy",
    "load_mcp_config",
    "parse_mcp_config",
]

DEFAULT_HANDSHAKE_TIMEOUT: float = 30.0
"""Seconds a server may take to start and finish its handshake (default 30)."""

DEFAULT_CALL_TIMEOUT: float = 60.0
"""Seconds one tool call may take before it fails with `timed_out` (default 60)."""


class McpToolPolicy(BaseModel):
    """Policy overrides for the tools of a server (all fields optional).

    `None` keeps the default: without `trust_annotations` on the server, every
    tool needs approval and runs at most once; with it, what the tool's
    annotations say (MCP spec, `ToolAnnotations`): read-only tools need no
    approval; destructive tools (the default for a tool that is not
    read-only) need approval; only read-only or idempotent tools are retried
    once their call may have reached the server.

    Attributes:
        needs_approval: Force (True) or waive (False) the approval gate.
        idempotent: Treat the tool as idempotent (retried with backoff) or not
            (at-most-once: an unknown outcome becomes Failure `interrupted`).
        call_timeout: Seconds for one call of this tool (default: the server's).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    needs_approval: bool | None = None
    idempotent: bool | None = None
    call_timeout: float | None = Field(default=None, gt=0)


class McpOAuth(BaseModel):
    """OAuth for a streamable-HTTP server that requires authorization.

    The worker sends the access token `durable-tools mcp login NAME` obtained
    (the `mcp` SDK's OAuth client: PKCE, RFC 8707 resource indicators,
    metadata discovery, dynamic client registration), refreshes it when it
    expires, and never runs an interactive flow itself: without a usable
    token a call is Failure "needs `durable-tools mcp login NAME`".

    Attributes:
        scope: Scopes to ask for (space-separated); default: what the
            server's metadata says it supports.
        client_name: The name registered with the authorization server.
        token_dir: Directory of the file token store (default: the
            environment variable `DURABLE_TOOLS_MCP_TOKENS`, else
            `$XDG_STATE_HOME/durable-tools/mcp-tokens`, else
            `~/.local/state/durable-tools/mcp-tokens`).
        token_store: `"package.module:factory"`: a callable returning a
            `durable_tools.mcp.TokenStore` (e.g. one over a secret manager);
            it replaces the file store.
        login_timeout: Seconds `durable-tools mcp login` waits for the
            browser's redirect (default 300).
        client_id: A client registered with the authorization server
            beforehand (for servers without dynamic client registration);
            default: register one at login.
        client_secret_env: Environment variable holding that client's
            secret, read on the worker and by the login (never in the
            configuration file); none for a public client.
        token_endpoint_auth_method: How that client authenticates at the
            token endpoint: `"client_secret_basic"` (the default with a
            secret), `"client_secret_post"` or `"none"` (without one).
        client_metadata_url: An `https` URL of a client ID metadata document
            you host (draft-ietf-oauth-client-id-metadata-document): used as
            the client id where the authorization server supports it, in
            place of dynamic registration.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    scope: str | None = None
    client_name: str = "durable-tools"
    token_dir: str | None = None
    token_store: str | None = None
    login_timeout: float = Field(default=300.0, gt=0)
    client_id: str | None = Field(default=None, min_length=1)
    client_secret_env: str | None = None
    token_endpoint_auth_method: (
        Literal["client_secret_basic", "client_secret_post", "none"] | None
    ) = None
    client_metadata_url: str | None = None

    @model_validator(mode="after")
    def _client(self) -> McpOAuth:
        if self.client_id is None and (
            self.client_secret_env is not None or self.token_endpoint_auth_method is not None
        ):
            raise ValueError(
                "`client_secret_env` and `token_endpoint_auth_method` need `client_id`"
            )
        return self


class McpServerConfig(BaseModel):
    """One MCP server the worker connects to.

    Attributes:
        name: The server's name in the configuration (also the default prefix).
        command: Executable of a stdio server (exclusive with `url`).
        args: Arguments of `command`.
        env: Extra environment variables for the stdio server (values are
            secrets: never logged, never in history).
        cwd: Working directory of the stdio server.
        url: Endpoint of a streamable-HTTP server (exclusive with `command`).
        headers: Extra HTTP headers (secrets, like `env`).
        token: A bearer token sent as `Authorization: Bearer …`.
        token_env: Name of an environment variable holding the bearer token,
            read on the worker when it connects (preferred over `token`).
        tools: Allow-list of the server's tool names; `None` exposes all. With
            an allow-list, a server that fails to start stops the worker, and
            a listed tool the server does not offer is an error.
        prefix: Prefix of the tool names the model sees (`prefix__tool`);
            default the server name, `""` for none.
        handshake_timeout: Seconds to start and finish the handshake (default 30).
        call_timeout: Seconds per tool call (default 60).
        heartbeat_timeout: Seconds without a sign of life from the worker
            running a call before Temporal counts the attempt as lost (default
            30; the call heartbeats every third of it).
        trust_annotations: Derive each tool's policy from the annotations the
            server declares (default False: annotations are untrusted hints,
            so every tool needs approval and runs at most once). Set it only
            for a server whose annotations you have checked, e.g. one you run.
        needs_approval: Server-wide approval override (see `McpToolPolicy`).
        idempotent: Server-wide idempotency override (see `McpToolPolicy`).
        tool_policy: Per-tool overrides, by the server's tool name.
        sampling: What a sampling request inside an input-required result
            gets: `"approve"` (default: a person approves each request, as
            a tool call is approved, then the conversation's model answers
            it), `"allow"` (the model answers at once), `"refuse"` (the
            call ends with Failure `input_request_refused`).
        url_elicitation: What a URL elicitation gets: `"allow"` (default:
            anyone who may answer the conversation's questions consents),
            `"approver"` (only an approver of the tool may answer: a signed
            answer is not required, the answerer's identity must be one of
            the tool's approvers), `"refuse"` (Failure `input_request_refused`).
        mid_call_elicitation: What a form elicitation a server at a
            protocol before 2026-07-28 sends while a call runs gets:
            `"refuse"` (default: an error, which the tool usually reports;
            a person answers only input-required results, durably) or
            `"defaults"` (accepted at once with the requested schema's
            default values, SEP-1034, when every field it requires has one;
            refused otherwise): for servers that ask only to confirm values
            they chose. No one decides, so nothing waits.
        roots: Roots (`file://` URIs or absolute paths) the client declares
            and answers `roots/list` requests with (default none: the
            roots capability is not declared).
        oauth: OAuth for a `url` server that requires authorization
            (`McpOAuth`; TOML `oauth = true` or an `[servers.NAME.oauth]`
            table). Exclusive with `token` and `token_env`.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    command: str | None = None
    args: list[str] = Field(default_factory=list[str])
    env: dict[str, str] = Field(default_factory=dict[str, str], repr=False)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict[str, str], repr=False)
    token: str | None = Field(default=None, repr=False)
    token_env: str | None = None
    tools: list[str] | None = None
    prefix: str | None = None
    handshake_timeout: float = Field(default=DEFAULT_HANDSHAKE_TIMEOUT, gt=0)
    call_timeout: float = Field(default=DEFAULT_CALL_TIMEOUT, gt=0)
    heartbeat_timeout: float = Field(default=30.0, gt=0)
    trust_annotations: StrictBool = False
    needs_approval: bool | None = None
    idempotent: bool | None = None
    tool_policy: dict[str, McpToolPolicy] = Field(default_factory=dict[str, McpToolPolicy])
    sampling: Literal["allow", "approve", "refuse"] = "approve"
    url_elicitation: Literal["allow", "approver", "refuse"] = "allow"
    mid_call_elicitation: Literal["refuse", "defaults"] = "refuse"
    roots: list[str] = Field(default_factory=list[str])
    oauth: McpOAuth | None = None

    @model_validator(mode="before")
    @classmethod
    def _oauth_flag(cls, data: object) -> object:
        """`oauth = true` is `McpOAuth()` with its defaults; `false` is none."""
        if not isinstance(data, Mapping):
            return data
        fields = dict(cast(Mapping[str, object], data))
        if isinstance(fields.get("oauth"), bool):
            fields["oauth"] = McpOAuth() if fields["oauth"] else None
        return fields

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if (self.command is None) == (self.url is None):
            raise ValueError("give exactly one of `command` (stdio) or `url` (streamable HTTP)")
        if self.url is None and (self.headers or self.token or self.token_env):
            raise ValueError("`headers`, `token` and `token_env` apply to `url` servers only")
        if self.command is None and (self.env or self.args or self.cwd):
            raise ValueError("`args`, `env` and `cwd` apply to `command` servers only")
        if self.token is not None and self.token_env is not None:
            raise ValueError("give `token` or `token_env`, not both")
        if self.oauth is not None and self.url is None:
            raise ValueError("`oauth` applies to `url` servers only")
        if self.oauth is not None and (self.token is not None or self.token_env is not None):
            raise ValueError("give `oauth` or a bearer `token`/`token_env`, not both")
        for root in self.roots:
            if not (root.startswith("file:///") or Path(root).is_absolute()):
                raise ValueError(f"root {root!r} must be an absolute path or a file:/// URI")
        return self

    @property
    def transport(self) -> str:
        """`"stdio"` or `"streamable-http"`."""
        return "stdio" if self.command is not None else "streamable-http"

    @property
    def tool_prefix(self) -> str:
        """The prefix tool names get (`name` unless `prefix` is set)."""
        return self.name if self.prefix is None else self.prefix

    def exposed_name(self, tool: str) -> str:
        """The name the model sees for the server's tool `tool`."""
        return f"{self.tool_prefix}__{tool}" if self.tool_prefix else tool

    def policy(self, tool: str) -> McpToolPolicy:
        """The effective overrides for `tool`: per-tool fields win over server-wide ones."""
        own = self.tool_policy.get(tool, McpToolPolicy())
        return McpToolPolicy(
            needs_approval=own.needs_approval
            if own.needs_approval is not None
            else self.needs_approval,
            idempotent=own.idempotent if own.idempotent is not None else self.idempotent,
            call_timeout=own.call_timeout,
        )

    def bearer_token(self) -> str | None:
        """Resolve the bearer token on the worker.

        Returns:
            The token, or `None` when the server needs none.

        Raises:
            ConfigurationError: `token_env` names an unset or empty variable.
        """
        if self.token_env is None:
            return self.token
        value = os.environ.get(self.token_env, "")
        if not value:
            raise ConfigurationError(
                f"MCP server {self.name!r}: environment variable {self.token_env!r} "
                "(token_env) is not set"
            )
        return value


def _describe(exc: ValidationError) -> str:
    problems: list[str] = []
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)


def parse_mcp_config(
    data: Mapping[str, Any], *, source: str = "MCP configuration"
) -> list[McpServerConfig]:
    """Build server configurations from parsed TOML/JSON data.

    Args:
        data: `{"servers": {name: {...fields of McpServerConfig...}}}`.
        source: Where the data came from, for error messages.

    Returns:
        The servers, in the order of the data.

    Raises:
        ConfigurationError: The data has no `servers` table, or a server's
            fields are wrong; the message names the server.
    """
    unknown = sorted(set(data) - {"servers"})
    if unknown:
        raise ConfigurationError(
            f"{source}: unknown top-level keys {unknown} (expected [servers.NAME])"
        )
    servers: object = data.get("servers", {})
    if not isinstance(servers, Mapping):
        raise ConfigurationError(f"{source}: `servers` must be a table of [servers.NAME]")
    configs: list[McpServerConfig] = []
    for name, fields in cast(Mapping[object, object], servers).items():
        if not isinstance(fields, Mapping):
            raise ConfigurationError(f"{source}: server {name!r} must be a table")
        try:
            configs.append(
                McpServerConfig.model_validate(
                    {**cast(Mapping[str, Any], fields), "name": str(name)}
                )
            )
        except ValidationError as exc:
            raise ConfigurationError(f"{source}: server {name!r}: {_describe(exc)}") from None
    return configs


def load_mcp_config(path: str | os.PathLike[str]) -> list[McpServerConfig]:
    """Read MCP server configurations from a TOML file.

    Args:
        path: A TOML file with `[servers.NAME]` tables (see the module docstring).

    Returns:
        The servers, in file order.

    Raises:
        ConfigurationError: The file cannot be read, is not valid TOML, or a
            server's configuration is wrong (naming the file and the server).
    """
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read MCP configuration {str(file)!r}: {exc.strerror}"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigurationError(
            f"MCP configuration {str(file)!r} is not valid TOML: {exc}"
        ) from None
    except UnicodeDecodeError as exc:  # TOML files are UTF-8
        raise ConfigurationError(
            f"MCP configuration {str(file)!r} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    return parse_mcp_config(data, source=f"MCP configuration {str(file)!r}")


def check_unique_names(servers: Sequence[McpServerConfig]) -> None:
    """Reject two servers with one name.

    Raises:
        ConfigurationError: Naming the repeated server name.
    """
    seen: set[str] = set()
    for server in servers:
        if server.name in seen:
            raise ConfigurationError(f"two MCP servers are named {server.name!r}")
        seen.add(server.name)
