"""Random schedules against scripted conversations (issue 22, acceptance).

Hypothesis draws a conversation (its scripted tool turns, mixing a read-only
tool, an approval-gated refund, a question, a sleep and a pause; its
continue-as-new trigger) and a schedule of what people, operators and the
platform do to it: messages (some large enough to be stored externally),
decisions and answers (as signals or as updates), resumes, waits for the next
turn, worker restarts, new worker versions and storage faults. The workers
are versioned (Worker Deployments): a new version becomes current and the
waiting conversation moves to it. After the schedule the conversation is
driven until it settles idle with nothing pending, then:

- every tool call has exactly one output, across every run (invariant 1);
- no workflow task failed except for an injected storage fault, and none was
  retried more times in a row than faults were injected (invariant 10);
- every update (`start_and_wait`, `wait_turn`, `decide`/`answer` with
  `wait=True`) returned, or failed with a clear error, within its bound;
- every run's history replays with storage up, and with storage down it
  fails as a retried workflow task would, never with a nondeterminism error.

`make test` runs a few examples (`DT_SCHEDULE_EXAMPLES`, default 3);
`make bench-schedules` runs more.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from agent_support import AGENT, MODELS, TOOLKITS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from storage_support import KEYS, FlakyDriver
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause
from temporalio.client import (
    Client,
    WorkflowHistory,
    WorkflowQueryFailedError,
    WorkflowUpdateFailedError,
)
from temporalio.common import WorkerDeploymentVersion
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer, Worker
from temporalio.workflow import NondeterminismError
from workflow_helpers import outputs_by_id, set_current_version

from durable_tools.client import Conversations
from durable_tools.codec import data_converter
from durable_tools.conversation import ConversationOptions, PendingState
from durable_tools.errors import DecisionRejected
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage
from durable_tools.transcript import AssistantMessage, is_reconciled
from durable_tools.worker.plugin import DurableToolsPlugin
from durable_tools.worker.runner import deployment_config

EXAMPLES = int(os.environ.get("DT_SCHEDULE_EXAMPLES", "3"))

THRESHOLD = 4096
"""Bytes: payloads this large are stored externally (a "big" message is 6,000 characters)."""

BIG = 6000

UPDATE_BOUND = 90.0
"""Seconds an update may take: the longest turn here (a 1 s sleep, a few activities,
and a workflow task retried after two injected storage faults, Temporal's retry
backoff included) is well under it; past it the update is stuck, which is the bug."""

CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "weather": ("get_weather", {"city": "Oslo"}),
    "refund": ("refund", {"order": "A-1", "amount": 5}),
    "ask": ("ask", {"question": "ok?"}),
    "sleep": ("sleep", {"seconds": 1}),
    "pause": ("pause", {"reason": "waiting"}),
}

TURN = st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=3)
SCRIPT = st.lists(TURN, min_size=0, max_size=2)
ACTION = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(["plain", "big", "tools"]), SCRIPT),
    st.tuples(st.just("decide"), st.booleans(), st.booleans()),  # approve?, as an update?
    st.tuples(st.just("answer"), st.booleans()),  # as an update?
    st.tuples(st.just("resume")),
    st.tuples(st.just("wait")),
    st.tuples(st.just("restart")),
    st.tuples(st.just("upgrade")),
    st.tuples(st.just("fault"), st.integers(min_value=1, max_value=2)),
)
SCHEDULE = st.lists(ACTION, min_size=1, max_size=6)
CONTINUE_EVERY = st.sampled_from([None, 1, 2])

T = TypeVar("T")


def _message(script: list[list[str]], prefix: str) -> str:
    """The directed model's instructions: turn k makes the calls of `script[k]`."""
    turns = [
        [[f"{prefix}-{k}-{n}", *CALLS[kind]] for n, kind in enumerate(turn)]
        for k, turn in enumerate(script)
    ]
    return json.dumps({"turns": turns}) if turns else "hello"


