"""The inbox sends operators' notes in the signed-in name; non-deciders cannot supersede.

Issue 23, item 2, against a real dev server and worker: a message sent from
the inbox is an operator's note from the authenticated identity (transcript,
page); while an approval waits that the sender may not decide, the API
answers 403 and the page shows why, unless the conversation lets anyone
supersede (`ConversationOptions.messages_supersede="anyone"`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from agent_support import LEDGER_ENV
from inbox_support import PAYMENTS, PAYMENTS_AGENT, basic, csrf_token, inbox_client, turns
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, outputs_by_id, running

from durable_tools.agents import Agent
from durable_tools.conversation import AgentConfig, ConversationOptions
from durable_tools.transcript import UserMessage

ANA = basic("ana", "ana-secret")  # in the `approvers` group
BOB = basic("bob", "bob-secret")  # in no group
PAY = turns(("p1", "pay", {"to": "acme", "cents": 9900}))


@pytest.fixture
async def payments(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Harness]:
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    async with running(dev_env, task_queue, ledger, toolkits={"payments": PAYMENTS}) as harness:
        yield harness


async def test_the_inbox_sends_an_operators_note_in_the_signed_in_name(harness: Harness) -> None:
    wf = await harness.start("hello")
    await harness.wait_assistant_text(wf, "echo: hello")
    async with inbox_client(harness) as client:
        token = await csrf_token(client, BOB)
        sent = await client.post(
            f"/api/conversations/{wf}/messages",
            json={"text": "use the spare part", "sent_by": "the-customer"},  # ignored
            headers={**BOB, "X-CSRF-Token": token},
        )
        assert sent.status_code == 200, sent.text
        items = await harness.wait_assistant_text(wf, "echo: use the spare part")
        page = await client.get(f"/conversations/{wf}", headers=BOB)

    messages = [i for i in items if isinstance(i, UserMessage)]
    assert messages[-1] == UserMessage(text="use the spare part", sent_by="bob", operator=True)
    assert messages[0] == UserMessage(text="hello")
    # The page shows who sent each message, the operator's note marked.
    assert page.status_code == 200
    assert 'class="msg user operator" data-sent-by="bob"' in page.text
    assert "operator note" in page.text and "from <b>bob</b>" in page.text


async def test_a_person_who_may_not_decide_cannot_supersede_the_approval(
    payments: Harness,
) -> None:
    wf = await payments.start(PAY, agent=PAYMENTS_AGENT)
    await payments.wait_approval(wf, "p1")
    async with inbox_client(payments) as client:
        bobs = await csrf_token(client, BOB)
        refused = await client.post(
            f"/api/conversations/{wf}/messages",
            json={"text": "never mind"},
            headers={**BOB, "X-CSRF-Token": bobs},
        )
        assert refused.status_code == 403, refused.text
        problem = refused.json()
        assert problem["error"] == "not_allowed"
        assert "call p1" in problem["message"] and "group:approvers" in problem["message"]
        # The page's form is refused the same way, and says why.
        page = await client.post(
            f"/conversations/{wf}/send", data={"csrf_token": bobs, "text": "x"}, headers=BOB
        )
        assert page.status_code == 403
        assert "only group:approvers may decide" in page.text
        assert [a.call_id for a in (await payments.conversations.pending(wf)).approvals] == ["p1"]

        # A decider may: the message supersedes the approval, in her name.
        anas = await csrf_token(client, ANA)
        sent = await client.post(
            f"/api/conversations/{wf}/messages",
            json={"text": "stop, wrong supplier"},
            headers={**ANA, "X-CSRF-Token": anas},
        )
        assert sent.status_code == 200, sent.text
    outputs = await payments.wait_outputs(wf, "p1")
    assert (outputs["p1"].failure_kind, outputs["p1"].sent_by) == ("cancelled", "ana")
    assert payments.ledger_rows("pay") == []


async def test_a_conversation_may_let_anyone_supersede(payments: Harness) -> None:
    options = ConversationOptions(messages_supersede="anyone")
    wf = await payments.start(PAY, agent=PAYMENTS_AGENT, options=options)
    await payments.wait_approval(wf, "p1")
    assert (await payments.conversations.pending(wf)).messages_supersede == "anyone"
    async with inbox_client(payments) as client:
        bobs = await csrf_token(client, BOB)
        sent = await client.post(
            f"/api/conversations/{wf}/messages",
            json={"text": "never mind"},
            headers={**BOB, "X-CSRF-Token": bobs},
        )
        assert sent.status_code == 200, sent.text
    items = await payments.wait_assistant_text(wf, "echo: never mind")
    assert (outputs_by_id(items)["p1"].failure_kind, outputs_by_id(items)["p1"].sent_by) == (
        "cancelled",
        "bob",
    )


async def test_an_agent_may_let_anyone_supersede(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 23, item 2: configurable per agent, not only per conversation.

    The worker declares the agent with `messages_supersede="anyone"`; the
    conversation's options keep the default. Its model turn reports the
    agent's setting, which `pending` shows and the inbox follows.
    """
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setenv(LEDGER_ENV, str(ledger))
    agents = {
        "open": Agent(model="directed", toolkit="payments", messages_supersede="anyone"),
        "strict": Agent(model="directed", toolkit="payments"),
    }
    async with running(
        dev_env, task_queue, ledger, toolkits={"payments": PAYMENTS}, agents=agents
    ) as harness:
        found: dict[str, str] = {}
        for name in agents:
            wf = await harness.start(PAY, agent=AgentConfig(name=name))
            await harness.wait_approval(wf, "p1")
            found[name] = (await harness.conversations.pending(wf)).messages_supersede
            async with inbox_client(harness) as client:
                token = await csrf_token(client, BOB)
                sent = await client.post(
                    f"/api/conversations/{wf}/messages",
                    json={"text": "never mind"},
                    headers={**BOB, "X-CSRF-Token": token},
                )
            assert sent.status_code == (200 if name == "open" else 403), (name, sent.text)
        assert found == {"open": "anyone", "strict": "deciders"}
