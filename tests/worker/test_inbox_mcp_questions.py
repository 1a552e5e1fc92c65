"""The inbox lists an MCP server's question with its form and answers it (issue 27, item 2).

The test server's `paint` asks for its user's name, then a color (two
input-required rounds). The inbox's JSON API lists each round as a question
of the call, its summary the server's message and its `answer_schema` the
requested schema; an answer that violates it is refused (422), a valid one
reaches the server. The server's `requestState` is in no inbox answer.
`"action": "decline"` / `"cancel"` reach the server as such; a decline
carrying a value is refused (422).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from inbox_support import basic, csrf_token, inbox_client, listed
from mcp_support import server_log, stdio_test_server
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import PendingInteraction
from durable_tools.mcp import McpServerConfig

SERVER = Path(__file__).resolve().parents[1] / "mcp" / "mcp_test_server.py"
ANA = basic("ana", "ana-secret")


async def _question(h: Harness, workflow_id: str, round_: int) -> PendingInteraction:
    async def probe() -> PendingInteraction | None:
        pending = await h.conversations.pending(workflow_id)
        return next(
            (
                i
                for i in pending.interactions
                if i.input_request is not None and i.input_request.round == round_
            ),
            None,
        )

    return await eventually(probe, what=f"the question of round {round_}")


async def test_the_inbox_answers_an_mcp_servers_form(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        trust_annotations=True,
    )
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        message = json.dumps({"turns": [[["p", "notes__paint", {"thing": "boat"}]]]})
        workflow_id = await h.start(message)
        seen: list[Any] = []
        async with inbox_client(h) as client:
            token = await csrf_token(client, ANA)
            headers = {**ANA, "X-CSRF-Token": token}
            url = f"/api/conversations/{workflow_id}/calls/p/answer"
            for round_, good in ((1, {"name": "Eve"}), (2, {"color": "blue"})):
                asked = await _question(h, workflow_id, round_)
                entry = await listed(client, ANA, workflow_id)
                seen.append(entry)
                (item,) = entry["items"]
                assert item["kind"] == "question"
                assert item["answer_schema"] == asked.answer_schema
                assert asked.input_request is not None
                assert asked.input_request.message in item["summary"]
                bad = await client.post(
                    url,
                    json={"value": {"wrong": 1}, "arguments_hash": asked.arguments_hash},
                    headers=headers,
                )
                assert bad.status_code == 422 and bad.json()["error"] == "invalid_answer"
                answered = await client.post(
                    url,
                    json={"value": good, "arguments_hash": asked.arguments_hash},
                    headers=headers,
                )
                assert answered.status_code == 200, answered.text
        outputs = await h.wait_outputs(workflow_id, "p")
    painted = json.loads(json.loads(outputs["p"].content)["result"])
    assert painted["name"] == {"name": "Eve"} and painted["color"] == {"color": "blue", "coats": 1}
    assert "Which color, Eve?" in seen[1]["items"][0]["summary"]
    assert "request_state" not in json.dumps(seen) and "requestState" not in json.dumps(seen)


async def test_the_inbox_shows_a_link_with_its_host_and_says_done(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        trust_annotations=True,
    )
    base = "https://auth.example.com/login"
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        message = json.dumps({"turns": [[["u", "notes__connect", {"url": base}]]]})
        workflow_id = await h.start(message)
        asked = await _question(h, workflow_id, 1)
        async with inbox_client(h) as client:
            entry = await listed(client, ANA, workflow_id)
            (item,) = entry["items"]
            assert (item["url"], item["host"]) == (
                f"{base}?token=one-time-7f3a",
                "auth.example.com",
            )
            page = (await client.get(f"/conversations/{workflow_id}", headers=ANA)).text
            assert 'data-testid="link-host">auth.example.com<' in page
            assert 'rel="noopener noreferrer"' in page and "I am done there" in page
            token = await csrf_token(client, ANA)
            done = await client.post(
                f"/api/conversations/{workflow_id}/calls/u/answer",
                json={"value": None, "arguments_hash": asked.arguments_hash},
                headers={**ANA, "X-CSRF-Token": token},
            )
            assert done.status_code == 200, done.text
        outputs = await h.wait_outputs(workflow_id, "u")
    assert json.loads(outputs["u"].content) == {"result": "connect: accept"}


async def test_the_api_declines_and_cancels_an_mcp_servers_form(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True)
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        message = json.dumps({"turns": [[["p", "notes__paint", {"thing": "cart"}]]]})
        workflow_id = await h.start(message)
        url = f"/api/conversations/{workflow_id}/calls/p/answer"
        async with inbox_client(h) as client:
            headers = {**ANA, "X-CSRF-Token": await csrf_token(client, ANA)}
            first = await _question(h, workflow_id, 1)
            with_value = await client.post(
                url,
                json={"value": {"name": "x"}, "arguments_hash": first.arguments_hash}
                | {"action": "decline"},
                headers=headers,
            )
            assert with_value.status_code == 422 and with_value.json()["error"] == "invalid_answer"
            for round_, action in ((1, "decline"), (2, "cancel")):
                asked = await _question(h, workflow_id, round_)
                sent = await client.post(
                    url,
                    json={"arguments_hash": asked.arguments_hash, "action": action},
                    headers=headers,
                )
                assert sent.status_code == 200, sent.text
        outputs = await h.wait_outputs(workflow_id, "p")
    painted = json.loads(json.loads(outputs["p"].content)["result"])
    assert (painted["name"], painted["color"]) == ("decline", "cancel")
    assert [(c["name"], c["color"]) for c in server_log(log, "call")] == [("decline", "cancel")]
