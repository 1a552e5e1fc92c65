"""The OAuth configuration and the token store, without servers.

* `oauth = true` / `[servers.NAME.oauth]` in TOML; `oauth` only on `url`
  servers, never beside a bearer `token`/`token_env`;
* `FileTokenStore`: keyed by issuer and resource, 0600 files in 0700
  directories, no temporary file left behind, a damaged file reads as absent;
* `IssuedTokens` keeps the absolute expiry, and gives the SDK what is left;
* `McpOAuth.token_store` names a factory (a secret manager's store).
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import pytest
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from durable_tools.errors import ConfigurationError
from durable_tools.mcp import McpOAuth, TokenStore, parse_mcp_config
from durable_tools.mcp.oauth import token_store_for
from durable_tools.mcp.token_store import FileTokenStore, IssuedTokens

ISSUER = "https://auth.example.com"
RESOURCE = "https://mcp.example.com/mcp"


def test_oauth_in_toml() -> None:
    (flag, table) = parse_mcp_config(
        {
            "servers": {
                "a": {"url": RESOURCE, "oauth": True},
                "b": {"url": RESOURCE, "oauth": {"scope": "notes", "token_dir": "/srv/t"}},
            }
        }
    )
    assert flag.oauth == McpOAuth()
    assert table.oauth is not None and (table.oauth.scope, table.oauth.token_dir) == (
        "notes",
        "/srv/t",
    )
    (off,) = parse_mcp_config({"servers": {"c": {"url": RESOURCE, "oauth": False}}})
    assert off.oauth is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"command": "x", "oauth": True}, "`oauth` applies to `url` servers only"),
        ({"url": RESOURCE, "oauth": True, "token_env": "T"}, "not both"),
        ({"url": RESOURCE, "oauth": {"login_timeout": 0}}, "greater than 0"),
        ({"url": RESOURCE, "oauth": {"client_secret": "x"}}, "Extra inputs"),
        ({"url": RESOURCE, "oauth": {"client_secret_env": "S"}}, "need `client_id`"),
    ],
)
def test_bad_oauth_configuration(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_mcp_config({"servers": {"s": fields}})


def _tokens(access: str = "at-1", *, expires_in: int | None = 3600, now: float = 1000.0) -> Any:
    return IssuedTokens.received(
        OAuthToken(access_token=access, refresh_token="rt-1", expires_in=expires_in), now=now
    )


def test_issued_tokens_keep_when_they_expire() -> None:
    issued = _tokens(now=1000.0)
    assert issued.expires_at == 4600.0 and issued.expires_in is None
    assert issued.for_client(now=1600.0).expires_in == 3000
    assert issued.for_client(now=9999.0).expires_in == 0  # expired: the SDK refreshes
    assert _tokens(expires_in=None).for_client().expires_in is None


async def test_the_file_store(tmp_path: Path) -> None:
    store = FileTokenStore(tmp_path / "tokens")
    assert isinstance(store, TokenStore)
    assert await store.get_tokens(ISSUER, RESOURCE) is None
    await store.set_tokens(ISSUER, RESOURCE, _tokens("at-1"))
    await store.set_tokens(ISSUER, RESOURCE, _tokens("at-2"))  # replaced whole
    got = await store.get_tokens(ISSUER, RESOURCE)
    assert got is not None and got.access_token == "at-2" and got.refresh_token == "rt-1"
    # Keyed by issuer and resource: another of either finds nothing.
    assert await store.get_tokens("https://other.example.com", RESOURCE) is None
    assert await store.get_tokens(ISSUER, "https://mcp.example.com/other") is None

    client = OAuthClientInformationFull(
        client_id="cid", client_secret="cs", redirect_uris=["http://127.0.0.1:1/callback"]
    )
    await store.set_client_info(ISSUER, client)
    assert await store.get_client_info(ISSUER) == client
    assert await store.get_client_info("https://other.example.com") is None

    files = list((tmp_path / "tokens").rglob("*"))
    assert not [f for f in files if f.name.endswith(".tmp")]
    for path in files:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    # Names are digests: neither the token nor the issuer's host is in a path.
    assert not [f for f in files if "example" in str(f) or "at-2" in str(f)]

    for path in files:
        if path.is_file():
            path.write_bytes(b"\xff{not json")
    assert await store.get_tokens(ISSUER, RESOURCE) is None  # damaged: log in again
    assert await store.get_client_info(ISSUER) is None

    await store.delete_tokens(ISSUER, RESOURCE)
    await store.delete_tokens(ISSUER, RESOURCE)  # twice: no error
    assert await store.get_tokens(ISSUER, RESOURCE) is None


class _MemoryStore:
    """A store as a secret manager's would be: the protocol, nothing else."""

    def __init__(self) -> None:
        self.tokens: dict[tuple[str, str], IssuedTokens] = {}
        self.clients: dict[str, OAuthClientInformationFull] = {}

    async def get_tokens(self, issuer: str, resource: str) -> IssuedTokens | None:
        return self.tokens.get((issuer, resource))

    async def set_tokens(self, issuer: str, resource: str, tokens: IssuedTokens) -> None:
        self.tokens[issuer, resource] = tokens

    async def delete_tokens(self, issuer: str, resource: str) -> None:
        self.tokens.pop((issuer, resource), None)

    async def get_client_info(self, issuer: str) -> OAuthClientInformationFull | None:
        return self.clients.get(issuer)

    async def set_client_info(self, issuer: str, client_info: OAuthClientInformationFull) -> None:
        self.clients[issuer] = client_info


MEMORY = _MemoryStore()


def memory_store() -> _MemoryStore:
    return MEMORY


def test_a_store_factory_by_name(tmp_path: Path) -> None:
    named = McpOAuth(token_store="test_mcp_oauth_store:memory_store")
    assert token_store_for(named) is MEMORY
    assert token_store_for(named) is MEMORY  # one per process and name
    default = token_store_for(McpOAuth(token_dir=str(tmp_path)))
    assert isinstance(default, FileTokenStore) and default.directory == tmp_path
    for spec in ("no_such_module:factory", "test_mcp_oauth_store:ISSUER"):
        with pytest.raises(ConfigurationError, match="token_store"):
            token_store_for(McpOAuth(token_store=spec))


def test_a_pre_registered_client(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_tools.mcp import McpServerConfig
    from durable_tools.mcp.oauth import preregistered_client

    def server(**oauth: Any) -> McpServerConfig:
        return McpServerConfig(name="notes", url=RESOURCE, oauth=McpOAuth(**oauth))

    assert preregistered_client(server()) is None  # dynamic registration at login
    public = preregistered_client(server(client_id="cid"))
    assert public is not None and public.client_secret is None
    assert public.token_endpoint_auth_method == "none"

    confidential = server(client_id="cid", client_secret_env="DT_TEST_CLIENT_SECRET")
    monkeypatch.delenv("DT_TEST_CLIENT_SECRET", raising=False)
    with pytest.raises(ConfigurationError, match="DT_TEST_CLIENT_SECRET"):
        preregistered_client(confidential)
    monkeypatch.setenv("DT_TEST_CLIENT_SECRET", "s3cret-value")
    client = preregistered_client(confidential)
    assert client is not None and client.client_secret == "s3cret-value"
    assert client.token_endpoint_auth_method == "client_secret_basic"
    assert "s3cret-value" not in repr(confidential)
