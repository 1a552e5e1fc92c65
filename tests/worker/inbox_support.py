"""Helpers of the inbox tests: an app on a harness, scripted turns, credentials."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from agent_support import TOOLKIT, record
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client
from workflow_helpers import Harness, eventually

from durable_tools import (
    AssistantMessage,
    ToolCall,
    ToolContext,
    Toolkit,
    interaction_tool,
    tool,
)
from durable_tools.conversation import AgentConfig
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel
from durable_tools.worker.dev_server import free_port
from durable_tools.worker.inbox import Authenticators, TokenAuth, create_app, serve_inbox
from durable_tools.worker.inbox.auth import ProxyHeaderAuth
from durable_tools.worker.inbox.authz import Authorizer

CREDENTIALS = "ana:ana-secret:approvers\nbob:bob-secret\n"
"""Token file of the API tests: ana and bob."""

DECISION_KEY = ("k1", b"inbox-test-key-0123456789abcdef-k1")
"""The key the worker and the inbox share in the signing tests."""


@tool(needs_approval=True, approvers=["group:approvers"])
async def pay(to: str, cents: int, ctx: ToolContext) -> str:
    """Pay a supplier (the approvers group decides).

    Args:
        to: The supplier.
        cents: The amount in cents.
    """
    record({"tool": "pay", "call_id": ctx.call_id})
    return f"paid {cents} to {to}"


PAYMENTS = Toolkit(*TOOLKIT.tools.values(), pay, label="payments")
"""The tests toolkit and `pay`, whose approvers are the `approvers` group."""

PAYMENTS_AGENT = AgentConfig(name="payments", model="directed", toolkit="payments")

IBAN_PATTERN = "^[A-Z]{2}[0-9]{2}[A-Z0-9]{11,30}$"
"""The pattern of `open_account`'s `iban`: validated, never shown as text."""

open_account = interaction_tool(
    "open_account",
    description="Ask a person for the account to pay into.",
    parameters={"type": "object", "properties": {"question": {"type": "string"}}},
    answer={
        "type": "object",
        "properties": {
            "iban": {
                "type": "string",
                "title": "IBAN",
                "description": "The account's IBAN, capitals and digits without spaces.",
                "pattern": IBAN_PATTERN,
            },
            "holder": {
                "type": "string",
                "title": "Account holder",
                "description": "The name on the account.",
                "minLength": 1,
            },
            "currency": {"type": "string", "enum": ["EUR", "USD"]},
            "bic": {"type": "string", "description": "The bank's BIC, if you know it."},
        },
        "required": ["iban", "holder"],
    },
)
"""An interaction tool whose answer schema lists its properties out of alphabetical order."""

FORMS = Toolkit(*TOOLKIT.tools.values(), open_account, label="forms")
"""The tests toolkit and `open_account`."""

FORMS_AGENT = AgentConfig(name="forms", model="directed", toolkit="forms")

_ASKED: Counter[str] = Counter()


def _shifty(request: ModelRequest) -> AssistantMessage:
    """Calls `refund` as `r1` for 100 cents the first time a conversation asks, 900 after."""
    if any(isinstance(item, AssistantMessage) for item in request.transcript):
        return AssistantMessage(text="done")
    _ASKED[request.workflow_id] += 1
    amount = 100 if _ASKED[request.workflow_id] == 1 else 900
    arguments = json.dumps({"order": "A-20", "amount": amount})
    return AssistantMessage(
        tool_calls=(ToolCall(call_id="r1", name="refund", arguments=arguments),)
    )


SHIFTY = ScriptedModel(_shifty)
"""A model whose answer changes when asked again (after a reset)."""

SHIFTY_AGENT = AgentConfig(name="shifty", model="shifty", toolkit="tests")


