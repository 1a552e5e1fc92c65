"""Record `AgentWorkflow` histories for the replay test (run by hand, commit the output).

    python tests/workflows/record_histories.py            # every scenario
    python tests/workflows/record_histories.py sleep ...  # some of them

Starts an embedded Temporal dev server, runs each scenario below against a
worker with the shared test toolkit and the `directed` model
(`tests/agent_support.py`), waits for the conversation to end and writes its
history JSON to `tests/workflows/histories/<scenario>.json`; a conversation
that continues as new writes one file per run, `<scenario>.run<k>.json`. The
workflow id of every recording is the scenario's name, which the replay test
reads back from the file name.

The scenarios of approval policies, grants, escalation and budgets are
`policy_scenarios.py`; what scenarios share is `scenario_support.py`.

Re-record after a deliberate, versioned change of the workflow's commands
(and keep the old files when old histories must still replay).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from agent_support import AGENT, LOCAL_AGENT, MODELS, SPECIALIST, TOOLKITS, turns  # noqa: E402
from policy_scenarios import (  # noqa: E402
    DECISION_KEY,
    RECORDED_POLICY,
    budget_raised,
    grants_escalation,
    policy_by_version,
    policy_live_change,
    policy_quorum,
    signed_decisions,
)
from scenario_support import (  # noqa: E402
    BUDGET_PRICES,
    OPTIONS,
    Scenario,
    approval_digest,
    holds,
    interaction_digest,
    until,
)
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client, WorkflowFailureError  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from durable_tools.agent_tools import sub_agent_workflow_id  # noqa: E402
from durable_tools.budgets import Budget  # noqa: E402
from durable_tools.client import Conversations  # noqa: E402
from durable_tools.context import ContextPolicy, Summarize  # noqa: E402
from durable_tools.conversation import AgentConfig  # noqa: E402
from durable_tools.transcript import (  # noqa: E402
    AssistantMessage,
    ContextSummary,
    ToolCallOutput,
    is_reconciled,
)
from durable_tools.worker.dev_server import DevServer  # noqa: E402
from durable_tools.worker.plugin import DurableToolsPlugin  # noqa: E402

HISTORIES = Path(__file__).resolve().parent / "histories"


async def approval_approved(c: Conversations, wid: str) -> None:
    """A gated call approved by the durable `decide` signal, next to an ungated one."""
    script = turns(
        [("w1", "get_weather", {"city": "Paris"}), ("r1", "refund", {"order": "o1", "amount": 5})]
    )
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    digest = await approval_digest(c, wid, "r1")
    await c.approve(wid, "r1", arguments_hash=digest, decided_by="ana")


async def approval_denied(c: Conversations, wid: str) -> None:
    """A gated call denied through the validated `decide_now` update."""
    script = turns([("r1", "refund", {"order": "o2", "amount": 7})])
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    digest = await approval_digest(c, wid, "r1")
    await c.deny(wid, "r1", arguments_hash=digest, decided_by="bo", reason="no", wait=True)


async def approval_expired(c: Conversations, wid: str) -> None:
    """No decision before the deadline: the call is answered `expired`."""
    script = turns([("r1", "refund", {"order": "o3", "amount": 9})])
    options = OPTIONS.model_copy(update={"approval_deadline": 1.0})
    await c.start(wid, agent=AGENT, message=script, options=options)


async def early_decision(c: Conversations, wid: str) -> None:
    """A decision that arrives before its call is pending is kept and applied.

    Only when the conversation accepts early decisions (off by default); the
    committed history was recorded before that option, when it was the default.
    """
    from durable_tools.approvals import call_digest

    args = json.dumps({"order": "o4", "amount": 1})
    await c.start(
        wid, agent=AGENT, options=OPTIONS.model_copy(update={"accept_early_decisions": True})
    )
    await c.approve(wid, "r1", arguments_hash=call_digest("refund", "r1", args), decided_by="ana")
    await c.send(wid, json.dumps({"turns": [[["r1", "refund", args]]]}))


async def failures(c: Conversations, wid: str) -> None:
    """Every failure kind the model can cause, in one turn; the conversation goes on."""
    script = turns(
        [
            ("u1", "no_such_tool", {}),
            ("v1", "get_weather", {"town": 1}),
            ("b1", "boom", {}),
            ("f1", "flaky", {}),
            ("g1", "big", {"n_bytes": 2_000_000}),
            ("j1", "get_weather", "{not json"),
        ]
    )
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)


async def interaction_answered(c: Conversations, wid: str) -> None:
    """An interaction tool answered by the `answer` signal."""
    script = turns([("a1", "ask", {"question": "Refund it?"})])
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    digest = await interaction_digest(c, wid, "a1")
    await c.answer(wid, "a1", "yes", arguments_hash=digest, answered_by="customer")


async def answer_with_format(c: Conversations, wid: str) -> None:
    """`format: date` answers: a malformed one is rejected (call expires); a valid one counts."""
    script = turns(
        [("d1", "ask_date", {"question": "Ship when?"}), ("d2", "ask_date", {"question": "Bill?"})]
    )
    options = OPTIONS.model_copy(update={"approval_deadline": 2.0})
    await c.start(wid, agent=AGENT, message=script, options=options)
    d1 = await interaction_digest(c, wid, "d1")
    d2 = await interaction_digest(c, wid, "d2")
    await c.answer(wid, "d1", "next tuesday", arguments_hash=d1, answered_by="customer")

    async def rejected() -> bool:
        return any(r.call_id == "d1" for r in (await c.pending(wid)).rejected)

    await until(rejected, "the malformed date to be rejected")
    await c.answer(wid, "d2", "2026-11-24", arguments_hash=d2, answered_by="customer")


async def undecodable_inputs(c: Conversations, wid: str) -> None:
    """Signals with no input, two inputs and a `binary/plain` payload are recorded as rejected."""
    from temporalio.api.common.v1 import Payload
    from temporalio.common import RawValue

    script = turns([("r1", "refund", {"order": "o7", "amount": 4})])
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    digest = await approval_digest(c, wid, "r1")
    handle = c.client.get_workflow_handle(wid)
    await handle.signal("decide")
    await handle.signal("send", args=[{"text": "a"}, {"text": "b"}])
    binary = RawValue(Payload(metadata={"encoding": b"binary/plain"}, data=b"approve"))
    await handle.signal("answer", binary)

    async def rejected() -> bool:
        return len((await c.pending(wid)).rejected) == 3

    await until(rejected, "three rejected inputs")
    await c.approve(wid, "r1", arguments_hash=digest, decided_by="ana")


async def sleep(c: Conversations, wid: str) -> None:
    """The `sleep` signal tool: a durable timer."""
    script = turns([("s1", "sleep", {"seconds": 1})])
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)


async def pause_resume(c: Conversations, wid: str) -> None:
    """The `pause` signal tool, resumed by the `resume` signal."""
    script = turns([("p1", "pause", {"reason": "waiting for the invoice"})])
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)

    async def paused() -> bool:
        return (await c.pending(wid)).paused is not None

    await until(paused, "the pause")
    await c.resume(wid, "the invoice arrived", resumed_by="ana")


async def superseded(c: Conversations, wid: str) -> None:
    """A new user message while an approval waits: the call is answered `cancelled`."""
    script = turns([("r1", "refund", {"order": "o5", "amount": 3})])
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    await approval_digest(c, wid, "r1")
    await c.send(wid, "never mind")


async def handoff_finish(c: Conversations, wid: str) -> None:
    """A handoff to the specialist, whose turn calls `finish`."""
    script = turns(
        [("h1", "handoff", {"agent": "specialist"})],
        [("x1", "finish", {"output": {"resolved": True}})],
    )
    await c.start(wid, agent=AGENT, handoffs=[SPECIALIST], message=script, options=OPTIONS)


async def continue_as_new(c: Conversations, wid: str) -> None:
    """Six echo turns, continuing as new every two turns (four runs)."""
    options = OPTIONS.model_copy(update={"continue_as_new_after_turns": 2})
    await c.start(wid, agent=AGENT, message=json.dumps({"loop": 6, "size": 100}), options=options)


async def bounded_carry(c: Conversations, wid: str) -> None:
    """Six echo turns of 3 KB, continuing as new every two, carrying a 4 KB tail (four runs).

    Each run carries the newest items that fit (`durable_tools.carry`), so
    runs two to four start past item 0 (`CarriedState.base`) and record the
    `bounded-carry` patch marker before continuing as new.
    """
    options = OPTIONS.model_copy(
        update={"continue_as_new_after_turns": 2, "carry_transcript_bytes": 4000}
    )
    await c.start(wid, agent=AGENT, message=json.dumps({"loop": 6, "size": 3000}), options=options)


async def cancelled(c: Conversations, wid: str) -> None:
    """Cancelled with a tool running (`interrupted`) and one waiting (`cancelled`)."""
    script = turns(
        [("s1", "slow", {"seconds": 60}), ("r1", "refund", {"order": "o6", "amount": 2})]
    )
    await c.start(wid, agent=AGENT, message=script, options=OPTIONS)
    await approval_digest(c, wid, "r1")

    async def running() -> bool:
        return (await c.status(wid)).running_tools == 1

    await until(running, "the slow tool to run")
    await asyncio.sleep(0.3)  # let the activity start on the worker
    await c.cancel(wid)


async def model_failed_retry(c: Conversations, wid: str) -> None:
    """A model turn fails (non-retryable): state `model_failed` until the `retry` signal."""
    agent = AGENT.model_copy(update={"model": "fails-once"})
    await c.start(wid, agent=agent, message="hello", options=OPTIONS)

    async def failed() -> bool:
        return (await c.status(wid)).state == "model_failed"

    await until(failed, "the model failure")
    await c.retry(wid, requested_by="ops")


async def start_and_wait(c: Conversations, wid: str) -> None:
    """Update-with-start: `await_turn` answers with the first pending approval, then approved."""
    script = turns([("r1", "refund", {"order": "o9", "amount": 3})])
    outcome = await c.start_and_wait(wid, agent=AGENT, message=script, options=OPTIONS)
    (approval,) = outcome.pending.approvals
    await c.approve(wid, "r1", arguments_hash=approval.arguments_hash, decided_by="ana")


async def events_followed(c: Conversations, wid: str) -> None:
    """A follower reads the event stream (poll updates) while a tool's attempts fail
    (published by the activity as signals) and the conversation continues as new."""
    options = OPTIONS.model_copy(update={"continue_as_new_after_turns": 1})
    script = turns([("w1", "get_weather", {"city": "Oslo"}), ("f1", "flaky", {})], [])
    await c.start(wid, agent=AGENT, message=script, options=options)
    seen: list[str] = []

    async def follow() -> None:
        async for event in c.events(wid):
            seen.append(event.kind)

    reader = asyncio.create_task(follow())
    await until(lambda: holds(seen.count("turn_finished") >= 2), "two turns in the stream")
    await asyncio.wait_for(reader, 30)  # ends with the conversation (idle timeout)
    assert "tool_attempt_failed" in seen and seen[-1] == "conversation_finished", seen


async def context_summarized(c: Conversations, wid: str) -> None:
    """An agent's context policy summarizes older turns (a `ContextSummary` in the transcript)."""
    policy = ContextPolicy(budget_tokens=600, strategies=(Summarize(keep_last_turns=1),))
    agent = AGENT.model_copy(update={"context": policy})
    long = "x" * 1200
    await c.start(wid, agent=agent, message=f"first {long}", options=OPTIONS)
    script = turns([("w1", "get_weather", {"city": "Oslo"})])
    for sent, message in enumerate([f"second {long}", script, "fourth"], start=1):

        async def answered(n: int = sent) -> bool:
            replies = [
                i for i in await c.history(wid) if isinstance(i, AssistantMessage) and i.text
            ]
            return len(replies) >= n

        await until(answered, f"reply {sent}")
        await c.send(wid, message)


