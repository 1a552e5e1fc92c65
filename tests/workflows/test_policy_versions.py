"""Workers load an installed policy by version (issue 28, item 4), on the dev server.

A live change records the policy's document once, with the `set_policy`
signal; the `model.turn` and `policy.reevaluate-v1` inputs name the version
(`PolicyRef`), and the worker loads the document: its compiled versions,
the run in its process, or the `policy_version` query, checking the digest
of whatever it reads. A version it cannot load, or a document whose digest
is another, fails closed: the call waits for approval, the verdict says why.
Hostile arguments to the query never fail a workflow task.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
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
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import eventually, outputs_by_id

from durable_tools import Toolkit, tool
from durable_tools.activities.activity_base import QUERIES_SENT
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, PendingApproval
from durable_tools.policies import Policy
from durable_tools.policy_document import PolicyDocument
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.workflows.conversation_handlers import ConversationHandlers

T = TypeVar("T")

MARKER = "marker-7f3c-limit"
"""In a rule that never decides: only the document holds it (not verdicts, not outputs)."""

BEFORE = Policy.from_text("""
name: refunds
rules:
  - {id: all, when: 'tool == "refund"', outcome: approve, groups: [finance]}
""")
AFTER_TEXT = f"""
name: refunds
rules:
  - {{id: unused, when: 'tool == "{MARKER}"', outcome: deny}}
  - {{id: never, when: 'args.amount_cents > 1000000', outcome: deny, reason: too much}}
  - {{id: two, when: 'args.amount_cents > 5000', outcome: approve, groups: [finance], quorum: 2}}
  - {{id: small, when: 'true', outcome: run}}
"""
AFTER = Policy.from_text(AFTER_TEXT)
OPEN = Policy.from_text("""
name: open
rules:
  - {id: everything, when: 'true', outcome: run}
