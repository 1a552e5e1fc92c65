"""Agents are defined on the worker (DESIGN invariant 8), on the Temporal dev server.

A worker that declares agents runs a conversation only as its agent allows:
an undeclared agent, a model or setting the agent does not allow, the
offline models on a worker that does not enable them, and a script outside
the worker's scripts directory all fail the model turn with one line, and
the conversation waits in state `model_failed`. What the agent allows
reaches the model adapter.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from agent_support import LEDGER_ENV, TOOLKITS
from pydantic import BaseModel
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

from durable_tools.agents import Agent, AgentOverrides
from durable_tools.conversation import AGENT_REFUSED, AgentConfig, ModelFailure
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage

SECRET_LINE = "root:x:0:0:the-secret-line"


class Ticket(BaseModel):
    order_id: str
    refund: bool


def recorder() -> ScriptedModel:
    return ScriptedModel(lambda _: AssistantMessage(text="hello from the recorder"))


def support_agents() -> dict[str, Agent]:
    return {
        "support": Agent(
            model="recorded",
            toolkit="tests",
            instructions="You help {customer_name} (tier {tier}).",
            settings={"temperature": 0.2, "max_tokens": 100},
            variables={"tier": "basic"},
            output_type=Ticket,
            allow=AgentOverrides(
                models=["recorded-mini"], settings=["temperature"], variables=["customer_name"]
            ),
        )
    }


@pytest.fixture
async def production(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    """A worker as `durable-tools worker` runs it: agents declared, no offline models."""
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger.jsonl",
        models={"recorded": recorder(), "recorded-mini": recorder()},
        agents=support_agents(),
        scripts_dir=tmp_path,
    ) as h:
        yield h


async def start(harness: Harness, agent: str | AgentConfig, **kwargs: Any) -> str:
    workflow_id = f"conv-{uuid.uuid4()}"
    harness.started.append(workflow_id)
    await harness.conversations.start(workflow_id, agent=agent, message="hello", **kwargs)
    return workflow_id


async def refused(harness: Harness, workflow_id: str) -> ModelFailure:
    """The conversation waits in `model_failed`; the failure, checked to be one line."""
    await harness.wait_state(workflow_id, "model_failed")
    failure = (await harness.conversations.status(workflow_id)).model_failed
    assert failure is not None
    assert failure.type == AGENT_REFUSED and not failure.retries_exhausted
    assert "\n" not in failure.message
    return failure


def requests(harness: Harness, name: str) -> list[Any]:
    model = harness.plugin.agent_activities.models[name]
    assert isinstance(model, ScriptedModel)
    return model.requests


@pytest.mark.parametrize("agents", [True, False], ids=["declared-agents", "development-mode"])
async def test_offline_models_refused_by_a_production_worker(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, agents: bool
) -> None:
    """`test` and `scripted:/etc/passwd`: refused in one line, nothing of the file in history."""
    secret = tmp_path / "outside" / "passwd"
    secret.parent.mkdir()
    secret.write_text(f"{SECRET_LINE}\n  - : [\n")  # a YAML error would quote it
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger.jsonl",
        models={"recorded": recorder(), "recorded-mini": recorder()},
        agents=support_agents() if agents else None,
    ) as harness:
        for spec in ("test", "scripted:/etc/passwd", f"scripted:{secret}"):
            wf = await start(
                harness,
                AgentConfig(name="support", model=spec, toolkit="" if agents else "tests"),
                variables={"customer_name": "Ana"} if agents else None,
            )
            message = (await refused(harness, wf)).message
            expected = (
                f"agent 'support' does not allow model {spec!r} (allowed: recorded, recorded-mini)"
                if agents
                else f"model {spec!r} is an offline model, and this worker does not allow "
                "offline models (App(allow_offline_models=True), durable-tools worker "
                "--allow-offline-models)"
            )
            assert message == expected
            history = (await harness.client.get_workflow_handle(wf).fetch_history()).to_json()
            assert "root:" not in history and SECRET_LINE not in history
        assert harness.ledger_rows() == []  # the test model called no tool


async def test_scripts_confined_to_the_scripts_directory(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    scripts = tmp_path / "scripts"
    scripts.mkdir()
    (scripts / "ok.yaml").write_text("- text: scripted hello\n")
    outside = tmp_path / "secret.yaml"
    outside.write_text(f"{SECRET_LINE}\n  - : [\n")
    (scripts / "link.yaml").symlink_to(outside)
    async with running(
        dev_env,
        task_queue,
        tmp_path / "ledger.jsonl",
        allow_offline_models=True,
        scripts_dir=scripts,
    ) as harness:
        for path in ("/etc/passwd", str(outside), "../secret.yaml", "link.yaml"):
            wf = await start(harness, AgentConfig(model=f"scripted:{path}", toolkit="tests"))
            failure = await refused(harness, wf)
            assert "outside this worker's scripts directory" in failure.message, failure.message
            history = (await harness.client.get_workflow_handle(wf).fetch_history()).to_json()
            assert SECRET_LINE not in history and "root:" not in history
        wf = await start(harness, AgentConfig(model="scripted:ok.yaml", toolkit="tests"))
        await harness.wait_assistant_text(wf, "scripted hello")


async def test_undeclared_agent_refused(production: Harness) -> None:
    wf = await start(production, "admin")
    failure = await refused(production, wf)
    assert failure.message == "agent 'admin' is not declared on this worker (declared: support)"
    wf = await start(production, AgentConfig(name="admin", model="recorded", toolkit="tests"))
    assert "not declared" in (await refused(production, wf)).message
    assert requests(production, "recorded") == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"model": "openai:gpt-4o"},
            "agent 'support' does not allow model 'openai:gpt-4o' "
            "(allowed: recorded, recorded-mini)",
        ),
        (
            {"settings": {"max_tokens": 100000}},
            "agent 'support' does not allow setting 'max_tokens' (allowed: temperature)",
        ),
        (
            {"variables": {"tier": "gold"}},
            "agent 'support' does not allow variable 'tier' (allowed: customer_name)",
        ),
    ],
    ids=["model", "setting", "variable"],
)
async def test_disallowed_override_refused(
    production: Harness, overrides: Mapping[str, Any], expected: str
) -> None:
    wf = await start(production, "support", **{"variables": {"customer_name": "Ana"}, **overrides})
    assert (await refused(production, wf)).message == expected
    assert requests(production, "recorded") == []


async def test_old_config_form_refused_where_the_agent_does_not_allow_it(
    production: Harness,
) -> None:
    wf = await start(
        production,
        AgentConfig(name="support", model="recorded", toolkit="tests", instructions="Obey me."),
        variables={"customer_name": "Ana"},
    )
    message = (await refused(production, wf)).message
    assert message == "agent 'support' does not let a client replace its instructions"
    other_kit = AgentConfig(name="support", toolkit="admin")
    wf = await start(production, other_kit, variables={"customer_name": "Ana"})
    assert "a client cannot choose 'admin'" in (await refused(production, wf)).message


async def test_allowed_overrides_and_variables_reach_the_model(production: Harness) -> None:
    wf = await start(
        production,
        "support",
        model="recorded-mini",
        settings={"temperature": 0.9},
        variables={"customer_name": "Ana"},
    )
    await production.wait_assistant_text(wf, "hello from the recorder")
    (request,) = requests(production, "recorded-mini")
    assert request.model == "recorded-mini"
    assert request.instructions == "You help Ana (tier basic)."
    assert request.settings == {"temperature": 0.9, "max_tokens": 100}
    (finish,) = [t for t in request.tools if t.name == "finish"]
    assert finish.parameters["properties"]["output"]["required"] == ["order_id", "refund"]
    assert requests(production, "recorded") == []
    status = await production.conversations.status(wf)
    assert set(status.usage) <= {"recorded-mini"}


async def test_the_old_form_matching_the_agent_still_runs(production: Harness) -> None:
    same = AgentConfig(
        name="support",
        model="recorded",
        toolkit="tests",
        instructions="You help {customer_name} (tier {tier}).",
        settings={"max_tokens": 100},
        variables={"customer_name": "Bo"},
    )
    wf = await start(production, same)
    await production.wait_assistant_text(wf, "hello from the recorder")
    (request,) = requests(production, "recorded")
    assert request.instructions == "You help Bo (tier basic)."


async def test_missing_variable_refused(production: Harness) -> None:
    wf = await start(production, "support")
    assert (await refused(production, wf)).message == (
        "agent 'support' needs the variable 'customer_name'"
    )


async def test_development_mode_runs_what_the_client_sends(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "ledger.jsonl") as harness:
        assert "tests" in TOOLKITS
        wf = await start(
            harness, AgentConfig(model="directed", toolkit="tests", instructions="anything")
        )
        await harness.wait_state(wf, "idle")
        wf = await start(harness, "support")
        message = (await refused(harness, wf)).message
        assert message == (
            "agent 'support' names no model, and this worker declares no agents "
            "(App(agents={...})) to take it from"
        )
