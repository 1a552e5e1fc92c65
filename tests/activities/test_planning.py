import json
from collections.abc import Sequence
from typing import Any

from durable_tools import (
    ToolCall,
    Toolkit,
    call_digest,
    interaction_tool,
    signal_tool,
    sleep_tool,
    tool,
)
from durable_tools.activities.planning import plan_calls, shown_summary, summarize_call
from durable_tools.arguments import SUMMARY_LIMIT
from durable_tools.redact import Redactor
from durable_tools.signals import Sleep
from durable_tools.tools import ApprovalContext
from durable_tools.transcript import AssistantMessage, UserMessage


@tool(needs_approval=True, approval_deadline=3600)
def transfer(amount: int, to: str) -> str:
    """Transfer money.

    Args:
        amount: Cents.
        to: Recipient.
    """
    return "ok"


@tool(needs_approval=lambda args, ctx: args.amount > 100)
def tip(amount: int) -> str:
    """Tip.

    Args:
        amount: Cents.
    """
    return "ok"


def _raise(_: object) -> object:
    raise RuntimeError("cannot decide")


KIT = Toolkit(
    transfer,
    tip,
    sleep_tool(),
    signal_tool("broken", handler=_raise),
    interaction_tool("ask", answer={"type": "string"}),
)


def _call(call_id: str, name: str, **args: object) -> ToolCall:
    return ToolCall(call_id=call_id, name=name, arguments=json.dumps(args))


def test_local_call_carries_per_tool_deadline_hash_and_summary():
    (plan,) = plan_calls(KIT, [_call("c1", "transfer", amount=5, to="bob")], [])
    assert plan.kind == "local" and plan.failure is None
    assert plan.needs_approval is True
    assert plan.approval_deadline == 3600
    assert plan.arguments_hash == call_digest("transfer", "c1", '{"to": "bob", "amount": 5}')
    assert plan.summary == "transfer(amount=5, to='bob')"


def test_needs_approval_function_sees_parsed_arguments():
    small, large = plan_calls(KIT, [_call("a", "tip", amount=5), _call("b", "tip", amount=500)], [])
    assert (small.needs_approval, large.needs_approval) == (False, True)


def test_signal_tool_is_decoded_to_its_action_on_the_worker():
    (plan,) = plan_calls(KIT, [_call("s", "sleep", seconds=259200)], [])
    assert plan.kind == "signal" and plan.action == Sleep(seconds=259200)


def test_failures_are_planned_not_raised():
    plans = plan_calls(
        KIT,
        [
            _call("u", "nope"),
            ToolCall(call_id="j", name="transfer", arguments="{not json"),
            _call("h", "broken"),
            _call("n", "sleep", seconds=-1),
        ],
        [],
    )
    kinds = [(p.kind, p.failure.kind if p.failure else None) for p in plans]
    assert kinds == [
        ("unknown", "unknown_tool"),
        ("local", "input_validation_error"),
        ("signal", "execution_error"),
        ("signal", "input_validation_error"),
    ]
    assert "cannot decide" in plans[2].failure.reason  # type: ignore[union-attr]


def test_interaction_carries_answer_schema():
    (plan,) = plan_calls(KIT, [_call("q", "ask")], [])
    assert plan.kind == "interaction" and plan.answer_schema == {"type": "string"}


def test_summary_is_truncated():
    text = summarize_call(_call("c", "transfer", to="x" * 500, amount=1), limit=40)
    assert len(text) == 40 and text.endswith("…")


class _NotToBeRead(Sequence[Any]):
    """A transcript that fails if planning copies it (as every turn once did)."""

    def __len__(self) -> int:
        raise AssertionError("the transcript was read")

    def __getitem__(self, index: Any) -> Any:
        raise AssertionError("the transcript was read")


def test_the_transcript_is_read_only_for_a_needs_approval_function():
    (plan,) = plan_calls(KIT, [_call("c1", "transfer", amount=5, to="bob")], _NotToBeRead())
    assert plan.needs_approval is True
    seen: list[tuple[Any, ...]] = []

    def record(args: Any, ctx: ApprovalContext) -> bool:
        seen.append(ctx.transcript)
        return False

    kit = Toolkit(tool(needs_approval=record)(_gated))
    earlier = [UserMessage(text="hello")]
    message = AssistantMessage(tool_calls=(_call("a", "_gated"), _call("b", "_gated")))
    plans = plan_calls(kit, message.tool_calls, earlier, message=message)
    assert [p.needs_approval for p in plans] == [False, False]
    # Both calls see the transcript with the turn's message, built once.
    assert seen == [(earlier[0], message)] * 2 and seen[0] is seen[1]


