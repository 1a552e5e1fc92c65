"""MCP server configuration: TOML files, parsed data, secrets and tool names.

No server is started here: these are the checks the worker makes before it
connects to anything. Every error is a `ConfigurationError` with one line that
names the server (and the file, when there is one).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from durable_tools.errors import ConfigurationError
from durable_tools.mcp import (
    DEFAULT_CALL_TIMEOUT,
    DEFAULT_HANDSHAKE_TIMEOUT,
    McpServerConfig,
    McpToolPolicy,
    McpToolsets,
    load_mcp_config,
    parse_mcp_config,
)

VALID = """\
# two servers: stdio and streamable HTTP
[servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "Etc/UTC"]
env = { TZ = "Etc/UTC" }
cwd = "/tmp"
tools = ["get_current_time"]
prefix = "clock"
handshake_timeout = 5
call_timeout = 2.5

[servers.files]
url = "http://127.0.0.1:8000/mcp"
headers = { X-Tenant = "acme" }
token_env = "FILES_TOKEN"
needs_approval = true
idempotent = false

[servers.files.tool_policy.read_file]
needs_approval = false
idempotent = true
call_timeout = 7

[servers.files.tool_policy.write_file]
call_timeout = 30
"""


def _write(tmp_path: Path, text: str, name: str = "mcp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(text: str, tmp_path: Path) -> str:
    """The message of the ConfigurationError `text` (a TOML file) raises."""
    path = _write(tmp_path, text)
    with pytest.raises(ConfigurationError) as info:
        load_mcp_config(path)
    message = str(info.value)
    assert "\n" not in message, message  # one line
    assert str(path) in message, message  # names the file
    return message


# ------------------------------------------------------------------ valid files


def test_valid_file_with_stdio_and_http_servers(tmp_path: Path) -> None:
    time, files = load_mcp_config(_write(tmp_path, VALID))

    assert time.name == "time"
    assert time.transport == "stdio"
    assert time.command == "mcp-server-time"
    assert time.args == ["--local-timezone", "Etc/UTC"]
    assert time.env == {"TZ": "Etc/UTC"}
    assert time.cwd == "/tmp"
    assert time.url is None
    assert time.tools == ["get_current_time"]
    assert time.tool_prefix == "clock"
    assert time.exposed_name("get_current_time") == "clock__get_current_time"
    assert time.handshake_timeout == 5
    assert time.call_timeout == 2.5
    assert time.policy("get_current_time") == McpToolPolicy()  # annotations decide

    assert files.name == "files"
    assert files.transport == "streamable-http"
    assert files.command is None
    assert files.url == "http://127.0.0.1:8000/mcp"
    assert files.headers == {"X-Tenant": "acme"}
    assert files.token is None
    assert files.token_env == "FILES_TOKEN"
    assert files.tools is None  # no allow-list: every tool
    assert files.tool_prefix == "files"
    assert files.handshake_timeout == DEFAULT_HANDSHAKE_TIMEOUT
    assert files.call_timeout == DEFAULT_CALL_TIMEOUT
    assert set(files.tool_policy) == {"read_file", "write_file"}


def test_per_tool_policy_wins_over_server_wide_policy(tmp_path: Path) -> None:
    _, files = load_mcp_config(_write(tmp_path, VALID))

    # Per-tool fields win over the server-wide ones.
    assert files.policy("read_file") == McpToolPolicy(
        needs_approval=False, idempotent=True, call_timeout=7
    )
    # A per-tool table that leaves a field out inherits the server-wide value.
    assert files.policy("write_file") == McpToolPolicy(
        needs_approval=True, idempotent=False, call_timeout=30
    )
    # A tool without a table gets the server-wide policy and the server's timeout.
    assert files.policy("anything_else") == McpToolPolicy(
        needs_approval=True, idempotent=False, call_timeout=None
    )


def test_parse_keeps_the_order_of_the_data() -> None:
    servers = parse_mcp_config(
        {
            "servers": {
                "zeta": {"command": "z"},
                "alpha": {"url": "http://127.0.0.1:1/mcp", "token": "t"},
                "mid": {"command": "m", "prefix": ""},
            }
        }
    )
    assert [s.name for s in servers] == ["zeta", "alpha", "mid"]
    assert servers[1].bearer_token() == "t"


def test_empty_file_has_no_servers(tmp_path: Path) -> None:
    assert load_mcp_config(_write(tmp_path, "# nothing yet\n")) == []
    assert parse_mcp_config({"servers": {}}) == []


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            'command = "x"\nurl = "http://127.0.0.1:1/mcp"',
            "give exactly one of `command` (stdio) or `url` (streamable HTTP)",
        ),
        ('args = ["a"]', "give exactly one of `command` (stdio) or `url` (streamable HTTP)"),
        (
            'url = "http://127.0.0.1:1/mcp"\ntoken = "t"\ntoken_env = "T"',
            "give `token` or `token_env`, not both",
        ),
        ('command = "x"\ncomand = "typo"', "comand: Extra inputs are not permitted"),
        (
            'command = "x"\nhandshake_timeout = -1',
            "handshake_timeout: Input should be greater than 0",
        ),
        ('command = "x"\ncall_timeout = 0', "call_timeout: Input should be greater than 0"),
        (
            'command = "x"\n[servers.broken.tool_policy.t]\ncall_timeout = -3',
            "tool_policy.t.call_timeout: Input should be greater than 0",
        ),
        (
            'command = "x"\n[servers.broken.tool_policy.t]\nneeds_aproval = true',
            "tool_policy.t.needs_aproval: Extra inputs are not permitted",
        ),
        ('command = "x"\ntoken = "t"', "`headers`, `token` and `token_env` apply to `url` servers"),
        (
            'url = "http://127.0.0.1:1/mcp"\nargs = ["a"]',
            "`args`, `env` and `cwd` apply to `command` servers only",
        ),
        ('command = "x"\nargs = "not-a-list"', "args: Input should be a valid list"),
    ],
    ids=[
        "command-and-url",
        "neither-command-nor-url",
        "token-and-token_env",
        "unknown-key",
        "negative-handshake-timeout",
        "zero-call-timeout",
        "negative-tool-timeout",
        "unknown-tool-policy-key",
        "token-on-stdio",
        "args-on-http",
        "wrong-type",
    ],
)
def test_server_errors_name_the_server(tmp_path: Path, fields: str, expected: str) -> None:
    message = _error(f"[servers.broken]\n{fields}\n", tmp_path)
    assert "server 'broken'" in message, message
    assert expected in message, message


def test_an_error_names_the_faulty_server_not_its_neighbours(tmp_path: Path) -> None:
    text = '[servers.good]\ncommand = "x"\n\n[servers.bad]\ncommand = "x"\ncall_timeout = -1\n'
    message = _error(text, tmp_path)
    assert "server 'bad'" in message
    assert "good" not in message


def test_bad_toml_names_the_file(tmp_path: Path) -> None:
    message = _error('[servers.time\ncommand = "x"\n', tmp_path)
    assert "is not valid TOML" in message
    # TOML itself rejects a server defined twice: still a ConfigurationError.
    message = _error('[servers.a]\ncommand = "x"\n[servers.a]\ncommand = "y"\n', tmp_path)
    assert "is not valid TOML" in message


def test_unreadable_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.toml"
    with pytest.raises(ConfigurationError, match=re.escape(f"{str(missing)!r}")) as info:
        load_mcp_config(missing)
    assert "cannot read MCP configuration" in str(info.value)
    assert "No such file or directory" in str(info.value)

    with pytest.raises(ConfigurationError, match="cannot read MCP configuration") as info:
        load_mcp_config(tmp_path)  # a directory
    assert str(tmp_path) in str(info.value)


def test_file_that_is_not_utf8_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(b'[servers.caf\xe9]\ncommand = "x"\n')
    with pytest.raises(ConfigurationError) as info:
        load_mcp_config(path)
    assert str(path) in str(info.value)
    assert "is not UTF-8 text" in str(info.value)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"server": {}}, "unknown top-level keys ['server']"),
        ({"servers": ["a"]}, "`servers` must be a table"),
        ({"servers": {"a": "mcp-server-time"}}, "server 'a' must be a table"),
    ],
)
def test_malformed_data(data: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigurationError, match=re.escape(expected)) as info:
        parse_mcp_config(data, source="settings.json")
    assert str(info.value).startswith("settings.json: ")


def test_duplicate_server_names_are_rejected() -> None:
    one = McpServerConfig(name="notes", command="a")
    other = McpServerConfig(name="notes", url="http://127.0.0.1:1/mcp")
    with pytest.raises(ConfigurationError, match="two MCP servers are named 'notes'"):
        McpToolsets([one, other])


def test_python_configuration_errors_are_validation_errors() -> None:
    # In Python the same rules hold (pydantic reports them; the TOML path
    # turns them into ConfigurationError).
    with pytest.raises(ValueError, match="give exactly one of"):
        McpServerConfig(name="x")
    with pytest.raises(ValueError, match="name"):
        McpServerConfig(name="", command="x")


# ------------------------------------------------------------------ secrets


def test_bearer_token_from_an_unset_variable_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DT_TEST_UNSET_TOKEN", raising=False)
    config = McpServerConfig(
        name="files", url="http://127.0.0.1:1/mcp", token_env="DT_TEST_UNSET_TOKEN"
    )
    with pytest.raises(ConfigurationError) as info:
        config.bearer_token()
    assert "'DT_TEST_UNSET_TOKEN'" in str(info.value)
    assert "MCP server 'files'" in str(info.value)

    monkeypatch.setenv("DT_TEST_UNSET_TOKEN", "")  # empty counts as unset
    with pytest.raises(ConfigurationError, match="DT_TEST_UNSET_TOKEN"):
        config.bearer_token()

    monkeypatch.setenv("DT_TEST_UNSET_TOKEN", "s3cret")
    assert config.bearer_token() == "s3cret"


def test_bearer_token_literal_or_none() -> None:
    literal = McpServerConfig(name="a", url="http://127.0.0.1:1/mcp", token="tok")
    assert literal.bearer_token() == "tok"
    assert McpServerConfig(name="b", url="http://127.0.0.1:1/mcp").bearer_token() is None
    assert McpServerConfig(name="c", command="x").bearer_token() is None


def test_secrets_are_not_in_the_repr() -> None:
    config = McpServerConfig(
        name="a",
        url="http://127.0.0.1:1/mcp",
        token="tok-secret",
        headers={"X-Key": "hdr-secret"},
    )
    stdio = McpServerConfig(name="b", command="x", env={"API_KEY": "env-secret"})
    assert "tok-secret" not in repr(config)
    assert "hdr-secret" not in repr(config)
    assert "env-secret" not in repr(stdio)


# ------------------------------------------------------------------ tool names


def test_exposed_name_with_default_custom_and_empty_prefix() -> None:
    assert McpServerConfig(name="time", command="x").exposed_name("now") == "time__now"
    assert (
        McpServerConfig(name="time", command="x", prefix="clock").exposed_name("now")
        == "clock__now"
    )
    assert McpServerConfig(name="time", command="x", prefix="").exposed_name("now") == "now"
    assert McpServerConfig(name="time", command="x", prefix="").tool_prefix == ""
