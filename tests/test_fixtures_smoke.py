"""The shared fixtures work: each server runs a workflow; search attributes upsert."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from pydantic import BaseModel
from temporalio import activity, workflow
from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributeKey
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker
from workflow_helpers import WAIT_SECONDS

# The attributes conftest registers (not imported: with several rootless
# conftest.py files, the module named `conftest` is whichever loaded last).
PENDING_COUNT = SearchAttributeKey.for_int("DurableToolsPendingCount")
PENDING_KINDS = SearchAttributeKey.for_keyword_list("DurableToolsPendingKinds")


class Greeting(BaseModel):
    name: str


class Reply(BaseModel):
    text: str
    waited: timedelta


@activity.defn
async def greet(greeting: Greeting) -> str:
    return f"hello {greeting.name}"


@workflow.defn
class GreetWorkflow:
    """Runs one activity, then waits `wait` (durable timer) and replies."""

    @workflow.run
    async def run(self, greeting: Greeting, wait: timedelta) -> Reply:
        text = await workflow.execute_activity(
            greet, greeting, start_to_close_timeout=timedelta(seconds=10)
        )
        start = workflow.now()
        await workflow.sleep(wait)
        return Reply(text=text, waited=workflow.now() - start)


@workflow.defn
class UpsertWorkflow:
    """Upserts durable-tools' search attributes, then waits for a signal."""

    def __init__(self) -> None:
        self._done = False

    @workflow.signal
    def finish(self) -> None:
        self._done = True

    @workflow.run
    async def run(self) -> None:
        workflow.upsert_search_attributes(
            [PENDING_COUNT.value_set(2), PENDING_KINDS.value_set(["approval", "interaction"])]
        )
        await workflow.wait_condition(lambda: self._done)


async def _run_greet(env: WorkflowEnvironment, task_queue: str, wait: timedelta) -> Reply:
    async with Worker(
        env.client, task_queue=task_queue, workflows=[GreetWorkflow], activities=[greet]
    ):
        async with asyncio.timeout(WAIT_SECONDS):
            return await env.client.execute_workflow(
                GreetWorkflow.run,
                args=[Greeting(name="Ada"), wait],
                id=f"greet-{uuid.uuid4()}",
                task_queue=task_queue,
            )


async def _upserted(env: WorkflowEnvironment, task_queue: str) -> tuple[object, object]:
    async with Worker(env.client, task_queue=task_queue, workflows=[UpsertWorkflow]):
        handle: WorkflowHandle[UpsertWorkflow, None] = await env.client.start_workflow(
            UpsertWorkflow.run, id=f"upsert-{uuid.uuid4()}", task_queue=task_queue
        )
        async with asyncio.timeout(WAIT_SECONDS):
            # The upsert is visible once the first workflow task completes.
            while not (await handle.describe()).typed_search_attributes.get(PENDING_KINDS):
                await asyncio.sleep(0.05)
            attributes = (await handle.describe()).typed_search_attributes
            await handle.signal(UpsertWorkflow.finish)
            await handle.result()
    return attributes.get(PENDING_COUNT), attributes.get(PENDING_KINDS)


async def test_dev_env_runs_a_workflow_with_pydantic_models(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    reply = await _run_greet(dev_env, task_queue, timedelta(milliseconds=10))
    assert reply.text == "hello Ada"
    assert not dev_env.supports_time_skipping


async def test_dev_env_upserts_search_attributes(
    dev_env: WorkflowEnvironment, task_queue: str
) -> None:
    assert await _upserted(dev_env, task_queue) == (2, ["approval", "interaction"])


async def test_time_env_skips_days(time_env: WorkflowEnvironment, task_queue: str) -> None:
    reply = await _run_greet(time_env, task_queue, timedelta(days=3))
    assert reply.text == "hello Ada"
    assert reply.waited >= timedelta(days=3)


async def test_time_env_upserts_search_attributes(
    time_env: WorkflowEnvironment, task_queue: str
) -> None:
    assert await _upserted(time_env, task_queue) == (2, ["approval", "interaction"])


_seen_task_queues: list[str] = []


async def test_task_queue_is_fresh_per_test_first(task_queue: str) -> None:
    _seen_task_queues.append(task_queue)
    assert task_queue not in _seen_task_queues[:-1]


async def test_task_queue_is_fresh_per_test_second(task_queue: str) -> None:
    _seen_task_queues.append(task_queue)
    assert task_queue not in _seen_task_queues[:-1]
