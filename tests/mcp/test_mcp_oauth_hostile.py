"""OAuth login against hostile input: redirects, errors and metadata that point elsewhere.

* `check_oauth_url` (hypothesis): only `https`, or `http` to a loopback
  address, is ever requested or shown;
* the loopback redirect listener (hypothesis): any request that does not carry
  the flow's own `state` is answered 400 and completes nothing;
* against the authlib server: a redirect with a wrong `state` is ignored (the
  login goes on and completes), an `error` redirect ends the login with its
  reason; resource metadata naming a plain-http authorization server off this
  machine, and authorization server metadata naming such an authorization
  page, end the login before anything is sent there or shown;
* `durable-tools mcp login` as a person runs it: prints the URL, waits,
  stores the tokens 0600 in a 0700 directory; exit 2 for a server it cannot
  log in to.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.client.auth import OAuthFlowError
from mcp_oauth_support import consent, oauth_servers

from durable_tools.mcp import McpToolsets
from durable_tools.mcp.oauth import check_oauth_url
from durable_tools.mcp.oauth_login import LoginFailed, _Redirect, login
from durable_tools.mcp.token_store import FileTokenStore

LOOPBACK = ["127.0.0.1", "127.8.9.10", "localhost", "LOCALHOST", "[::1]"]
ELSEWHERE = [
    "auth.example.com",
    "10.0.0.1",
    "0.0.0.0",
    "[::]",
    "127.0.0.1.nip.example",
    "localhost.example",
    "169.254.169.254",
]


@given(
    scheme=st.sampled_from(["http", "https", "ftp", "javascript", "file", "HTTP", ""]),
    host=st.sampled_from(LOOPBACK + ELSEWHERE + [""]),
    port=st.sampled_from(["", ":80", ":8443"]),
    path=st.text(alphabet="abc/?=&%#", max_size=12),
)
def test_only_https_or_loopback_http_is_used(scheme: str, host: str, port: str, path: str) -> None:
    url = f"{scheme}://{host}{port}/{path}"
    allowed = (scheme.lower() == "https" and host != "") or (
        scheme.lower() == "http" and host in LOOPBACK
    )
    try:
        check_oauth_url(url, "token endpoint")
    except OAuthFlowError as exc:
        assert not allowed, url
        assert "token endpoint" in str(exc)
    else:
        assert allowed, url


@given(st.text(max_size=300))
def test_any_text_is_refused_or_allowed_never_raises_otherwise(text: str) -> None:
    try:
        check_oauth_url(text, "metadata URL")
    except OAuthFlowError:
        pass


_loop = asyncio.new_event_loop()


async def _listener() -> _Redirect:
    redirect = _Redirect()
    redirect.expected_state = "the-state-of-this-login"
    return redirect


@settings(suppress_health_check=[HealthCheck.too_slow], max_examples=200)
@given(
    params=st.dictionaries(
        st.sampled_from(["state", "code", "error", "error_description", "iss", "x"]),
        st.text(max_size=40),
        max_size=5,
    ),
    path=st.sampled_from(["/callback", "/", "/callback/", "/favicon.ico"]),
    method=st.sampled_from(["GET", "POST"]),
)
def test_the_listener_completes_only_the_flows_own_redirect(
    params: dict[str, str], path: str, method: str
) -> None:
    redirect = _loop.run_until_complete(_listener())
    head = f"{method} {path}?{urlencode(params)} HTTP/1.1\r\nhost: x\r\n\r\n".encode()
    status, _ = redirect._handle(head)  # pyright: ignore[reportPrivateUsage]
    own = (
        method == "GET"
        and path == "/callback"
        and params.get("state") == "the-state-of-this-login"
        and (params.get("error") is not None or bool(params.get("code")))
    )
    assert redirect.result.done() is own, (status, params)
    if own:
        assert status == 200
        if params.get("error") is not None:
            with pytest.raises(LoginFailed, match="refused the login"):
                redirect.result.result()
        else:
            assert redirect.result.result().code == params["code"]
    else:
        assert status in (400, 404)


def _browse(url: str, *, approve: bool = True, forged_first: bool = False) -> None:
    def act() -> None:
        if forged_first:
            redirect_uri = dict(httpx.URL(url).params)["redirect_uri"]
            forged = httpx.get(redirect_uri, params={"code": "forged", "state": "wrong"})
            assert forged.status_code == 400
        consent(url, approve=approve)

    threading.Thread(target=act, name="browser", daemon=True).start()


async def test_a_wrong_state_is_ignored_and_an_error_ends_the_login(tmp_path: Path) -> None:
    with oauth_servers(tmp_path) as servers:
        config = servers.config(tmp_path)
        result = await login(config, show_url=lambda url: _browse(url, forged_first=True))
        assert result.issuer == servers.issuer  # the forged redirect changed nothing
        assert "forged" not in {e.get("code") for e in servers.events("code")}

        with pytest.raises(LoginFailed, match=r"refused the login \(access_denied"):
            await login(config, show_url=lambda url: _browse(url, approve=False))


@pytest.mark.parametrize(
    ("extra", "what"),
    [
        (["--authorization-servers", "http://auth.example.net"], "metadata URL"),
        (["--authorize-endpoint", "http://10.9.8.7/authorize"], "authorization page"),
    ],
)
async def test_metadata_pointing_off_loopback_over_http_is_refused(
    tmp_path: Path, extra: list[str], what: str
) -> None:
    shown: list[str] = []
    with oauth_servers(tmp_path, *extra) as servers:
        with pytest.raises(LoginFailed, match="neither https nor on this machine") as failed:
            await login(servers.config(tmp_path), show_url=shown.append, timeout=5)
        if what == "metadata URL":  # a worker refuses it too, and says why
            toolsets = McpToolsets([servers.config(tmp_path)])
            async with asyncio.timeout(30):
                await toolsets.start()
            await toolsets.aclose()
            assert "neither https nor on this machine" in toolsets.skipped["notes"]
    assert what in str(failed.value)
    assert shown == []  # nothing was shown to the person
    assert servers.events("code") == []


def test_the_login_command(tmp_path: Path) -> None:
    with oauth_servers(tmp_path) as servers:
        config_file = tmp_path / "mcp.toml"
        config_file.write_text(
            f'[servers.notes]\nurl = "{servers.url}"\n'
            f'[servers.notes.oauth]\ntoken_dir = "{tmp_path / "tokens"}"\nlogin_timeout = 30\n'
            '[servers.plain]\nurl = "http://127.0.0.1:9/mcp"\n'
        )
        command = [sys.executable, "-m", "durable_tools.worker.cli", "mcp", "login"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "200"}
        with subprocess.Popen(
            [*command, "notes", "--mcp-config", str(config_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as process:
            assert process.stdout is not None
            lines: list[str] = []
            for line in process.stdout:
                lines.append(line)
                if line.startswith("http://"):
                    consent(line.strip())
                    break
            rest, errors = process.communicate(timeout=60)
        assert process.returncode == 0, errors
        assert "Logged in to notes" in rest and servers.issuer in rest
        assert any("Open this URL" in line for line in lines)

        store = FileTokenStore(tmp_path / "tokens")
        tokens = asyncio.run(store.get_tokens(servers.issuer, servers.url))
        assert tokens is not None and tokens.refresh_token
        for path in (tmp_path / "tokens").rglob("*"):
            mode = stat.S_IMODE(path.stat().st_mode)
            assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
        assert tokens.access_token not in rest + errors + "".join(lines)

        with subprocess.Popen(
            [*command, "notes", "--mcp-config", str(config_file)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        ) as process:
            assert process.stdout is not None
            for line in process.stdout:
                if line.startswith("http://"):
                    consent(line.strip(), approve=False)
                    break
            _, errors = process.communicate(timeout=60)
        assert process.returncode == 1
        assert errors.startswith("error: the authorization server refused the login"), errors
        assert len(errors.splitlines()) == 1, errors  # one line, no traceback

        for name, needle in (("plain", "has no `oauth`"), ("nothing", "no MCP server named")):
            refused = subprocess.run(
                [*command, name, "--mcp-config", str(config_file)],
                capture_output=True,
                text=True,
                timeout=60,
                env=env,
            )
            assert refused.returncode == 2 and needle in refused.stderr, refused.stderr


async def test_a_login_nobody_answers_ends_within_its_timeout(tmp_path: Path) -> None:
    shown: list[str] = []
    with oauth_servers(tmp_path) as servers:
        async with asyncio.timeout(30):
            with pytest.raises(LoginFailed, match="no redirect from the authorization server"):
                await login(servers.config(tmp_path), show_url=shown.append, timeout=1)
        assert len(shown) == 1 and servers.events("code") == []
        store = FileTokenStore(tmp_path / "tokens")
        assert await store.get_tokens(servers.issuer, servers.url) is None
