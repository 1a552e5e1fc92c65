"""Failure text is scrubbed of secrets before it reaches history or the model."""

from __future__ import annotations

import json
import string

import anyio
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from temporalio.testing import WorkflowEnvironment

from durable_tools import ToolFailure, Toolkit, tool
from durable_tools.redact import REDACTED, Redactor, secret_env_values
from durable_tools.testing import AgentTestEnvironment, ScriptedModel, call

ENV_TOKEN = "tok-supersecret-9876"


@pytest.mark.parametrize(
    ("text", "hidden", "kept"),
    [
        (
            "GET https://ana:pw-123@api.x.io/v1 failed",
            ["pw-123", "ana:"],
            ["https://", "@api.x.io/v1"],
        ),
        ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.abc", ["eyJhbGci"], ["Bearer "]),
        ("POST /v1?api_key=AbC123xyz&page=2", ["AbC123xyz"], ["api_key=", "&page=2"]),
        ('{"password": "s3cr3t-pass", "user": "ana"}', ["s3cr3t-pass"], ['"user": "ana"']),
        ("key sk-proj-ABCDEFGHIJKLMNOPQRST1234 rejected", ["sk-proj-ABCDEFGH"], ["rejected"]),
        ("github ghp_abcdefghijklmnopqrstuvwxyz0123 bad", ["ghp_abcdefghij"], ["github"]),
        ("aws AKIAABCDEFGHIJKLMNOP denied", ["AKIAABCDEFGHIJKLMNOP"], ["denied"]),
        ("file not found: /srv/app/data.csv", [], ["file not found: /srv/app/data.csv"]),
    ],
)
def test_credential_shapes(text: str, hidden: list[str], kept: list[str]) -> None:
    out = Redactor()(text)
    for secret in hidden:
        assert secret not in out
    for part in kept:
        assert part in out
    assert (REDACTED in out) == bool(hidden)


@pytest.mark.parametrize(
    "hint",
    [
        "no OpenAI API key: set OPENAI_API_KEY, or pass api_key=... (or base_url=...)",
        "set ANTHROPIC_API_KEY or pass api_key=... to AnthropicModel",
        'configure it as {"token": "..."} or token=…',
    ],
)
def test_a_placeholder_in_a_hint_is_not_a_secret(hint: str) -> None:
    """Issue 25, item 5: `pass api_key=...` read `pass api_key=[redacted]`."""
    assert Redactor()(hint) == hint


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("api_key=...abc123", "...abc123"),
        ("api_key=abc...", "abc..."),
        ("token=....", "...."),
        ("password: 'x...'", "x..."),
    ],
)
def test_values_that_only_start_or_end_with_dots_are_still_redacted(text: str, secret: str) -> None:
    assert secret not in Redactor()(text)