@dataclass
class World:
    """The versioned workers of one schedule, its storage and its clients."""

    env: WorkflowEnvironment
    root: Path
    task_queue: str = field(default_factory=lambda: f"schedules-{uuid.uuid4()}")
    deployment: str = field(default_factory=lambda: f"schedules-{uuid.uuid4().hex[:8]}")
    flaky: FlakyDriver = field(init=False)
    conversations: Conversations = field(init=False)
    workers: dict[str, tuple[Worker, asyncio.Task[None]]] = field(default_factory=dict)
    version: int = 0
    faults: int = 0  # the most reads a single injection made fail

    def __post_init__(self) -> None:
        self.flaky = FlakyDriver(self.root)
        client = Client(
            **{
                **self.env.client.config(),
                "data_converter": data_converter(
                    storage=self._storage(LocalFileStorageDriver(self.root))
                ),
            }
        )
        self.conversations = Conversations(client, task_queue=self.task_queue)

    def _storage(self, driver: LocalFileStorageDriver | FlakyDriver) -> PayloadStorage:
        return PayloadStorage(driver=driver, threshold=THRESHOLD, keys=KEYS)

    def plugin(self, driver: LocalFileStorageDriver | FlakyDriver) -> DurableToolsPlugin:
        return DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS, storage=self._storage(driver))

    async def start_worker(self, build_id: str) -> None:
        client = Client(**{**self.env.client.config(), "plugins": [self.plugin(self.flaky)]})
        version = WorkerDeploymentVersion(deployment_name=self.deployment, build_id=build_id)
        worker = Worker(
            client, task_queue=self.task_queue, deployment_config=deployment_config(version)
        )
        self.workers[build_id] = (worker, asyncio.create_task(worker.run()))

    async def stop_worker(self, build_id: str) -> None:
        worker, task = self.workers.pop(build_id)
        await worker.shutdown()
        await task

    async def upgrade(self) -> None:
        """A new version's worker starts and becomes current; older ones keep draining."""
        self.version += 1
        build_id = f"v{self.version}"
        await self.start_worker(build_id)
        await set_current_version(self.env, self.deployment, build_id)

    async def restart(self) -> None:
        build_id = f"v{self.version}"
        await self.stop_worker(build_id)
        await self.start_worker(build_id)

    async def close(self) -> None:
        for build_id in list(self.workers):
            await self.stop_worker(build_id)


@contextlib.asynccontextmanager
async def world(env: WorkflowEnvironment, root: Path) -> AsyncIterator[World]:
    w = World(env=env, root=root)
    try:
        await w.upgrade()  # v1
        yield w
    finally:
        w.flaky.fail_next(0)
        await w.close()


async def _bounded(what: str, call: Awaitable[T]) -> T:
    """An update's answer within `UPDATE_BOUND`, or the test fails saying which update hung."""
    try:
        return await asyncio.wait_for(call, UPDATE_BOUND)
    except TimeoutError:
        raise AssertionError(
            f"{what} neither returned nor failed within {UPDATE_BOUND:g} s"
        ) from None


async def _pending(conversations: Conversations, workflow_id: str) -> PendingState:
    """The `pending` query, retried while a worker cannot answer yet.

    A worker that must replay the run to answer (after a restart) fetches its
    stored payloads: during an injected storage fault the query fails with
    the fetch's error, and answers once storage does.
    """
    for attempt in range(60):
        try:
            return await conversations.pending(workflow_id)
        except WorkflowQueryFailedError as exc:
            if "fetching an external payload failed" not in str(exc):
                raise
        except RPCError:
            pass  # no worker polling yet (a restart)
        await asyncio.sleep(min(0.1 * 2**attempt, 1.0))
    raise AssertionError(f"the pending query of {workflow_id} never answered")


async def _decide_all(w: World, wf: str, approve: bool, as_update: bool) -> None:
    for approval in (await _pending(w.conversations, wf)).approvals:
        send: Callable[[], Awaitable[Any]] = lambda a=approval: w.conversations.decide(  # noqa: E731
            wf,
            a.call_id,
            approved=approve,
            arguments_hash=a.arguments_hash,
            decided_by="schedule",
            wait=as_update,
        )
        await _clear_errors(f"decide {approval.call_id}", send())


async def _answer_all(w: World, wf: str, as_update: bool) -> None:
    for question in (await _pending(w.conversations, wf)).interactions:
        await _clear_errors(
            f"answer {question.call_id}",
            w.conversations.answer(
                wf,
                question.call_id,
                "yes",
                arguments_hash=question.arguments_hash,
                answered_by="schedule",
                wait=as_update,
            ),
        )


async def _clear_errors(what: str, call: Awaitable[Any]) -> None:
    """Run a decision or answer: it is accepted or refused with a clear reason, in time.

    Refused is fine (the call was superseded, or already decided, between the
    `pending` query and the update); a hang or an unexplained failure is not.
    """
    try:
        await _bounded(what, call)
    except DecisionRejected as exc:
        assert str(exc), f"{what} was refused without a reason"
    except WorkflowUpdateFailedError as exc:
        raise AssertionError(f"{what} failed without a DecisionRejected: {exc.cause!r}") from exc


