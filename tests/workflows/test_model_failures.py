"""Model failures never end a conversation and never retry forever (dev server).

A model adapter registered on the worker raises the errors the provider
adapters map (`durable_tools.models.errors`): a non-retryable one, a
retryable one that never stops, one whose provider message is megabytes
long. Each time the conversation waits in state `model_failed` with a
one-line message, visible in `status`, `pending`, the pending-kinds search
attribute, the current details and `durable-tools run`'s follower; `retry`
or a new message runs the turn again once the cause is fixed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.converter import DataConverter
from temporalio.exceptions import CancelledError
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, assistant_texts, eventually, running

from durable_tools.conversation import AgentConfig, ConversationOptions, ModelFailure, ModelRetry
from durable_tools.errors import RetryRejected
from durable_tools.models.base import ModelRequest
from durable_tools.models.errors import ProviderContext, status_error
from durable_tools.testing import last_user_text
from durable_tools.transcript import AssistantMessage, UserMessage
from durable_tools.worker.follow import Commands, Follower
from durable_tools.workflows.visibility import PENDING_COUNT, PENDING_KINDS

PROVIDER = ProviderContext(
    provider="OpenAI",
    api="Chat Completions",
    model="gpt-test",
    base_url="http://127.0.0.1:9/v1",
    key_env="OPENAI_API_KEY",
)

FAST_RETRY = ModelRetry(max_attempts=3, initial_interval=0.1, maximum_interval=0.2)


def http_error(status: int, message: str) -> BaseException:
    """What the OpenAI adapter raises for an HTTP error answer (cause chain included)."""
    sdk_error = RuntimeError(f"Error code: {status} - {{'error': {{'message': {message!r}}}}}")
    try:
        raise sdk_error
    except RuntimeError as exc:
        error = status_error(
            PROVIDER,
            status=status,
            headers={},
            body={"error": {"message": message, "code": None}},
            fallback_message=str(exc),
        )
        error.__cause__ = exc
        return error


class BrokenModel:
    """Raises `error()` while it is set; answers the last user message once fixed."""

    def __init__(self, error: Callable[[], BaseException] | None) -> None:
        self.error = error
        self.calls = 0

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.calls += 1
        if self.error is not None:
            raise self.error()
        return AssistantMessage(text=f"answered: {last_user_text(request)}")


async def _failure(h: Harness, workflow_id: str) -> ModelFailure:
    await h.wait_state(workflow_id, "model_failed")
    status = await h.conversations.status(workflow_id)
    assert status.model_failed is not None
    return status.model_failed


async def _kinds(h: Harness, workflow_id: str) -> tuple[list[str], int]:
    description = await h.client.get_workflow_handle(workflow_id).describe()
    attributes = description.typed_search_attributes
    return list(attributes.get(PENDING_KINDS) or []), attributes.get(PENDING_COUNT) or 0


async def _details(h: Harness, workflow_id: str) -> str:
    metadata = await h.client.get_workflow_handle(workflow_id).query(
        "__temporal_workflow_metadata", result_type=WorkflowMetadata
    )
    return metadata.current_details


async def test_a_non_retryable_error_waits_in_model_failed_until_retry(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = BrokenModel(lambda: http_error(401, "Incorrect API key provided: sk-wrong"))
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", models={"broken": model}) as h:
        wf = await h.start("hello", agent=AgentConfig(model="broken", toolkit="tests"))
        failure = await _failure(h, wf)

        assert failure.type == "ProviderAuthentication"
        assert "HTTP 401" in failure.message and "OPENAI_API_KEY" in failure.message
        assert (failure.retries_exhausted, failure.turn) == (False, 1)
        assert model.calls == 1  # not retried
        assert (await h.conversations.pending(wf)).model_failed == failure
        assert await _kinds(h, wf) == (["model_failed"], 1)
        details = await _details(h, wf)
        assert "model_failed" in details and "HTTP 401" in details
        assert f"durable-tools retry {wf}" in details

        model.error = None  # the operator fixed the key
        await h.conversations.retry(wf, requested_by="ops")
        await h.wait_assistant_text(wf, "answered: hello")
        await h.wait_state(wf, "idle")
        status = await h.conversations.status(wf)
        assert (status.model_failed, status.turns) == (None, 1)
        assert await _kinds(h, wf) == ([], 0)
        with pytest.raises(RetryRejected, match="not waiting after a model failure"):
            await h.conversations.retry(wf, wait=True)


async def test_retryable_errors_are_retried_a_bounded_number_of_times_then_a_message_retries(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = BrokenModel(lambda: http_error(503, "upstream overloaded"))
    agent = AgentConfig(model="broken", toolkit="tests", model_retry=FAST_RETRY)
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", models={"broken": model}) as h:
        wf = await h.start("hello", agent=agent)
        failure = await _failure(h, wf)

        assert failure.type == "ProviderUnavailable"
        assert failure.retries_exhausted
        assert failure.message.startswith("retries ran out after 3 attempts: OpenAI answered")
        assert model.calls == 3
        await asyncio.sleep(0.5)
        assert model.calls == 3  # and no more

        model.error = None
        await h.conversations.send(wf, "again")
        items = await h.wait_assistant_text(wf, "answered: again")
        assert [i.text for i in items if isinstance(i, UserMessage)] == ["hello", "again"]
        assert assistant_texts(items) == ["answered: again"]


async def test_a_provider_error_over_the_failure_size_limit_becomes_one_short_line(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """llama.cpp's server answers HTTP 500 with a long validation message."""
    long_message = "validation failed: " + "field 'messages.0.content' must be a string; " * 70_000
    assert len(long_message) > 3_000_000  # over Temporal's 2 MiB failure limit
    model = BrokenModel(lambda: http_error(500, long_message))
    retry = FAST_RETRY.model_copy(update={"max_attempts": 2})
    agent = AgentConfig(model="broken", toolkit="tests", model_retry=retry)
    lines: list[str] = []
    with caplog.at_level(logging.DEBUG):
        async with running(
            dev_env, task_queue, tmp_path / "l.jsonl", models={"broken": model}
        ) as h:
            wf = await h.start("hello", agent=agent)
            follower = Follower(
                h.conversations,
                wf,
                emit=lines.append,
                commands=Commands(address="localhost:7233", namespace="default"),
            )
            async with asyncio.timeout(30):
                followed = await follower.follow(asyncio.Event())
            failure = await _failure(h, wf)
            failed_events = [
                e
                async for e in h.client.get_workflow_handle(wf).fetch_history_events()
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED
            ]

    # Unbounded, the adapter's error and its cause (3 MB) were the recorded failure.
    assert [e.ByteSize() < 16_000 for e in failed_events] == [True]
    assert "exceeds size limit" not in failure.message
    assert failure.message.startswith("retries ran out after 2 attempts: OpenAI answered HTTP 500")
    assert len(failure.message) <= 1000 and "\n" not in failure.message
    assert model.calls == 2
    assert followed.outcome == "model_failed" and followed.failure == failure
    assert any("model turn 1 failed" in line and "HTTP 500" in line for line in lines), lines
    logged = [r for r in caplog.records if r.getMessage().startswith("model turn 1 failed")]
    # An expected failure (issue 25, item 5): one line at WARNING per attempt
    # (the activity's while a retry follows, then the workflow's), no traceback;
    shown = [r for r in logged if r.levelno >= logging.WARNING]
    assert [(r.name, _traceback(r)) for r in shown] == [
        ("temporalio.activity", ""),
        ("temporalio.workflow", ""),
    ]
    assert "(attempt 1, retried): ProviderUnavailable: OpenAI answered HTTP 500" in (
        shown[0].getMessage()
    )
    assert all(len(r.getMessage()) < 2_000 and "\n" not in r.getMessage() for r in shown)
    # ... the full text, with the adapter's error and its cause, at DEBUG.
    traced = [r for r in logged if _traceback(r)]
    assert traced and all(r.levelno == logging.DEBUG for r in traced)
    assert long_message in _traceback(traced[0])
    sdk = [r for r in caplog.records if r.getMessage().startswith("Completing activity as failed")]
    assert sdk and all(r.levelno == logging.DEBUG for r in sdk)