async def test_the_missing_key_hint_reaches_the_conversation_unredacted(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker without OPENAI_API_KEY: the model failure says how to pass one."""
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    async with AgentTestEnvironment.start(
        toolkit=Toolkit(refuse), model=ScriptedModel(["unused"]), env=dev_env
    ) as env:
        agent = env.agent.model_copy(update={"model": "openai:gpt-4o-mini"})
        chat = await env.start_conversation("hello", agent=agent)
        with anyio.fail_after(30):
            while (failure := (await env.conversations.status(chat)).model_failed) is None:
                await anyio.sleep(0.05)
    assert "no OpenAI API key: set OPENAI_API_KEY, or pass api_key=... " in failure.message
    assert REDACTED not in failure.message


def test_known_secrets_longest_first_and_truncation() -> None:
    redact = Redactor(["abcdef", "abcdefgh-long", "short"], max_chars=40)
    assert redact("x abcdefgh-long y abcdef z short") == f"x {REDACTED} y {REDACTED} z short"
    long = redact("e" * 100)
    assert long.startswith("e" * 40) and "60 more characters" in long


@settings(max_examples=100, deadline=None)
@given(
    cut=st.integers(min_value=-40, max_value=40),
    shape=st.sampled_from(["token={v}", "Bearer {v}", "{v}", '"client_secret": "{v}"']),
    tail=st.integers(min_value=0, max_value=20_000),
)
def test_a_secret_across_the_cut_of_a_long_text_is_redacted(
    cut: int, shape: str, tail: int
) -> None:
    """Only the kept text (and a margin) is scrubbed: nothing of a secret at the cut survives."""
    value = "s3cr3tValue-0123456789abcdef"
    secret = shape.format(v=value)
    text = "x " * ((400 + cut) // 2) + secret + " and more" + "y" * tail
    out = Redactor([value] if shape == "{v}" else [], max_chars=400)(text)
    assert len(out) <= 400 + 60
    for k in range(6, len(value) + 1):  # no piece of 6 or more of its characters
        assert value[:k] not in out


def test_text_without_a_secret_name_skips_the_name_patterns_and_keeps_the_rest() -> None:
    redact = Redactor(max_chars=10_000)
    plain = "field 'messages.0.content' must be a string; " * 50
    assert redact(plain) == plain
    assert redact(plain + "sk-abcdefghijklmnopqrstu") == plain + REDACTED
    assert redact(plain + "auth=xyz123") == plain + "auth=" + REDACTED


def test_secret_env_values_by_name() -> None:
    env = {
        "OPENAI_API_KEY": "sk-123456",
        "GH_TOKEN": "tok-123456",
        "HOME": "/root/home",
        "DB_PASSWORD": "pw",
    }
    assert sorted(secret_env_values(env)) == ["sk-123456", "tok-123456"]


@settings(max_examples=200, deadline=None)
@given(
    secret=st.text(
        alphabet=string.ascii_letters + string.digits + "-_.~+/=!$", min_size=6, max_size=40
    ),
    before=st.text(max_size=200),
    after=st.text(max_size=200),
)
def test_known_secret_never_survives(secret: str, before: str, after: str) -> None:
    out = Redactor([secret], max_chars=10_000)(before + secret + after)
    assert secret not in out


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=5_000), st.integers(min_value=10, max_value=3_000))
def test_any_text_is_bounded(text: str, max_chars: int) -> None:
    out = Redactor(max_chars=max_chars)(text)
    assert len(out) <= max_chars + 60


@tool(retry=1)
async def fetch_report(day: str) -> str:
    """Fetch a report.

    Args:
        day: The day.
    """
    raise RuntimeError(
        f"GET https://ana:hunter2-pw@reports.example.com/{day}?token=qwerty-12345 failed; "
        f"sent Bearer {ENV_TOKEN}"
    )


@tool
async def refuse(day: str) -> str:
    """Refuse, naming the token.

    Args:
        day: The day.
    """
    raise ToolFailure("permission_denied", f"token {ENV_TOKEN} may not read {day}")


async def test_tool_failures_reach_history_and_model_scrubbed(
    dev_env: WorkflowEnvironment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPORTS_API_TOKEN", ENV_TOKEN)
    model = ScriptedModel(
        [[call("c1", "fetch_report", day="mon"), call("c2", "refuse", day="tue")], "sorry"]
    )
    kit = Toolkit(fetch_report, refuse)
    async with AgentTestEnvironment.start(toolkit=kit, model=model, env=dev_env) as env:
        chat = await env.start_conversation("reports please")
        await env.wait_for_reply(chat)
        outputs = await env.tool_outputs(chat)
        handle = env.client.get_workflow_handle(chat)
        history = (await handle.fetch_history()).to_json()
    seen_by_model = json.dumps([o.model_dump() for o in model.requests[1].transcript])
    for text in (outputs["c1"].content, outputs["c2"].content, seen_by_model, history):
        for secret in ("hunter2-pw", "qwerty-12345", ENV_TOKEN):
            assert secret not in text, (secret, text[:300])
    assert outputs["c1"].failure_kind == "execution_error"
    assert "RuntimeError" in outputs["c1"].content and REDACTED in outputs["c1"].content
    assert "reports.example.com/mon" in outputs["c1"].content  # what is not secret stays
    assert outputs["c2"].failure_kind == "permission_denied"
    assert REDACTED in outputs["c2"].content


def test_model_failures_are_scrubbed_too() -> None:
    from durable_tools.models.errors import bounded_failure

    error = RuntimeError(f"POST https://api.example.com/v1?key=abcdef123456 with {ENV_TOKEN}")
    bounded = bounded_failure(error, Redactor([ENV_TOKEN]))
    assert "abcdef123456" not in bounded.message and ENV_TOKEN not in bounded.message
    assert bounded.message.startswith("RuntimeError: POST https://api.example.com/v1?key=")


# Issue 23, item 8: the secret-name suffixes and the shapes they are written in.

_SECRET_NAMES = st.sampled_from(
    [
        "api_key",
        "OPENAI_API_KEY",
        "x-api-key",
        "X_KEY",
        "DECISION_KEYS",
        "client_secret",
        "INBOX_SECRET",
        "access_token",
        "INBOX_TOKENS",
        "DB_PWD",
        "password",
        "SMTP_PASSWORD",
        "SENTRY_DSN",
        "credentials",
        "GOOGLE_CREDENTIALS",
    ]
)
_VALUES = st.text(alphabet=string.ascii_letters + string.digits + "-_.~+/", max_size=40)
_SHAPES = st.sampled_from(
    [
        "{name}={value}",
        "{name}: {value}",
        '"{name}": "{value}"',
        "'{name}': '{value}'",
        "https://api.example.com/v1?{name}={value}&page=2",
        "https://api.example.com/v1?page=2&{name}={value}",
        "Authorization: Bearer {value}",
        "authorization: {value}",
        '{{"Authorization": "Basic {value}"}}',
    ]
)


@settings(max_examples=300, deadline=None)
@given(name=_SECRET_NAMES, value=_VALUES, shape=_SHAPES, before=st.text(max_size=60))
def test_secret_named_values_never_survive(name: str, value: str, shape: str, before: str) -> None:
    """Any value of a secret-named key, in any of the shapes it is written in, is redacted."""
    # The value starts with `Q`, which nothing else in the text holds: no `Q`
    # in the output means no part of the value survived.
    assume("Q" not in before)
    text = shape.format(name=name, value=f"Q{value}")
    out = Redactor().scrub(f"{before} {text} and more")
    assert "Q" not in out, (text, out)
    assert REDACTED in out


@settings(max_examples=100, deadline=None)
@given(name=_SECRET_NAMES, shape=_SHAPES, dots=st.sampled_from(["...", "…"]))
def test_the_placeholder_stays_in_every_shape(name: str, shape: str, dots: str) -> None:
    text = shape.format(name=name, value=dots)
    assert Redactor().scrub(text) == text


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("ANTHROPIC_API_KEY", "an-opaque-value-1"),
        ("DURABLE_TOOLS_INBOX_SECRET", "csrf-secret-value"),
        ("SOME_SERVICE_KEY", "service-value-9"),
        ("MYSQL_PWD", "db-pass-77"),
        ("SENTRY_DSN", "https://abc@o1.ingest.sentry.io/5"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-honeycomb-team=hc-team-key"),
    ],
)
def test_the_workers_secret_variables_by_suffix(name: str, secret: str) -> None:
    assert secret in secret_env_values({name: secret})
    out = Redactor(secret_env_values({name: secret})).scrub(f"failed with {secret} here")
    assert secret not in out and out.endswith(" here")


def test_each_entry_of_a_list_valued_secret_is_a_secret() -> None:
    hmac = "q" * 43 + "="
    tokens = "ana:tok-abcdefghijklmnop1234:finance\nbob:other-token-0987654321"
    env = {
        "DURABLE_TOOLS_DECISION_KEYS": f"k1:{hmac},k2:ed25519:{'B' * 43}",
        "DURABLE_TOOLS_INBOX_TOKENS": tokens,
    }
    redact = Redactor(secret_env_values(env))
    out = redact.scrub(f"bad key {hmac}; sent tok-abcdefghijklmnop1234 as ana of finance")
    assert hmac not in out and "tok-abcdefghijklmnop1234" not in out
    assert "ana of finance" in out  # names and groups are short: not secrets


def test_a_known_secret_url_encoded_is_redacted() -> None:
    secret = "a/b+c=d e-123"
    out = Redactor([secret]).scrub("GET /v1?x=a%2Fb%2Bc%3Dd%20e-123 and x=a%2Fb%2Bc%3Dd+e-123")
    assert "e-123" not in out


def test_registered_secrets_reach_the_worker_redactor(monkeypatch: pytest.MonkeyPatch) -> None:
    from durable_tools.redact import register_secrets, worker_redactor

    register_secrets(["registered-secret-1"])
    monkeypatch.setenv("LATE_SERVICE_KEY", "set-after-start-2")
    out = worker_redactor().scrub("registered-secret-1 and set-after-start-2")
    assert out == f"{REDACTED} and {REDACTED}"
    assert worker_redactor() is worker_redactor()  # made again only when the secrets change