def _gated() -> str:
    """A tool whose approval depends on the transcript."""
    return "ok"


def test_a_summary_is_redacted_before_it_is_cut() -> None:
    """Issue 25, item 5: the tool activity's summary never shows part of a secret."""
    secret = "tok-0123456789-abcdefghij"
    redact = Redactor([secret])
    # The secret starts at character 110 and runs past the 120-character cut.
    text = "x" * (110 - len("transfer(to='")) + secret
    plain = ToolCall(call_id="c1", name="transfer", arguments=json.dumps({"to": text}))
    shown = shown_summary(plain, redact)
    assert len(shown) == SUMMARY_LIMIT and shown.endswith("[redacted…")
    assert "tok-" not in shown
    assert "tok-" in summarize_call(plain)  # cut first, a redactor would miss it
    # Nothing to redact: the summary as made (a plan then records none of its own).
    other = ToolCall(call_id="c2", name="transfer", arguments='{"to": "' + "y" * 300 + '"}')
    assert shown_summary(other, redact) == summarize_call(other)
    [planned] = plan_calls(Toolkit(transfer), [plain], [], redact=redact)
    assert planned.summary == shown


# ------------------------------------------------- local activities (local=True)


@tool(local=True, timeout=5, needs_approval=True)
def read_order(order: str) -> str:
    """Read an order (a local activity).

    Args:
        order: Order id.
    """
    return order


@tool(local=True, timeout=5)
def add(a: int, b: int) -> int:
    """Add.

    Args:
        a: A number.
        b: Another.
    """
    return a + b


LOCAL_KIT = Toolkit(read_order, add, transfer)


def test_a_local_tool_s_calls_are_planned_local_without_heartbeats() -> None:
    plans = plan_calls(
        LOCAL_KIT,
        [
            ToolCall(call_id="a", name="add", arguments='{"a": 1, "b": 2}'),
            ToolCall(call_id="r", name="read_order", arguments='{"order": "o-1"}'),
            ToolCall(call_id="t", name="transfer", arguments='{"amount": 5, "to": "x"}'),
        ],
        [],
    )
    add_plan, read_plan, transfer_plan = plans
    assert add_plan.local and add_plan.timeout == 5 and add_plan.heartbeat_timeout is None
    assert add_plan.max_attempts == 3 and not add_plan.at_most_once
    # Gated, and still local with its retries: the tool is idempotent.
    assert read_plan.local and read_plan.needs_approval and read_plan.max_attempts == 3
    # An ordinary tool's plan is as before: no `local`, its heartbeat timeout.
    assert not transfer_plan.local and transfer_plan.heartbeat_timeout == 30


def test_a_turn_runs_at_most_32_calls_as_local_activities() -> None:
    """The markers of one workflow task stay small (`MAX_LOCAL_CALLS_PER_TURN`)."""
    from durable_tools._wire import MAX_LOCAL_CALLS_PER_TURN

    calls = [ToolCall(call_id=f"c{i}", name="add", arguments='{"a": 1, "b": 2}') for i in range(40)]
    plans = plan_calls(LOCAL_KIT, calls, [])
    assert [p.local for p in plans] == [True] * MAX_LOCAL_CALLS_PER_TURN + [False] * 8
    # The rest are ordinary activities, with the tool's heartbeat timeout.
    assert {p.heartbeat_timeout for p in plans[MAX_LOCAL_CALLS_PER_TURN:]} == {30}


def test_local_is_recorded_only_when_set() -> None:
    """Histories recorded before `local` decode to `local=False` and record the same."""
    from durable_tools._wire import ModelTurn

    calls = [
        ToolCall(call_id="a", name="add", arguments='{"a": 1, "b": 2}'),
        ToolCall(call_id="t", name="transfer", arguments='{"amount": 5, "to": "x"}'),
    ]
    turn = ModelTurn(
        message=AssistantMessage(tool_calls=tuple(calls)), plans=plan_calls(LOCAL_KIT, calls, [])
    )
    recorded = json.loads(turn.model_dump_json())
    assert recorded["plans"][0]["local"] is True
    assert "local" not in recorded["plans"][1]
    assert ModelTurn.model_validate(recorded) == turn