async def test_a_model_adapter_bug_keeps_its_traceback_in_the_log(
    dev_env: WorkflowEnvironment,
    task_queue: str,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not an expected failure: what a person debugging the adapter needs stays at WARNING."""
    model = BrokenModel(lambda: KeyError("choices"))
    retry = FAST_RETRY.model_copy(update={"max_attempts": 1})
    agent = AgentConfig(model="broken", toolkit="tests", model_retry=retry)
    with caplog.at_level(logging.WARNING):
        async with running(
            dev_env, task_queue, tmp_path / "l.jsonl", models={"broken": model}
        ) as h:
            wf = await h.start("hello", agent=agent)
            await _failure(h, wf)
    traced = [
        r.getMessage().split(" (")[0]
        for r in caplog.records
        if _traceback(r) and r.levelno >= logging.WARNING and wf in r.getMessage()
    ]
    assert traced == ["model turn 1 failed", "Completing activity as failed"]


async def test_a_toolkit_this_worker_does_not_serve_waits_and_cancel_ends_it(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    async with running(dev_env, task_queue, tmp_path / "l.jsonl") as h:
        wf = await h.start("hello", agent=AgentConfig(model="directed", toolkit="next-release"))
        failure = await _failure(h, wf)
        assert failure.type == "ConfigurationError"
        assert "no toolkit named 'next-release'" in failure.message

        await h.conversations.cancel(wf)
        with pytest.raises(WorkflowFailureError) as ended:
            async with asyncio.timeout(20):
                await h.client.get_workflow_handle(wf).result()
        assert isinstance(ended.value.cause, CancelledError)
        assert await h.execution_status(wf) == WorkflowExecutionStatus.CANCELED


async def test_options_bound_the_model_activity(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """The scheduled model activity carries the heartbeat timeout and the bounded policy."""
    async with running(dev_env, task_queue, tmp_path / "l.jsonl") as h:
        wf = await h.start("hi", options=ConversationOptions())
        await h.wait_assistant_text(wf, "echo: hi")
        scheduled = [
            e.activity_task_scheduled_event_attributes
            async for e in h.client.get_workflow_handle(wf).fetch_history_events()
            if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
        ]
    (model,) = [a for a in scheduled if a.activity_type.name == "model.turn"]
    assert model.heartbeat_timeout.ToSeconds() == 30
    assert model.schedule_to_close_timeout.ToSeconds() == 1800
    assert model.retry_policy.maximum_attempts == 10


async def test_retry_takes_any_input_and_runs_the_turn_again_each_time(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """A `retry` signal with no input, two inputs or bytes retries; no workflow task fails."""
    model = BrokenModel(lambda: http_error(400, "Invalid value for 'temperature'"))
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", models={"broken": model}) as h:
        wf = await h.start("hello", agent=AgentConfig(model="broken", toolkit="tests"))
        await _failure(h, wf)
        handle = h.client.get_workflow_handle(wf)
        plain = Client(**{**h.client.config(), "data_converter": DataConverter.default})
        senders: list[Callable[[], Awaitable[None]]] = [
            lambda: handle.signal("retry"),
            lambda: handle.signal("retry", args=[{"requested_by": "a"}, 2]),
            lambda: plain.get_workflow_handle(wf).signal("retry", b"\x00\xff"),
        ]
        for calls, send in enumerate(senders, start=2):
            await send()

            async def failed_again(calls: int = calls) -> bool:
                status = await h.conversations.status(wf)
                return model.calls == calls and status.state == "model_failed"

            await eventually(failed_again, what=f"model call {calls} failing again")
        events = [e.event_type async for e in handle.fetch_history_events()]
    assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
    assert model.calls == 4


class HangingModel:
    """Never answers (until cancelled)."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def __call__(self, request: ModelRequest) -> AssistantMessage:
        self.started.set()
        await asyncio.sleep(3600)
        raise AssertionError("not reached")


async def test_cancelling_during_a_model_turn_cancels_it_and_does_not_wait(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    model = HangingModel()
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", models={"hang": model}) as h:
        wf = await h.start("hello", agent=AgentConfig(model="hang", toolkit="tests"))
        async with asyncio.timeout(20):
            await model.started.wait()
        await h.conversations.cancel(wf)
        with pytest.raises(WorkflowFailureError) as ended:
            async with asyncio.timeout(20):
                await h.client.get_workflow_handle(wf).result()
        assert isinstance(ended.value.cause, CancelledError)
        assert await h.execution_status(wf) == WorkflowExecutionStatus.CANCELED


def _traceback(record: logging.LogRecord) -> str:
    """A record's traceback: its `exc_info` formatted, or the text the worker's log
    redaction left in `exc_text` (it formats, scrubs and clears `exc_info`)."""
    if record.exc_info is not None:
        return logging.Formatter().formatException(record.exc_info)
    return record.exc_text or ""