async def activity_events(c: Conversations, wid: str) -> None:
    """Activities publish to the stream (signals): a long call's start and progress,
    a flaky call's failures and retries' starts, the model's streamed text deltas."""
    agent = AGENT.model_copy(update={"model": "streamed-directed"})
    script = turns([("s1", "slow_heartbeat", {"seconds": 1.6}), ("f1", "flaky", {})])
    await c.start(wid, agent=agent, message=script, options=OPTIONS)
    seen: list[str] = []

    async def follow() -> None:
        async for event in c.events(wid):
            seen.append(event.kind)

    await asyncio.wait_for(follow(), 60)  # ends with the conversation (idle timeout)
    for kind in ("tool_attempt_started", "tool_progress", "tool_attempt_failed"):
        assert kind in seen, seen
    assert "model_text_delta" in seen and seen[-1] == "conversation_finished", seen


async def who_said_it(c: Conversations, wid: str) -> None:
    """Issue 23, item 2: an answer, a resume, an operator's note, a retry and a cancel, named.

    Records the `sender-events` patch (`model_retry_requested`,
    `conversation_resumed`) and a cancel request whose reason names who
    cancelled.
    """
    agent = AGENT.model_copy(update={"model": "fails-once"})
    await c.start(wid, agent=agent, message="hello", options=OPTIONS)

    async def failed() -> bool:
        return (await c.status(wid)).state == "model_failed"

    await until(failed, "the model failure")
    await c.retry(wid, requested_by="ana")

    def answered(turns: int) -> Callable[[], Awaitable[bool]]:
        async def check() -> bool:
            status = await c.status(wid)
            return status.state == "idle" and status.turns >= turns

        return check

    await until(answered(1), "the retried turn")
    await c.send(wid, "please hold", sent_by="ana", operator=True)
    await until(answered(2), "the note's turn")
    await c.send(wid, "thanks", sent_by="customer-7")
    await until(answered(3), "the user's turn")
    await c.cancel(wid, cancelled_by="erin")