""")


@tool
async def refund(order: str, amount_cents: int) -> str:
    """Refund an order.

    Args:
        order: The order id.
        amount_cents: The amount in euro cents.
    """
    return f"refunded {amount_cents} on {order}"


@pytest.fixture(autouse=True)
def _ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))


@asynccontextmanager
async def shop(
    env: WorkflowEnvironment, task_queue: str
) -> AsyncIterator[tuple[Conversations, DurableToolsPlugin]]:
    plugin = DurableToolsPlugin(
        toolkits={"shop": Toolkit(refund, label="shop")},
        models={"directed": ScriptedModel(directed)},
        agents={"refunds": Agent(model="directed", toolkit="shop", policy=BEFORE)},
    )
    client = Client(**{**env.client.config(), "plugins": [plugin]})
    async with Worker(client, task_queue=task_queue):
        yield Conversations(client, task_queue=task_queue), plugin


async def approvals(conversations: Conversations, workflow_id: str) -> list[PendingApproval]:
    async def probe() -> list[PendingApproval] | None:
        return (await conversations.pending(workflow_id)).approvals or None

    return await eventually(probe, what="a pending approval")


async def answered(conversations: Conversations, workflow_id: str, call_id: str) -> Any:
    async def probe() -> Any:
        return outputs_by_id(await conversations.history(workflow_id)).get(call_id)

    return await eventually(probe, what=f"the output of {call_id}")


async def scheduled_inputs(
    conversations: Conversations, workflow_id: str
) -> list[tuple[str, bytes]]:
    """Each activity's type and input bytes, in order, and the `set_policy` signals' as `signal`."""
    found: list[tuple[str, bytes]] = []
    handle = conversations.client.get_workflow_handle(workflow_id)
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attributes = event.activity_task_scheduled_event_attributes
            data = b"".join(p.data for p in attributes.input.payloads)
            found.append((attributes.activity_type.name, data))
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            attributes = event.workflow_execution_signaled_event_attributes
            if attributes.signal_name == "set_policy":
                found.append(("signal", b"".join(p.data for p in attributes.input.payloads)))
        assert event.event_type != EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    return found


async def test_activity_inputs_name_the_version_and_history_holds_the_document_once(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    workflow_id = f"versions-{uuid.uuid4().hex[:8]}"
    script = turns(
        [("huge", "refund", {"order": "o1", "amount_cents": 2_000_000})],
        [("small", "refund", {"order": "o2", "amount_cents": 3000})],
    )
    async with shop(dev_env, task_queue) as (conversations, _):
        await conversations.start(workflow_id, agent=AgentConfig(name="refunds"), message=script)
        await approvals(conversations, workflow_id)  # under the agent's policy
        await conversations.set_policy(workflow_id, AFTER_TEXT, installed_by="ops-lead")
        huge = await answered(conversations, workflow_id, "huge")  # denied by the new version
        assert huge.failure_kind == "denied" and "too much" in huge.content
        small = await answered(conversations, workflow_id, "small")  # planned under it: runs
        assert not small.is_error
        verdict = await conversations.policy_verdict(workflow_id, "small")
        assert verdict is not None and (verdict.rule, verdict.version) == ("small", AFTER.version)

        inputs = await scheduled_inputs(conversations, workflow_id)
    kinds = [kind for kind, _ in inputs]
    signal = kinds.index("signal")
    # The document once, in the signal; after it, each activity names the version only.
    assert MARKER.encode() in inputs[signal][1]
    after = inputs[signal + 1 :]
    assert {kind for kind, _ in after} >= {"model.turn", "policy.reevaluate-v1"}
    for kind, data in after:
        if kind in ("model.turn", "policy.reevaluate-v1"):
            assert AFTER.version.encode() in data, kind
            assert MARKER.encode() not in data, kind
            assert b"args.amount_cents" not in data and b'"rules"' not in data, kind
            assert b'"policy_ref"' in data and b'"installed_by":"ops-lead"' in data
    assert all(AFTER.version.encode() not in data for _, data in inputs[:signal])


async def test_a_worker_without_the_version_loads_it_by_query_and_checks_it(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    workflow_id = f"versions-query-{uuid.uuid4().hex[:8]}"
    async with shop(dev_env, task_queue) as (conversations, plugin):
        activities = plugin.agent_activities
        activities.live_reads = False  # as another process: the run is not in reach
        versions = activities.policy_versions
        await conversations.start(workflow_id, agent=AgentConfig(name="refunds"), message="hi")
        await conversations.set_policy(workflow_id, AFTER, installed_by="ops-lead")
        sent = QUERIES_SENT["policy_version"]

        # A model turn: planned under the installed version, read by query.
        small = turns([("small", "refund", {"order": "o1", "amount_cents": 3000})])
        await conversations.send(workflow_id, small)
        assert not (await answered(conversations, workflow_id, "small")).is_error
        verdict = await conversations.policy_verdict(workflow_id, "small")
        assert verdict is not None and (verdict.rule, verdict.version) == ("small", AFTER.version)
        assert not verdict.error
        assert versions.loaded.get("query") == 1 and QUERIES_SENT["policy_version"] == sent + 1

        # The next turn finds it compiled: no query.
        large = turns([("large", "refund", {"order": "o2", "amount_cents": 60000})])
        await conversations.send(workflow_id, large)
        [waiting] = await approvals(conversations, workflow_id)
        assert (waiting.call_id, waiting.quorum) == ("large", 2)
        assert versions.loaded.get("compiled") == 1 and versions.loaded.get("query") == 1

        # A re-evaluation on a worker that forgot every version: by query too.
        versions.clear()
        await conversations.set_policy(workflow_id, OPEN, installed_by="ops-lead")
        assert not (await answered(conversations, workflow_id, "large")).is_error
        assert versions.loaded.get("query") == 2 and "refused" not in versions.loaded


async def test_a_version_the_worker_cannot_load_fails_closed(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    workflow_id = f"versions-closed-{uuid.uuid4().hex[:8]}"
    async with shop(dev_env, task_queue) as (conversations, plugin):
        activities = plugin.agent_activities
        activities.live_reads = False
        activities.policy_versions.query_timeout = 0.0  # the query never answers in time
        await conversations.start(workflow_id, agent=AgentConfig(name="refunds"), message="hi")
        await conversations.set_policy(workflow_id, OPEN, installed_by="ops-lead")
        small = turns([("small", "refund", {"order": "o1", "amount_cents": 3000})])
        await conversations.send(workflow_id, small)
        # OPEN would run it; unloaded, it waits for a person, and the verdict says why.
        [waiting] = await approvals(conversations, workflow_id)
        verdict = waiting.policy
        assert verdict is not None and waiting.call_id == "small"
        assert (verdict.policy, verdict.version, verdict.outcome) == (
            "open",
            OPEN.version,
            "approve",
        )
        assert "not loaded" in verdict.error and "policy_version query took over" in verdict.error
        assert activities.policy_versions.loaded == {"refused": 1}


async def test_a_document_whose_digest_is_another_is_refused(
    dev_env: WorkflowEnvironment, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    forged = PolicyDocument.model_validate(
        {"name": "open", "rules": [{"id": "everything", "when": "true", "outcome": "deny"}]}
    )

    def forged_answer(self: ConversationHandlers, version: str) -> PolicyDocument | None:
        return forged  # whatever version is asked for

    monkeypatch.setattr(ConversationHandlers, "live_policy", forged_answer)
    workflow_id = f"versions-forged-{uuid.uuid4().hex[:8]}"
    async with shop(dev_env, task_queue) as (conversations, plugin):
        await conversations.start(workflow_id, agent=AgentConfig(name="refunds"), message="hi")
        await conversations.set_policy(workflow_id, OPEN, installed_by="ops-lead")
        small = turns([("small", "refund", {"order": "o1", "amount_cents": 3000})])
        await conversations.send(workflow_id, small)
        [waiting] = await approvals(conversations, workflow_id)
        verdict = waiting.policy
        assert verdict is not None and (verdict.version, verdict.outcome) == (
            OPEN.version,
            "approve",
        )
        assert "refused" in verdict.error and "digests to sha256:" in verdict.error
        assert plugin.agent_activities.policy_versions.loaded == {"refused": 1}

        # A call already waiting is not decided again: it waits for finance, as before.
        other = f"{workflow_id}-waiting"
        large = turns([("large", "refund", {"order": "o2", "amount_cents": 60000})])
        await conversations.start(other, agent=AgentConfig(name="refunds"), message=large)
        await approvals(conversations, other)
        await conversations.set_policy(other, OPEN, installed_by="ops-lead")

        async def recorded() -> list[str] | None:
            pending = await conversations.pending(other)
            found = [r.reason for r in pending.rejected if r.signal == "set_policy"]
            return found or None

        [reason] = await eventually(recorded, what="the re-evaluation's refusal recorded")
        assert "not decided again" in reason and "refused" in reason and "wait as before" in reason
        [still] = (await conversations.pending(other)).approvals
        assert (still.call_id, still.approvers, still.quorum) == ("large", ["group:finance"], 1)
        assert plugin.agent_activities.policy_versions.loaded == {"refused": 2}


# ------------------------------------------------- the query's hostile inputs


def _raw(encoding: str | None, data: bytes) -> RawValue:
    metadata = {"encoding": encoding.encode()} if encoding is not None else {}
    return RawValue(Payload(metadata=metadata, data=data))


_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
_arguments = st.one_of(
    _values.map(lambda v: _raw("json/plain", json.dumps(v).encode())),
    st.sampled_from(
        [
            _raw("json/plain", json.dumps(OPEN.version).encode()),
            _raw("json/plain", json.dumps(OPEN.version.upper()).encode()),
            _raw("json/plain", json.dumps(OPEN.version + " ").encode()),
            _raw("json/plain", json.dumps(BEFORE.version).encode()),
            _raw("binary/plain", OPEN.version.encode()),
            _raw("json/plain", b"{not json"),
            _raw(None, b""),
            _raw("garbage/x", b"\xff\xfe"),
        ]
    ),
    st.binary(max_size=40).map(lambda b: _raw("json/plain", b)),
)


@pytest.mark.timeout(300)
async def test_hostile_policy_version_queries_never_fail_a_workflow_task(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    workflow_id = f"versions-hostile-{uuid.uuid4().hex[:8]}"
    async with shop(dev_env, task_queue) as (conversations, _):
        await conversations.start(workflow_id, agent=AgentConfig(name="refunds"), message="hi")
        await conversations.set_policy(workflow_id, OPEN, installed_by="ops-lead")
        handle = conversations.client.get_workflow_handle(workflow_id)

        async def installed() -> bool:
            answer = await handle.query("policy_version", OPEN.version)
            return answer is not None

        await eventually(installed, what="the installed version")
        loop = asyncio.get_running_loop()

        def on_loop(coro: Coroutine[Any, Any, T]) -> T:
            return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)

        async def ask(args: list[RawValue]) -> None:
            answer = await handle.query("policy_version", args=args)
            exact = len(args) == 1 and args[0].payload.data == json.dumps(OPEN.version).encode()
            if exact and args[0].payload.metadata.get("encoding") == b"json/plain":
                assert PolicyDocument.model_validate(answer) == OPEN.document
            else:
                assert answer is None, args

        @settings(
            max_examples=60,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        )
        @given(args=st.lists(_arguments, max_size=3))
        def prop(args: list[RawValue]) -> None:
            on_loop(ask(args))

        await asyncio.to_thread(prop)
        # The conversation goes on: a call planned under the installed version runs.
        small = turns([("small", "refund", {"order": "o1", "amount_cents": 3000})])
        await conversations.send(workflow_id, small)
        assert not (await answered(conversations, workflow_id, "small")).is_error
        await scheduled_inputs(conversations, workflow_id)  # asserts no workflow task failed


def test_the_recorded_history_holds_the_document_in_the_signal_and_the_carry_only() -> None:
    # `record_histories.py policy_by_version`: replayed with the others
    # (test_agent_workflow_replay.py); here, where its document is.
    histories = Path(__file__).resolve().parent / "histories"
    where: list[str] = []
    for path in sorted(histories.glob("policy_by_version.run*.json")):
        for event in json.loads(path.read_text())["events"]:
            for key, attributes in event.items():
                if not key.endswith("EventAttributes") or "input" not in attributes:
                    continue
                payloads = attributes["input"].get("payloads", [])
                data = b"".join(base64.b64decode(p["data"]) for p in payloads)
                if b'"rules"' in data:
                    name = attributes.get("signalName") or attributes.get("activityType") or ""
                    where.append(f"{path.stem}: {key.removesuffix('EventAttributes')} {name}")
                if key == "activityTaskScheduledEventAttributes":
                    kind = attributes["activityType"]["name"]
                    if kind in ("model.turn", "policy.reevaluate-v1"):
                        assert b'"policy_ref"' in data, (path.stem, kind)
    assert where == [
        "policy_by_version.run1: workflowExecutionSignaled set_policy",
        "policy_by_version.run1: workflowExecutionContinuedAsNew ",  # the carried state
        "policy_by_version.run2: workflowExecutionStarted ",  # the same, as the next run's input
    ]
