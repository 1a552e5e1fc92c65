"""A customer-support agent: its toolkit and a scripted model that plays it.

Tools, one of each kind that runs without a provider:

| tool | kind | what it shows |
|---|---|---|
| `lookup_order` | local, read-only | a typed tool; `ToolFailure("not_found")` for the model |
| `refund` | local, `needs_approval=True` | a person approves every refund; the idempotency key |
| `ask_customer` | interaction | a question answered later, checked against an answer schema |
| `sleep`, `finish` | signal | the built-in durable timer and the structured final output |

`support_script` plays the model's side from the transcript alone (no state
of its own): it asks which order when the first message names none, looks the
order up, asks for a refund of the order's total, and finishes with a
structured resolution (refunded, refund not issued, or order not found).

Run it: `durable-tools worker --app examples.support:app` (see the README), or
`make demo` for the whole round trip on an embedded server.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, cast

from pydantic import BaseModel

from durable_tools import (
    AssistantMessage,
    RetryPolicy,
    ToolAnnotations,
    ToolCallOutput,
    ToolContext,
    ToolFailure,
    Toolkit,
    UserMessage,
    finish_tool,
    interaction_tool,
    sleep_tool,
    tool,
)
from durable_tools.conversation import AgentConfig
from durable_tools.models.base import ModelRequest
from durable_tools.testing import ScriptedModel, call
from durable_tools.worker import App

__all__ = [
    "AGENT",
    "ORDERS",
    "RESOLUTION_SCHEMA",
    "Order",
    "RefundReceipt",
    "app",
    "ask_customer",
    "finish",
    "kit",
    "lookup_order",
    "refund",
    "support_script",
]


class Order(BaseModel):
    """An order as the shop's order system returns it."""

    order_id: str
    customer: str
    item: str
    total_cents: int
    currency: str = "EUR"
    status: str


class RefundReceipt(BaseModel):
    """What the payment system returns for a refund."""

    refund_id: str
    order_id: str
    amount_cents: int
    currency: str
    status: str = "issued"


ORDERS: dict[str, Order] = {
    order.order_id: order
    for order in (
        Order(
            order_id="A-1001",
            customer="Dana Kim",
            item="Espresso grinder",
            total_cents=12900,
            status="delivered",
        ),
        Order(
            order_id="A-1002",
            customer="Luis Ortega",
            item="Milk frother",
            total_cents=3450,
            status="shipped",
        ),
    )
}
"""The example's order system (in memory)."""

_ORDER_ID = re.compile(r"\b([A-Za-z]-\d{3,})\b")


@tool(
    timeout=10,
    annotations=ToolAnnotations(
        read_only=True, destructive=False, idempotent=True, open_world=False
    ),
)
async def lookup_order(order_id: str) -> Order:
    """Look up an order: item, total, status and customer.

    Args:
        order_id: The order id, e.g. "A-1001".
    """
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        raise ToolFailure("not_found", f"no order {order_id!r}; ask the customer to check the id")
    return order


@tool(
    needs_approval=True,
    timeout=30,
    retry=RetryPolicy(max_attempts=5, initial_interval=1.0),
    annotations=ToolAnnotations(destructive=False, idempotent=True, open_world=False),
)
async def refund(order_id: str, amount_cents: int, ctx: ToolContext) -> RefundReceipt:
    """Refund an order to the customer's original payment method. A person approves each refund.

    Args:
        order_id: The order to refund, e.g. "A-1001".
        amount_cents: The amount in cents, at most the order total.
    """
    order = ORDERS.get(order_id.strip().upper())
    if order is None:
        raise ToolFailure("not_found", f"no order {order_id!r}")
    if not 0 < amount_cents <= order.total_cents:
        raise ToolFailure(
            "invalid_amount",
            f"amount_cents must be between 1 and the order total {order.total_cents}",
        )
    # The idempotency key is the same on every retry and after a worker crash,
    # so a payment API that deduplicates on it refunds once.
    refund_id = "rf_" + hashlib.sha256(ctx.idempotency_key.encode()).hexdigest()[:12]
    return RefundReceipt(
        refund_id=refund_id,
        order_id=order.order_id,
        amount_cents=amount_cents,
        currency=order.currency,
    )


ask_customer = interaction_tool(
    "ask_customer",
    description="Ask the customer a question and wait for the reply (it may take days).",
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "The question."}},
        "required": ["question"],
        "additionalProperties": False,
    },
    answer={
        "type": "object",
        "properties": {
            "order_id": {"type": "string", "pattern": "^[A-Za-z]-[0-9]{3,}$"},
            "note": {"type": "string"},
        },
        "required": ["order_id"],
        "additionalProperties": False,
    },
)
"""Asks which order a request is about; answer e.g. `{"order_id": "A-1001"}`."""

RESOLUTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "resolution": {"enum": ["refunded", "refund_not_issued", "order_not_found"]},
        "order_id": {"type": "string"},
        "refund_id": {"type": ["string", "null"]},
        "amount_cents": {"type": "integer", "minimum": 0},
        "note": {"type": "string"},
    },
    "required": ["resolution", "order_id", "note"],
    "additionalProperties": False,
}
"""JSON Schema of the conversation's final output (the `finish` tool's `output`)."""

finish = finish_tool(output=RESOLUTION_SCHEMA)

kit = Toolkit(lookup_order, refund, ask_customer, sleep_tool(), finish, label="support")
"""The support toolkit."""

AGENT = AgentConfig(
    name="support",
    model="scripted",
    toolkit="support",
    instructions=(
        "You are a customer-support agent for a coffee-equipment shop. Look orders up "
        "before acting; refunds need a colleague's approval; finish with a resolution."
    ),
)
"""The agent configuration the demo starts conversations with."""


def _latest_output(request: ModelRequest, tool_name: str) -> ToolCallOutput | None:
    for item in reversed(request.transcript):
        if isinstance(item, ToolCallOutput) and item.tool == tool_name:
            return item
    return None


def _order_id_from_user(request: ModelRequest) -> str | None:
    for item in reversed(request.transcript):
        if isinstance(item, UserMessage):
            found = _ORDER_ID.search(item.text)
            if found:
                return found.group(1).upper()
    return None


def _reason(output: ToolCallOutput) -> str:
    try:
        data: object = json.loads(output.content)
    except json.JSONDecodeError:
        return output.content
    if isinstance(data, dict) and "reason" in data:
        reason = str(cast(dict[str, object], data)["reason"])
        kind = output.failure_kind or "error"
        return reason if reason.startswith(kind) else f"{kind}: {reason}"
    return output.content


def _money(cents: int, currency: str = "EUR") -> str:
    return f"{cents / 100:.2f} {currency}"


def _looked_up_id(output: ToolCallOutput | None) -> str | None:
    """The order id of a successful `lookup_order` output, if any."""
    if output is None or output.is_error:
        return None
    return Order.model_validate_json(output.content).order_id


def support_script(request: ModelRequest) -> AssistantMessage:
    """The scripted model's turn for a support conversation (see the module docstring)."""
    turn = f"call_{request.turn}"
    refunded = _latest_output(request, "refund")
    looked_up = _latest_output(request, "lookup_order")
    asked = _latest_output(request, "ask_customer")

    if refunded is not None:
        if not refunded.is_error:
            receipt = RefundReceipt.model_validate_json(refunded.content)
            output = {
                "resolution": "refunded",
                "order_id": receipt.order_id,
                "refund_id": receipt.refund_id,
                "amount_cents": receipt.amount_cents,
                "note": f"refunded {_money(receipt.amount_cents, receipt.currency)}",
            }
            text = f"Done: refund {receipt.refund_id} is on its way."
        else:
            order_id = _looked_up_id(looked_up) or ""
            output = {
                "resolution": "refund_not_issued",
                "order_id": order_id,
                "refund_id": None,
                "note": _reason(refunded),
            }
            text = "I could not issue the refund; a colleague will follow up."
        return AssistantMessage(text=text, tool_calls=(call(turn, "finish", output=output),))

    if looked_up is not None:
        if looked_up.is_error:
            output = {
                "resolution": "order_not_found",
                "order_id": _order_id_from_user(request) or "",
                "note": _reason(looked_up),
            }
            return AssistantMessage(
                text="I cannot find that order.",
                tool_calls=(call(turn, "finish", output=output),),
            )
        order = Order.model_validate_json(looked_up.content)
        return AssistantMessage(
            text=(
                f"Order {order.order_id} ({order.item}, {_money(order.total_cents)}) is "
                f"{order.status}. I am requesting a full refund; a colleague approves it."
            ),
            tool_calls=(
                call(turn, "refund", order_id=order.order_id, amount_cents=order.total_cents),
            ),
        )

    order_id = _order_id_from_user(request)
    if order_id is None and asked is not None and not asked.is_error:
        order_id = str(json.loads(asked.content)["order_id"]).upper()
    if order_id is not None:
        return AssistantMessage(
            text="Let me look up your order.",
            tool_calls=(call(turn, "lookup_order", order_id=order_id),),
        )
    if asked is not None:  # the question expired or was cancelled
        output = {"resolution": "order_not_found", "order_id": "", "note": _reason(asked)}
        return AssistantMessage(
            text="I could not find out which order this is about.",
            tool_calls=(call(turn, "finish", output=output),),
        )
    return AssistantMessage(
        text="Sorry to hear that. Which order is it about?",
        tool_calls=(call(turn, "ask_customer", question="Which order is it (e.g. A-1001)?"),),
    )


app = App(toolkits={"support": kit}, models={"scripted": ScriptedModel(support_script)})
"""The application `durable-tools worker --app examples.support:app` serves."""
