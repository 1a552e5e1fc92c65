"""Hostile `set_policy` inputs never fail a workflow task; each bad one is a clear rejection.

A hypothesis strategy sends batches of `set_policy` signals to a conversation
whose call waits for approval: no input, several, other encodings, JSON of
any shape, policy-like documents with wrong fields, duplicate rule ids, a
quorum without groups, rules CEL cannot compile, claimed versions that are
not the document's digest, documents over the size limit, and valid
changes. Then a valid change releases the call. No workflow task may fail;
every input that is not an installable change is in `pending().rejected`
(signal `set_policy`) with its reason; a valid one is installed.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from agent_support import LEDGER_ENV, directed, turns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id

from durable_tools import Toolkit, tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig
from durable_tools.handler_input import decode_input
from durable_tools.policies import Policy
from durable_tools.policy_document import PolicyChange, PolicyDocument, change_problem
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin

T = TypeVar("T")

GATE = Policy.from_text("""
name: gate
rules:
  - {id: all, when: 'true', outcome: approve}
""")
RELEASE = PolicyDocument.from_text("""
name: release
rules:
  - {id: all, when: 'true', outcome: run}
""")


@tool
async def pay(cents: int) -> str:
    """Pay.

    Args:
        cents: The amount.
    """
    return f"paid {cents}"


def _raw(value: Any) -> RawValue:
    return RawValue(Payload(metadata={"encoding": b"json/plain"}, data=json.dumps(value).encode()))


_text = st.text(max_size=30) | st.sampled_from(["", "\ud800x", "a" * 200, "\x00"])
_rule = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["r1", "r2", ""]) | _text,
        "when": st.sampled_from(["true", "args.cents > 5", "((", "1", 'tool == "pay"', ""]),
        "outcome": st.sampled_from(["run", "approve", "deny", "maybe", 1]),
    },
    optional={
        "groups": st.lists(st.sampled_from(["finance", "user:ana", "", "x" * 300]), max_size=3),
        "quorum": st.sampled_from([1, 2, 0, 101, "2", True, 2.5]),
        "reason": _text,
        "extra": st.booleans(),
    },
)
_document = st.fixed_dictionaries(
    {"name": st.sampled_from(["p", ""]) | _text, "rules": st.lists(_rule, max_size=4)},
    optional={"default": st.sampled_from(["run", "approve", "deny", None, "no"])},
)
_change = st.fixed_dictionaries(
    {"document": _document},
    optional={
        "version": st.sampled_from(["", "sha256:00", "md5:x"]),
        "installed_by": _text | st.integers(),
        "reason": _text,
        "unknown": st.integers(),
    },
)
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)
_too_big = {
    "document": {
        "name": "big",
        "rules": [
            {"id": f"r{i}", "when": "true " + " " * 3990, "outcome": "run"} for i in range(20)
        ],
    }
}
_payloads = (
    _change.map(_raw)
    | _json.map(_raw)
    | st.sampled_from(
        [
            RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"policy")),
            RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b"{not json")),
            RawValue(Payload(metadata={}, data=b"")),
            _raw(_too_big),
            _raw({"document": RELEASE.model_dump(mode="json"), "version": "sha256:" + "0" * 64}),
        ]
    )
)
_batches = st.lists(st.lists(_payloads, max_size=2), min_size=1, max_size=4)


def _installable(args: list[RawValue]) -> bool:
    decoded = decode_input(args, PolicyChange, pydantic_data_converter.payload_converter)
    return isinstance(decoded, PolicyChange) and change_problem(decoded)[0] is None


async def _deliver(conversations: Conversations, batch: list[list[RawValue]]) -> None:
    workflow_id = f"hostile-policy-{uuid.uuid4().hex[:8]}"
    script = turns([("p1", "pay", {"cents": 10})])
    await conversations.start(workflow_id, agent=AgentConfig(name="payer"), message=script)

    async def waiting() -> bool:
        return bool((await conversations.pending(workflow_id)).approvals)

    await eventually(waiting, what="the gated call")
    handle = conversations.client.get_workflow_handle(workflow_id)
    for args in batch:
        await handle.signal("set_policy", args=args)
    await conversations.set_policy(workflow_id, RELEASE, installed_by="ops")

    async def answered() -> bool:
        return "p1" in outputs_by_id(await conversations.history(workflow_id))

    await eventually(answered, what="the call answered after the last change")
    failed = [
        e.workflow_task_failed_event_attributes.failure.message
        async for e in handle.fetch_history_events()
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert failed == []
    rejected = [r for r in (await conversations.pending(workflow_id)).rejected]
    refused = [r for r in rejected if r.signal == "set_policy"]
    assert len(refused) == sum(not _installable(args) for args in batch), refused
    for rejection in refused:
        assert rejection.reason.startswith(("undecodable set_policy signal", "policy change"))
    events, _ = await conversations.retained_events(workflow_id)
    installed = [e for e in events if e.kind == "policy_installed"]
    assert len(installed) == 1 + sum(_installable(args) for args in batch)


@pytest.fixture
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))


@pytest.fixture
async def conversations(
    dev_env: WorkflowEnvironment, task_queue: str, _ledger: None
) -> AsyncIterator[Conversations]:
    plugin = DurableToolsPlugin(
        toolkits={"pay": Toolkit(pay, label="pay")},
        models={"directed": ScriptedModel(directed)},
        agents={"payer": Agent(model="directed", toolkit="pay", policy=GATE)},
    )
    client = Client(**{**dev_env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue):
        yield Conversations(client, task_queue=task_queue)


def test_the_strategy_reaches_both_kinds() -> None:
    assert _installable([_raw({"document": RELEASE.model_dump(mode="json")})])
    assert not _installable([_raw(_too_big)])
    assert not _installable([_raw({"document": RELEASE.model_dump(mode="json"), "version": "x"})])


@pytest.mark.timeout(300)
async def test_hostile_set_policy_inputs_never_fail_a_workflow_task(
    conversations: Conversations,
) -> None:
    loop = asyncio.get_running_loop()

    def on_loop(coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

    @settings(
        max_examples=25,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    @given(batch=_batches)
    def prop(batch: list[list[RawValue]]) -> None:
        on_loop(_deliver(conversations, batch))

    await asyncio.to_thread(prop)
