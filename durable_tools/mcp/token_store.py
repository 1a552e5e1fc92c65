"""Where a worker keeps the OAuth grants of its MCP servers.

Tokens live only on the worker: `durable-tools mcp login NAME` writes them, the
worker's connection reads and refreshes them, and nothing of them (access or
refresh token, client secret) reaches a workflow's history, its events, spans
or logs.

A store is the `mcp` SDK's `TokenStorage` shape, keyed: tokens by the issuer
that granted them and the resource (the MCP server's canonical URL, RFC 8707)
they are for; a registered client (RFC 7591) by its issuer, shared by every
server that issuer protects. `FileTokenStore` is for development (one JSON file
per key, 0600, written atomically); for production implement `TokenStore` over
a secret manager and name its factory in `McpOAuth.token_store`:

```python
class VaultTokenStore:  # satisfies durable_tools.mcp.TokenStore
    async def get_tokens(self, issuer: str, resource: str) -> IssuedTokens | None:
        data = await vault.read(f"mcp/{digest(issuer, resource)}")
        return IssuedTokens.model_validate_json(data) if data else None
    ...  # set_tokens, delete_tokens, get_client_info, set_client_info
```

Tokens are stored as `IssuedTokens`: the SDK's `OAuthToken` plus the absolute
time it expires, so a worker that starts later knows whether to refresh.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import time
from pathlib import Path
from typing import Protocol, runtime_checkable

from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import BaseModel, ValidationError

__all__ = ["FileTokenStore", "IssuedTokens", "TokenStore", "default_token_dir"]

TOKEN_DIR_ENV = "DURABLE_TOOLS_MCP_TOKENS"
"""Environment variable naming the file store's directory."""


class IssuedTokens(OAuthToken):
    """The SDK's `OAuthToken`, with when it expires.

    Attributes:
        expires_at: Unix time (seconds) the access token expires, from the
            token response's `expires_in` when it was received; `None` when
            the server gave no lifetime.
    """

    expires_at: float | None = None

    @classmethod
    def received(cls, token: OAuthToken, *, now: float | None = None) -> IssuedTokens:
        """`token` as just received from a token endpoint (its `expires_in` counts from now)."""
        now = time.time() if now is None else now
        expires_at = None if token.expires_in is None else now + int(token.expires_in)
        return cls(**token.model_dump(exclude={"expires_in"}), expires_at=expires_at)

    def for_client(self, *, now: float | None = None) -> OAuthToken:
        """The `OAuthToken` the SDK's client holds: `expires_in` is what is left (0: expired)."""
        now = time.time() if now is None else now
        left = None if self.expires_at is None else max(0, int(self.expires_at - now))
        return OAuthToken(**self.model_dump(exclude={"expires_at", "expires_in"}), expires_in=left)


@runtime_checkable
class TokenStore(Protocol):
    """The SDK's `TokenStorage`, keyed by issuer and resource.

    Implement it over a secret manager for production workers. Every method
    may be called concurrently by several connections of one worker; writes
    should replace a value whole (a reader never sees half of one).
    """

    async def get_tokens(self, issuer: str, resource: str) -> IssuedTokens | None:
        """The tokens `issuer` granted for `resource`, or `None`."""
        ...

    async def set_tokens(self, issuer: str, resource: str, tokens: IssuedTokens) -> None:
        """Keep `tokens` (replacing any earlier ones for the same key)."""
        ...

    async def delete_tokens(self, issuer: str, resource: str) -> None:
        """Forget the tokens for this key (no error when there are none)."""
        ...

    async def get_client_info(self, issuer: str) -> OAuthClientInformationFull | None:
        """The client registered with `issuer` (RFC 7591), or `None`."""
        ...

    async def set_client_info(self, issuer: str, client_info: OAuthClientInformationFull) -> None:
        """Keep the client registered with `issuer`."""
        ...


def default_token_dir() -> Path:
    """The file store's directory when the configuration names none.

    `$DURABLE_TOOLS_MCP_TOKENS`, else `$XDG_STATE_HOME/durable-tools/mcp-tokens`,
    else `~/.local/state/durable-tools/mcp-tokens`.
    """
    explicit = os.environ.get(TOKEN_DIR_ENV)
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "durable-tools" / "mcp-tokens"


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:32]


class _TokensFile(BaseModel):
    issuer: str
    resource: str
    tokens: IssuedTokens


class _ClientFile(BaseModel):
    issuer: str
    client_info: OAuthClientInformationFull


class FileTokenStore:
    """A `TokenStore` in a directory, for development.

    One JSON file per key, named by a digest of the issuer (and resource):
    `DIR/<issuer>/client.json` and `DIR/<issuer>/<resource>.json`. The
    directories are created 0700 and the files 0600; a write goes to a
    temporary file in the same directory, is flushed to disk, then renamed
    over the old file, so a reader sees the old value or the new one. An
    unreadable or malformed file reads as absent (the server then needs a
    new login), never as an error that could quote its content.

    Args:
        directory: Where the files live (created on the first write).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)

    def _issuer_dir(self, issuer: str) -> Path:
        return self.directory / _digest(issuer)

    def _tokens_path(self, issuer: str, resource: str) -> Path:
        return self._issuer_dir(issuer) / f"{_digest(issuer, resource)}.json"

    async def get_tokens(self, issuer: str, resource: str) -> IssuedTokens | None:
        """See `TokenStore.get_tokens`."""
        text = _read(self._tokens_path(issuer, resource))
        if text is None:
            return None
        try:
            stored = _TokensFile.model_validate_json(text)
        except ValidationError:
            return None
        if stored.issuer != issuer or stored.resource != resource:
            return None
        return stored.tokens

    async def set_tokens(self, issuer: str, resource: str, tokens: IssuedTokens) -> None:
        """See `TokenStore.set_tokens`."""
        record = _TokensFile(issuer=issuer, resource=resource, tokens=tokens)
        _write(self._tokens_path(issuer, resource), record.model_dump_json(exclude_none=True))

    async def delete_tokens(self, issuer: str, resource: str) -> None:
        """See `TokenStore.delete_tokens`."""
        with contextlib.suppress(FileNotFoundError):
            self._tokens_path(issuer, resource).unlink()

    async def get_client_info(self, issuer: str) -> OAuthClientInformationFull | None:
        """See `TokenStore.get_client_info`."""
        text = _read(self._issuer_dir(issuer) / "client.json")
        if text is None:
            return None
        try:
            stored = _ClientFile.model_validate_json(text)
        except ValidationError:
            return None
        return stored.client_info if stored.issuer == issuer else None

    async def set_client_info(self, issuer: str, client_info: OAuthClientInformationFull) -> None:
        """See `TokenStore.set_client_info`."""
        record = _ClientFile(issuer=issuer, client_info=client_info)
        _write(self._issuer_dir(issuer) / "client.json", record.model_dump_json(exclude_none=True))


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _write(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically, readable by its owner only (0600)."""
    for folder in (path.parent.parent, path.parent):
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        if hasattr(os, "fchmod"):  # mkstemp makes it 0600 already; say so where we can
            os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
