"""The recorded policy version decides: a replay with another policy gives the same verdicts.

Conversations run on the dev server under one version of the refund policy;
their histories are then replayed by a `Replayer` configured with another
version installed (other thresholds, other groups, other rule ids). The
replay must succeed, and the verdicts read back from history must be those
of the policy that ran, never those of the one installed now.

Also: inputs that policies cannot handle never fail a workflow task. A rule
that does not compile (kept with `check=False`), a rule that raises on the
arguments the model sent, a rule that gives a non-bool, and hostile argument
values (huge integers, deep nesting, NUL) each end in a recorded verdict that
fails closed, and the conversation goes on.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from agent_support import LEDGER_ENV, directed, turns
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from test_policy_refunds import KEY, REFUNDS, REFUNDS_TEXT, SHOP
from workflow_helpers import eventually, outputs_by_id

from durable_tools import Toolkit, dynamic_tool
from durable_tools.agents import Agent
from durable_tools.client import Conversations
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.errors import ConfigurationError
from durable_tools.policies import Policy, PolicyInput, Rule
from durable_tools.testing import ScriptedModel
from durable_tools.worker.plugin import DurableToolsPlugin

# Another version: every threshold moved, another group, other rule ids.
STRICTER = Policy.from_text(
    REFUNDS_TEXT.replace("refunds", "refunds-v2")
    .replace("1000000", "10")
    .replace("100000", "5")
    .replace("5000", "1")
    .replace("finance", "audit")
    .replace("id: refund-", "id: v2-")
)


def plugin(policy: Policy, toolkit: Toolkit = SHOP) -> DurableToolsPlugin:
    return DurableToolsPlugin(
        toolkits={"shop": toolkit},
        models={"directed": ScriptedModel(directed)},
        agents={"refunds": Agent(model="directed", toolkit="shop", policy=policy)},
        decision_keys={KEY[0]: KEY[1]},
    )


@asynccontextmanager
async def worker(
    env: WorkflowEnvironment, task_queue: str, policy: Policy, toolkit: Toolkit = SHOP
) -> AsyncIterator[Conversations]:
    client = Client(**{**env.client.config(), "plugins": [plugin(policy, toolkit)]})
    async with Worker(client, task_queue=task_queue):
        yield Conversations(client, task_queue=task_queue)


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(path))
    return path


def refund_turn(amounts: list[int]) -> str:
    return turns(
        [(f"c{i}", "refund", {"order": "o1", "amount_cents": a}) for i, a in enumerate(amounts)]
    )


@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    amounts=st.lists(
        st.one_of(
            st.integers(min_value=0, max_value=3_000_000),
            st.sampled_from([5_000, 5_001, 100_000, 100_001, 1_000_000, 1_000_001]),
        ),
        min_size=1,
        max_size=4,
    )
)
async def test_replay_with_another_policy_version_gives_the_recorded_verdicts(
    dev_env: WorkflowEnvironment, ledger: Path, amounts: list[int]
) -> None:
    task_queue = f"policy-replay-{uuid.uuid4()}"
    workflow_id = f"policy-replay-{uuid.uuid4()}"
    call_ids = [f"c{i}" for i in range(len(amounts))]
    async with worker(dev_env, task_queue, REFUNDS) as conversations:
        await conversations.start(
            workflow_id,
            agent=AgentConfig(name="refunds"),
            message=refund_turn(amounts),
            options=ConversationOptions(idle_timeout=0.5),
        )
        gated = [c for c, a in zip(call_ids, amounts, strict=True) if a > 5_000 and a <= 1_000_000]

        async def waiting() -> bool:
            pending = await conversations.pending(workflow_id)
            return {a.call_id for a in pending.approvals} == set(gated)

        await eventually(waiting, what="the gated calls pending")
        # Deny what waits, so the conversation ends; the verdicts are recorded already.
        for approval in (await conversations.pending(workflow_id)).approvals:
            await conversations.deny(
                workflow_id,
                approval.call_id,
                arguments_hash=approval.arguments_hash,
                decided_by="ana",
                groups=["finance"],
                sign_with=KEY,
                instance=approval.instance,
            )
        handle = conversations.client.get_workflow_handle(workflow_id)
        await handle.result()
        found = outputs_by_id(await conversations.history(workflow_id))
        assert set(found) == set(call_ids)
        recorded = [await conversations.policy_verdict(workflow_id, c) for c in call_ids]
        history = await handle.fetch_history()

    expected = [
        REFUNDS.decide(PolicyInput(tool="refund", args={"amount_cents": a})) for a in amounts
    ]
    assert recorded == expected
    assert all(v is not None and v.version == REFUNDS.version for v in recorded)

    replayer = Replayer(workflows=[], plugins=[plugin(STRICTER)])
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None


async def _anything(arguments: dict[str, Any]) -> str:
    return "ran"


ANYTHING = dynamic_tool("anything", run=_anything, parameters={"type": "object"})
OPEN = Toolkit(ANYTHING, label="open")
HOSTILE = Policy(
    "hostile",
    [
        Rule(id="not-a-bool", when='args.kind == "n" ? 3 : false', outcome="run"),
        Rule(id="raises", when='args.kind == "r" && args.x > 1', outcome="run", groups=("ops",)),
        Rule(id="ok", when="true", outcome="run"),
    ],
)
DEEP = "[" * 200 + "]" * 200
HOSTILE_ARGUMENTS = [
    '{"kind": "n"}',
    '{"kind": "r"}',
    '{"kind": "r", "x": "text"}',
    '{"kind": "r", "x": 123456789012345678901234567890}',
    '{"kind": "r", "x": "\\ud800"}',
    '{"kind": "r", "x": ' + DEEP + "}",
    '{"kind": "r\\u0000", "x": 1.5e308}',
    '{"kind": "r", "x": {"y": [null, true, -0.0, "é"]}}',
]


async def test_policies_that_cannot_decide_fail_closed_and_never_fail_a_workflow_task(
    dev_env: WorkflowEnvironment, task_queue: str, ledger: Path
) -> None:
    with pytest.raises(ConfigurationError, match="does not compile"):
        Policy("strict", [Rule(id="bad", when="(", outcome="run")])
    broken = Policy(
        "broken",
        [
            Rule(id="does-not-compile", when='tool == "never" &&& (', outcome="deny"),
            Rule(id="ok", when="true", outcome="run"),
        ],
        check=False,
    )
    # The first rule does not compile: every call fails closed on it.
    async with worker(dev_env, task_queue, broken, OPEN) as conversations:
        workflow_id = f"policy-broken-{uuid.uuid4()}"
        await conversations.start(
            workflow_id,
            agent=AgentConfig(name="refunds"),
            message=turns([("c0", "anything", {"kind": "ok"})]),
            options=ConversationOptions(),
        )
        approval = await _approval(conversations, workflow_id, "c0")
        assert approval.policy is not None
        assert approval.policy.rule == "does-not-compile"
        assert approval.policy.outcome == "approve"
        assert "does not compile" in approval.policy.error

    async with worker(dev_env, task_queue, HOSTILE, OPEN) as conversations:
        workflow_id = f"policy-hostile-{uuid.uuid4()}"
        calls = [[f"h{i}", "anything", text] for i, text in enumerate(HOSTILE_ARGUMENTS)]
        await conversations.start(
            workflow_id,
            agent=AgentConfig(name="refunds"),
            message=json.dumps({"turns": [calls]}),
            options=ConversationOptions(),
        )
        waiting = {"h0", "h1", "h2"}
        for call_id in sorted(waiting):
            await _approval(conversations, workflow_id, call_id)
        verdicts = {c: await conversations.policy_verdict(workflow_id, c) for c, _, _ in calls}
        # A lone surrogate or JSON nested past the parser's depth never reaches a
        # policy: the call is answered `input_validation_error` when planned.
        outputs = outputs_by_id(await conversations.history(workflow_id))
        refused = {c: outputs[c].failure_kind for c, v in verdicts.items() if v is None}
        assert refused == {"h4": "input_validation_error", "h5": "input_validation_error"}
        for call_id in waiting:
            verdict = verdicts[call_id]
            assert verdict is not None and verdict.outcome == "approve" and verdict.error
        assert verdicts["h0"] is not None and "gave int, not a bool" in verdicts["h0"].error
        assert verdicts["h1"] is not None and verdicts["h1"].approvers == ["group:ops"]
        for call_id, verdict in verdicts.items():
            assert call_id in refused or verdict is not None
            assert verdict is None or verdict.outcome == "run" or verdict.error
        status = await conversations.status(workflow_id)
        assert status.state != "failed"


async def _approval(conversations: Conversations, workflow_id: str, call_id: str) -> Any:
    async def probe() -> Any:
        pending = await conversations.pending(workflow_id)
        return next((a for a in pending.approvals if a.call_id == call_id), None)

    return await eventually(probe, what=f"pending approval of {call_id}")