async def _act(w: World, wf: str, action: tuple[Any, ...], sends: int) -> None:
    kind = action[0]
    if kind == "send":
        text = {"plain": f"hello {sends}", "big": "b" * BIG}.get(
            action[1], _message(action[2], f"m{sends}")
        )
        await w.conversations.send(wf, text, sent_by="schedule")
    elif kind == "decide":
        await _decide_all(w, wf, approve=action[1], as_update=action[2])
    elif kind == "answer":
        await _answer_all(w, wf, as_update=action[1])
    elif kind == "resume":
        await w.conversations.resume(wf, "go on", resumed_by="schedule")
    elif kind == "wait":
        await _bounded("wait_turn", w.conversations.wait_turn(wf))
    elif kind == "restart":
        await w.restart()
    elif kind == "upgrade":
        await w.upgrade()
    elif kind == "fault":
        w.faults = max(w.faults, action[1])
        w.flaky.fail_next(action[1])


async def _settle(w: World, wf: str) -> None:
    """Approve, answer and resume whatever waits until it is idle with nothing pending."""
    for _ in range(40):
        outcome = await _bounded("wait_turn", w.conversations.wait_turn(wf))
        pending = outcome.pending
        if outcome.state == "idle" and not (
            pending.approvals or pending.interactions or pending.paused
        ):
            return
        await _decide_all(w, wf, approve=True, as_update=False)
        await _answer_all(w, wf, as_update=False)
        if pending.paused:
            await w.conversations.resume(wf, "go on", resumed_by="schedule")
        await asyncio.sleep(0.05)
    raise AssertionError(f"{wf} did not settle idle within 40 rounds")


async def _runs(client: Client, workflow_id: str) -> list[WorkflowHistory]:
    runs: list[WorkflowHistory] = []
    async for execution in client.list_workflows(f"WorkflowId = '{workflow_id}'"):
        handle = client.get_workflow_handle(workflow_id, run_id=execution.run_id)
        runs.append(await handle.fetch_history())
    return runs


def _check_task_failures(histories: list[WorkflowHistory], faults: int) -> None:
    """No workflow task failed but for a storage fault or the server's retry, never in a row.

    The server's: a signal that arrives while a task continues the run as new
    makes Temporal refuse that completion (`UNHANDLED_COMMAND`) and hand the
    task out again with the signal in it. Storage faults fail a task as many
    times in a row as reads were made to fail.
    """
    unhandled = WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_UNHANDLED_COMMAND
    for history in histories:
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED:
                attributes = event.workflow_task_failed_event_attributes
                if attributes.cause == unhandled:
                    continue
                message = attributes.failure.message
                assert "fetching an external payload failed" in message, message
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                attempt = event.workflow_task_scheduled_event_attributes.attempt
                # Temporal records a failing task once; its later attempts show here.
                assert attempt <= 1 + max(faults, 1), (attempt, faults)


async def _check_replays(w: World, histories: list[WorkflowHistory]) -> None:
    working = Replayer(workflows=[], plugins=[w.plugin(LocalFileStorageDriver(w.root))])
    down = FlakyDriver(w.root)
    failing = Replayer(workflows=[], plugins=[w.plugin(down)])
    for history in histories:
        result = await working.replay_workflow(history, raise_on_replay_failure=False)
        assert result.replay_failure is None, result.replay_failure
        down.fail_next(1_000_000)
        result = await failing.replay_workflow(history, raise_on_replay_failure=False)
        assert not isinstance(result.replay_failure, NondeterminismError), result.replay_failure


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(script=SCRIPT, every=CONTINUE_EVERY, schedule=SCHEDULE)
async def test_random_schedules_keep_every_invariant(
    dev_env: WorkflowEnvironment,
    tmp_path_factory: Any,
    script: list[list[str]],
    every: int | None,
    schedule: list[tuple[Any, ...]],
) -> None:
    root: Path = tmp_path_factory.mktemp("payloads")
    async with world(dev_env, root) as w:
        wf = f"schedule-{uuid.uuid4().hex[:12]}"
        options = ConversationOptions(
            idle_timeout=600, continue_as_new_after_turns=every, version_check_interval=1
        )
        try:
            await _bounded(
                "start_and_wait",
                w.conversations.start_and_wait(
                    wf, agent=AGENT, message=_message(script, "s"), options=options
                ),
            )
            for sends, action in enumerate(schedule):
                await _act(w, wf, action, sends)
            await _settle(w, wf)
            w.flaky.fail_next(0)
            items = await w.conversations.history(wf)
            histories = await _runs(w.conversations.client, wf)
        finally:
            with contextlib.suppress(RPCError):
                await w.conversations.client.get_workflow_handle(wf).terminate("schedule over")

    assert is_reconciled(items)
    outputs = outputs_by_id(items)  # asserts one output per call id
    calls = {c.call_id for i in items if isinstance(i, AssistantMessage) for c in i.tool_calls}
    assert calls == set(outputs)
    _check_task_failures(histories, w.faults)
    await _check_replays(w, histories)