async def reset_to_first_task(client: Client, workflow_id: str) -> None:
    """`temporal workflow reset --type FirstWorkflowTask`: the conversation runs again from
    its start in a new run (same workflow id); its model is asked again."""
    handle = client.get_workflow_handle(workflow_id)
    history = await handle.fetch_history()
    first = next(
        e.event_id
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    )
    run_id = (await handle.describe()).run_id
    await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id),
            reason="the inbox test re-asks the model",
            workflow_task_finish_event_id=first,
            request_id=str(uuid.uuid4()),
        )
    )


def basic(name: str, secret: str) -> dict[str, str]:
    token = base64.b64encode(f"{name}:{secret}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    """A `directed` model message: one turn per call."""
    return json.dumps({"turns": [[[c[0], c[1], c[2]]] for c in calls]})


@asynccontextmanager
async def inbox_client(
    harness: Harness,
    *,
    proxy: bool = False,
    decision_key: tuple[str, bytes] | None = None,
    authorizer: Authorizer | None = None,
) -> AsyncGenerator[httpx.AsyncClient]:
    """An httpx client on the inbox app (token auth; proxy headers too when `proxy`)."""
    chain = [TokenAuth.parse(CREDENTIALS)]
    if proxy:
        chain.insert(0, ProxyHeaderAuth())  # pyright: ignore[reportArgumentType]
    app = create_app(
        harness.conversations,
        Authenticators(chain, basic_realm="inbox"),
        refresh_seconds=0,
        decision_key=decision_key,
        authorizer=authorizer,
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://inbox.test") as client:
        yield client


@asynccontextmanager
async def served(
    harness: Harness,
    *,
    refresh_seconds: float = 5.0,
    decision_key: tuple[str, bytes] | None = None,
    credentials: str = CREDENTIALS,
    streams_per_identity: int | None = None,
) -> AsyncGenerator[str]:
    """The inbox served over real HTTP on 127.0.0.1 (token auth); yields its base URL.

    Server-sent events need a real server: httpx's ASGI transport buffers a
    response until it ends. `credentials` is the token file (default
    `CREDENTIALS`); `streams_per_identity` the inbox's cap (default its own).
    """
    port, stop = free_port(), asyncio.Event()
    ready: list[str] = []
    auth = Authenticators([TokenAuth.parse(credentials)])
    options: dict[str, Any] = {}
    if streams_per_identity is not None:
        options["streams_per_identity"] = streams_per_identity
    serving = asyncio.create_task(
        serve_inbox(
            harness.conversations,
            auth,
            port=port,
            stop=stop,
            on_ready=ready.append,
            refresh_seconds=refresh_seconds,
            decision_key=decision_key,
            **options,
        )
    )
    try:
        async with asyncio.timeout(10):
            while not ready:
                assert not serving.done(), serving
                await asyncio.sleep(0.05)
        yield ready[0]
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)


async def sse(response: httpx.Response) -> AsyncIterator[tuple[str, str, Any]]:
    """Server-sent events of a streamed response as `(event, id, data)`, comments skipped."""
    name, event_id, data = "message", "", ""
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield name, event_id, json.loads(data)
            name, event_id, data = "message", "", ""
        elif line.startswith("event: "):
            name = line.removeprefix("event: ")
        elif line.startswith("id: "):
            event_id = line.removeprefix("id: ")
        elif line.startswith("data: "):
            data += line.removeprefix("data: ")


async def csrf_token(client: httpx.AsyncClient, headers: dict[str, str]) -> str:
    response = await client.get("/api/session", headers=headers)
    assert response.status_code == 200, response.text
    token: str = response.json()["csrf_token"]
    return token


async def listed(client: httpx.AsyncClient, headers: dict[str, str], workflow_id: str) -> Any:
    """The `/api/pending` entry of `workflow_id`, once visibility lists it with items."""

    async def probe() -> Any:
        response = await client.get("/api/pending", headers=headers)
        assert response.status_code == 200, response.text
        return next(
            (w for w in response.json() if w["workflow_id"] == workflow_id and w["items"]),
            None,
        )

    return await eventually(probe, what=f"{workflow_id} in /api/pending")