async def local_tools(c: Conversations, wid: str) -> None:
    """Issue 26, item 5: tools declared `local=True` run as local activities (markers).

    One turn: a local call, one retried twice, one that spends its retries,
    one that times out, one that needs approval, beside an ordinary activity.
    """
    script = turns(
        [
            ("l1", "lookup_local", {"city": "Oslo"}),
            ("t1", "twice_failing_local", {}),
            ("f1", "failing_local", {}),
            ("s1", "stuck_local", {"seconds": 30}),
            ("a1", "approved_local", {"order": "o-7"}),
            ("w1", "get_weather", {"city": "Oslo"}),
        ]
    )
    await c.start(wid, agent=LOCAL_AGENT, message=script, options=OPTIONS)
    digest = await approval_digest(c, wid, "a1")
    await c.approve(wid, "a1", arguments_hash=digest, decided_by="ana")


DESK_AGENT = AgentConfig(name="desk", model="metered", toolkit="desk")
RESEARCHER = AgentConfig(name="researcher", model="metered", toolkit="tests")


async def _child_approval(c: Conversations, child: str, call_id: str) -> str:
    """The digest of `call_id`'s approval in the sub-agent's conversation, once it exists."""

    async def started() -> bool:
        try:
            return (await c.status(child)).turns >= 1
        except RPCError:  # not started yet
            return False

    await until(started, f"the sub-agent {child}")
    return await approval_digest(c, child, call_id)


