"""Failure text is scrubbed of secrets before it reaches history or the model."""

from __future__ import annotations

import json
import string

import anyio
import pytest
from hypothesis import given, settings
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
