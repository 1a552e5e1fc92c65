"""`resolve_model`: specs to models; the model activity resolves unregistered specs."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

import durable_tools.models as models
from durable_tools import Toolkit, tool
from durable_tools._wire import ModelTurnRequest
from durable_tools.activities.agent_activities import AgentActivities
from durable_tools.conversation import AGENT_REFUSED, AgentConfig
from durable_tools.errors import ConfigurationError
from durable_tools.models import SchemaDrivenModel, ScriptedFileModel, resolve_model
from durable_tools.transcript import UserMessage


@tool
async def ping(host: str) -> str:
    """Ping a host.

    Args:
        host: Host name.
    """
    return f"pong {host}"


def test_offline_specs(tmp_path: Path) -> None:
    assert isinstance(resolve_model("test"), SchemaDrivenModel)
    script = tmp_path / "s.yaml"
    script.write_text("- text: hi\n")
    model = resolve_model(f"scripted:{script}")
    assert isinstance(model, ScriptedFileModel)
    assert model.path == script


@pytest.mark.parametrize("spec", ["", "gpt-4o", "scripted:", "openai:", "mistral:large", "Test"])
def test_unknown_specs_list_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        resolve_model(spec)
    assert str(info.value) == (
        f"unknown model spec {spec!r}; use one of: test, scripted:PATH, openai:MODEL, "
        "openai-responses:MODEL, anthropic:MODEL"
    )


def test_a_bad_script_is_reported_when_resolving(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"^script .*nope\.json: cannot read the file"):
        resolve_model(f"scripted:{tmp_path / 'nope.json'}")


@pytest.mark.parametrize(
    ("spec", "module", "cls"),
    [
        ("openai:gpt-5.4", "openai", "OpenAIChatModel"),
        ("openai-responses:gpt-5.4", "openai", "OpenAIResponsesModel"),
        ("anthropic:claude-sonnet-4-6", "anthropic", "AnthropicModel"),
    ],
)
def test_provider_specs_build_the_provider_class(
    spec: str, module: str, cls: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip(module)  # the provider SDK (an optional extra)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    try:
        model = resolve_model(spec)
    except ConfigurationError as exc:
        if "cannot be imported" in str(exc):
            pytest.skip(f"provider adapter not available yet: {exc}")
        raise
    assert type(model).__name__ == cls
    assert type(model).__module__ == f"durable_tools.models.{module}"


def test_public_exports() -> None:
    assert {"resolve_model", "SchemaDrivenModel", "ScriptedFileModel"} <= set(models.__all__)


def _turn(model: str) -> ModelTurnRequest:
    return ModelTurnRequest(
        workflow_id="w",
        run_id="r",
        turn=1,
        upto=1,
        agent=AgentConfig(model=model, toolkit="kit"),
        transcript=[UserMessage(text="go")],
    )


async def test_model_activity_resolves_specs_once_and_refuses_bad_ones() -> None:
    activities = AgentActivities({"kit": Toolkit(ping)}, {}, allow_offline_models=True)
    env = ActivityEnvironment()
    turn = await env.run(activities.model_turn, _turn("test"))
    assert [c.name for c in turn.message.tool_calls] == ["ping"]
    resolved = activities.models["test"]
    await env.run(activities.model_turn, _turn("test"))
    assert activities.models["test"] is resolved

    with pytest.raises(ApplicationError) as info:
        await env.run(activities.model_turn, _turn("nope"))
    assert info.value.type == "ConfigurationError"  # the worker's to fix, not a refusal
    assert info.value.non_retryable
    assert "unknown model spec 'nope'" in info.value.message
    assert "\n" not in info.value.message


async def test_model_activity_refuses_offline_specs_unless_allowed(tmp_path: Path) -> None:
    activities = AgentActivities({"kit": Toolkit(ping)}, {})
    env = ActivityEnvironment()
    for spec in ("test", "scripted:/etc/passwd"):
        with pytest.raises(ApplicationError) as info:
            await env.run(activities.model_turn, _turn(spec))
        assert info.value.type == AGENT_REFUSED and info.value.non_retryable
        assert info.value.message.startswith(f"model {spec!r} is an offline model")
    assert activities.models == {}


def test_scripts_confined_to_a_directory(tmp_path: Path) -> None:
    inside = tmp_path / "scripts"
    inside.mkdir()
    (inside / "ok.yaml").write_text("- text: hi\n")
    (tmp_path / "bad.yaml").write_text("root:x:0:0\n  - : [\n")
    (inside / "link.yaml").symlink_to(tmp_path / "bad.yaml")
    assert resolve_model("scripted:ok.yaml", scripts_dir=inside) is not None
    for path in ("/etc/passwd", "../bad.yaml", "link.yaml", str(tmp_path / "bad.yaml")):
        with pytest.raises(ConfigurationError) as info:
            resolve_model(f"scripted:{path}", scripts_dir=inside)
        message = str(info.value)
        assert message == (
            f"script {path!r} is outside this worker's scripts directory; scripted models "
            "read only files under the directory the worker names (scripts_dir)"
        )