async def sub_agents(c: Conversations, wid: str) -> None:
    """Issue 28, item 6: agents as tools. The budget (500 tokens) stops the researcher's
    call before its child starts; `raise_budget` starts it; a refund in the child is
    approved by the child's id; its output answers the call; a hostile call beside it
    is an `input_validation_error`."""
    child_script = turns(
        [("f1", "refund", {"order": "o1", "amount": 5})], [("w1", "get_weather", {"city": "Oslo"})]
    )
    script = turns(
        [("r1", "researcher", {"message": child_script}), ("r2", "researcher", {"msg": 1})]
    )
    options = OPTIONS.model_copy(update={"budget": Budget(max_tokens=500)})
    await c.start(wid, agent=DESK_AGENT, handoffs=[RESEARCHER], message=script, options=options)

    async def stopped() -> bool:
        return (await c.status(wid)).state == "budget_exceeded"

    await until(stopped, "budget_exceeded before the sub-agent")
    await c.raise_budget(wid, max_tokens=100_000, requested_by="ops")
    child = sub_agent_workflow_id(wid, 1, "r1")
    digest = await _child_approval(c, child, "f1")
    await c.approve(child, "f1", arguments_hash=digest, decided_by="ana")


async def sub_agent_cancelled(c: Conversations, wid: str) -> None:
    """Agents as tools: the parent is cancelled while its sub-agent waits for an approval;
    the child is cancelled with it and the call's one output is `interrupted`."""
    child_script = turns([("f1", "refund", {"order": "o1", "amount": 5})])
    script = turns([("r1", "researcher", {"message": child_script})])
    await c.start(wid, agent=DESK_AGENT, handoffs=[RESEARCHER], message=script, options=OPTIONS)
    await _child_approval(c, sub_agent_workflow_id(wid, 1, "r1"), "f1")
    await c.cancel(wid, cancelled_by="erin")


