"""A storage outage makes a conversation wait; it never loses a message or diverges on replay.

On the dev server, the worker reads external storage through `FlakyDriver`
(a `LocalFileStorageDriver` whose reads fail on demand, as S3 answering 503
would) and the client through a plain driver on the same directory. A 300 KB
`send` arrives while the worker's next two reads fail: the workflow task
fails and is retried, and the message is answered once storage answers
(DESIGN.md, invariant 10). The histories recorded with storage down and with
storage up replay with storage up and with storage down: the same commands,
and while storage is down the replay fails (a retried task), never with a
nondeterminism error.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV, MODELS, TOOLKITS
from storage_support import KEYS, FlakyDriver
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError
from workflow_helpers import Harness, assistant_texts, eventually, running

from durable_tools.client import Conversations
from durable_tools.codec import data_converter
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.models.base import ModelRequest
from durable_tools.storage import LocalFileStorageDriver, PayloadStorage
from durable_tools.testing import ScriptedModel
from durable_tools.transcript import AssistantMessage, UserMessage
from durable_tools.worker.plugin import DurableToolsPlugin

BIG = 300_000  # characters: over the 256 KiB threshold, so the client stores it
AGENT = AgentConfig(name="main", model="digest", toolkit="tests")


def fingerprint(text: str) -> str:
    return f"{len(text)}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def digest_model(request: ModelRequest) -> AssistantMessage:
    """Answers with the length and sha256 prefix of each user message since its last answer."""
    new: list[str] = []
    for item in reversed(request.transcript):
        if isinstance(item, AssistantMessage):
            break
        if isinstance(item, UserMessage):
            new.insert(0, item.text)
    return AssistantMessage(text="got " + " ".join(fingerprint(t) for t in new))


@dataclass
class Recorded:
    history: WorkflowHistory
    texts: list[str]
    failed_reads: int
    task_failures: list[str]
    rejected: int


def storage_with(
    driver: LocalFileStorageDriver | FlakyDriver, keys: dict[str, bytes]
) -> PayloadStorage:
    return PayloadStorage(driver=driver, keys=keys)


@asynccontextmanager
async def worker_with_flaky_storage(
    env: WorkflowEnvironment,
    tmp_path: Path,
    keys: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[tuple[Harness, FlakyDriver, Conversations]]:
    """A worker reading storage through a `FlakyDriver`, and a client with a plain driver."""
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledger.jsonl"))
    root = tmp_path / "payloads"
    flaky = FlakyDriver(root)
    task_queue = f"outage-{uuid.uuid4()}"
    async with running(
        env,
        task_queue,
        tmp_path / "ledger.jsonl",
        models={"digest": ScriptedModel(digest_model)},
        storage=storage_with(flaky, keys),
    ) as harness:
        client = Client(
            **{
                **env.client.config(),
                "data_converter": data_converter(
                    storage=storage_with(LocalFileStorageDriver(root), keys)
                ),
            }
        )
        yield harness, flaky, Conversations(client, task_queue=task_queue)


async def converse(
    harness: Harness, flaky: FlakyDriver, conversations: Conversations, *, failures: int
) -> Recorded:
    """hello; a 300 KB message while the worker's next `failures` reads fail; then after."""
    big = "b" * BIG
    wf = f"outage-{uuid.uuid4().hex[:12]}"
    harness.started.append(wf)
    await conversations.start(
        wf, agent=AGENT, message="hello", options=ConversationOptions(idle_timeout=600)
    )

    async def answered(text: str) -> list[str] | None:
        texts = assistant_texts(await conversations.history(wf))
        return texts if any(fingerprint(text) in t for t in texts) else None

    await eventually(lambda: answered("hello"), what="the answer to hello")
    flaky.fail_next(failures)
    await conversations.send(wf, big, sent_by="ana")

    async def settled() -> bool:
        # Answered, or (what 1988051 did) recorded as rejected: either way the
        # next message gets a model turn of its own, so histories compare.
        if (await conversations.pending(wf)).rejected:
            return True
        return flaky.failed >= failures and bool(await answered(big))

    await eventually(settled, what="the 300 KB message answered or rejected", timeout=60)
    await conversations.send(wf, "after", sent_by="ana")
    texts = await eventually(lambda: answered("after"), what="the answer to after", timeout=60)
    handle = conversations.client.get_workflow_handle(wf)
    history = await handle.fetch_history()
    task_failures = [
        e.workflow_task_failed_event_attributes.failure.message
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    rejected = len((await conversations.pending(wf)).rejected)
    return Recorded(
        history=history,
        texts=[*texts, fingerprint(big)],
        failed_reads=flaky.failed,
        task_failures=task_failures,
        rejected=rejected,
    )


@pytest.mark.parametrize("keys", [KEYS, {}], ids=["with keys", "without keys"])
async def test_a_300_kb_message_sent_while_storage_fails_twice_is_answered(
    dev_env: WorkflowEnvironment,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    keys: dict[str, bytes],
) -> None:
    async with worker_with_flaky_storage(dev_env, tmp_path, keys, monkeypatch) as (h, flaky, c):
        recorded = await converse(h, flaky, c, failures=2)
    *texts, big = recorded.texts
    assert recorded.rejected == 0
    assert recorded.failed_reads == 2
    assert any(big in t for t in texts), texts  # the model read the whole message
    # The first failed attempt is recorded (later attempts of a failing task are not).
    assert recorded.task_failures, "the outage should have failed a workflow task"
    assert all("fetching an external payload failed" in m for m in recorded.task_failures)


def replayer(storage: PayloadStorage) -> Replayer:
    """The replayer a worker (or `check-upgrade`) builds with the plugin and this storage."""
    plugin = DurableToolsPlugin(toolkits=TOOLKITS, models=MODELS, storage=storage)
    return Replayer(workflows=[], plugins=[plugin])


def activity_types(history: WorkflowHistory) -> list[str]:
    return [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]


async def test_histories_replay_the_same_with_storage_up_or_down(
    dev_env: WorkflowEnvironment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with worker_with_flaky_storage(dev_env, tmp_path, KEYS, monkeypatch) as (h, flaky, c):
        down = await converse(h, flaky, c, failures=2)  # recorded with storage failing
        up = await converse(h, flaky, c, failures=0)  # recorded with storage working
    # Same commands and the same answers, whether storage failed or not.
    assert activity_types(down.history) == activity_types(up.history)
    assert [t.split()[1:] for t in down.texts[:-1]] == [t.split()[1:] for t in up.texts[:-1]]

    root = tmp_path / "payloads"
    working = replayer(PayloadStorage(driver=LocalFileStorageDriver(root), keys=KEYS))
    for recorded in (down, up):
        result = await working.replay_workflow(recorded.history, raise_on_replay_failure=False)
        assert result.replay_failure is None, result.replay_failure

    # Storage down while replaying: the replay fails like a workflow task that
    # will be retried, and replays cleanly once storage answers again.
    flaky_replay = FlakyDriver(root)
    failing = replayer(PayloadStorage(driver=flaky_replay, keys=KEYS))
    for recorded in (down, up):
        flaky_replay.fail_next(2)
        outcomes: list[Exception | None] = []
        for _ in range(3):
            result = await failing.replay_workflow(recorded.history, raise_on_replay_failure=False)
            outcomes.append(result.replay_failure)
        assert not any(isinstance(o, NondeterminismError) for o in outcomes), outcomes
        assert outcomes[-1] is None, outcomes
        assert any(o is not None and "503" in str(o) for o in outcomes), outcomes