SCENARIOS: dict[str, Scenario] = {
    f.__name__: f
    for f in (
        approval_approved,
        approval_denied,
        approval_expired,
        early_decision,
        signed_decisions,
        failures,
        interaction_answered,
        answer_with_format,
        undecodable_inputs,
        sleep,
        pause_resume,
        superseded,
        handoff_finish,
        continue_as_new,
        bounded_carry,
        cancelled,
        model_failed_retry,
        budget_raised,
        start_and_wait,
        events_followed,
        context_summarized,
        activity_events,
        who_said_it,
        local_tools,
        policy_quorum,
        policy_live_change,
        policy_by_version,
        grants_escalation,
        sub_agents,
        sub_agent_cancelled,
    )
}


async def _record(client: Client, c: Conversations, name: str, scenario: Scenario) -> list[Path]:
    await scenario(c, name)
    handle = client.get_workflow_handle(name)
    try:
        await handle.result()
    except WorkflowFailureError:
        pass  # the cancelled scenario ends cancelled
    transcript = await c.history(name)
    if not is_reconciled(transcript):
        raise AssertionError(f"{name}: the final transcript is not reconciled")
    outputs = [
        f"{o.call_id}={o.failure_kind or 'ok'}" for o in transcript if isinstance(o, ToolCallOutput)
    ]
    summaries = sum(1 for i in transcript if isinstance(i, ContextSummary))
    print(
        f"{name}: {len(transcript)} items; outputs: {', '.join(outputs) or '-'}; "
        f"summaries: {summaries}"
    )
    histories: list[Any] = []
    run_id: str | None = await _first_run_id(client, name)
    while run_id:
        history = await client.get_workflow_handle(name, run_id=run_id).fetch_history()
        histories.append(history)
        last = history.events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    written: list[Path] = []
    for k, history in enumerate(histories, start=1):
        stem = name if len(histories) == 1 else f"{name}.run{k}"
        path = HISTORIES / f"{stem}.json"
        path.write_text(history.to_json() + "\n")
        written.append(path)
    return written


async def _first_run_id(client: Client, workflow_id: str) -> str:
    """The run id of the first run of the continue-as-new chain ending at the latest run."""
    run_id = (await client.get_workflow_handle(workflow_id).describe()).run_id
    assert run_id is not None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        started = history.events[0].workflow_execution_started_event_attributes
        if not started.continued_execution_run_id:
            return run_id
        run_id = started.continued_execution_run_id


async def main(names: list[str]) -> None:
    """Run the named scenarios (all by default) and write their histories."""
    unknown = set(names) - set(SCENARIOS)
    if unknown:
        raise SystemExit(f"unknown scenarios: {sorted(unknown)}; known: {sorted(SCENARIOS)}")
    HISTORIES.mkdir(exist_ok=True)
    plugin = DurableToolsPlugin(
        toolkits=TOOLKITS,
        models=MODELS,
        decision_keys={"k1": DECISION_KEY},
        policies={"tests": RECORDED_POLICY},
        prices=BUDGET_PRICES,
    )
    async with DevServer(headless=True) as server:
        client = await Client.connect(server.address, plugins=[plugin])
        task_queue = f"record-histories-{uuid.uuid4()}"
        conversations = Conversations(client, task_queue=task_queue)
        async with Worker(client, task_queue=task_queue):
            selected = {n: s for n, s in SCENARIOS.items() if not names or n in names}
            for path in await asyncio.gather(
                *(_record(client, conversations, n, s) for n, s in selected.items())
            ):
                for p in path:
                    print(f"wrote {p.relative_to(ROOT)} ({p.stat().st_size:,} bytes)")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
