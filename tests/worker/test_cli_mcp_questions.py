"""What MCP servers ask, answered with `durable-tools` run as a real subprocess (issue 27).

The test server (tests/mcp/mcp_test_server.py, written with the `mcp` SDK's
own server API) runs beside a worker on the dev server; a person at a
terminal sees each question with `durable-tools pending` and answers it:

* `paint`'s form, two rounds: an answer as JSON, then `--cancel` (and,
  in a second conversation, `--decline`); the server's tool body sees
  `cancel` / `decline`; bad input (two actions, a value with `--decline`,
  `--done` for a form, an answer breaking the schema) is one `error:` line
  and a non-zero exit, and nothing reaches the server; an interaction
  tool's question cannot be declined;
* `connect`'s link: without `--yes` the command shows the link and its
  host and asks for consent; "n" sends nothing, "y" sends *done*;
* `poem`'s sampling request under `sampling = "approve"`: `durable-tools
  approve` lets the conversation's model answer it;
* `survey`, a task that outlives its tool activity's timeout: its question
  mid-task is answered with `durable-tools answer`;
* a server that requires OAuth (tests/mcp/oauth_test_servers.py with
  `--ask`): `durable-tools mcp login`, then its `open_notes` asks whose
  notes, answered with `durable-tools answer`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from cli_process import Completed, Running, cli
from inbox_support import FORMS, FORMS_AGENT
from mcp_oauth_support import consent, oauth_servers
from mcp_support import (
    HAIKU,
    POET,
    TASK_ACTIVITY_TIMEOUT,
    poet,
    server_log,
    stdio_test_server,
    task_test_server,
)
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, eventually, running

from durable_tools.conversation import PendingApproval, PendingInteraction
from durable_tools.testing import ScriptedModel

LINK = "https://auth.example.com/login"


def _turns(*calls: tuple[str, str, dict[str, Any]]) -> str:
    return json.dumps({"turns": [[list(c) for c in calls]]})


async def _asked(h: Harness, workflow_id: str, call_id: str, round_: int = 1) -> PendingInteraction:
    """The call's question of input round `round_` (a task's questions are all round 1)."""

    async def probe() -> PendingInteraction | None:
        pending = await h.conversations.pending(workflow_id)
        return next(
            (
                i
                for i in pending.interactions
                if i.call_id == call_id and i.input_request and i.input_request.round == round_
            ),
            None,
        )

    return await eventually(probe, what=f"round {round_} of {call_id}", timeout=60)


class _Terminal:
    """`durable-tools ... --address` of the dev server, as a person types it."""

    def __init__(self, env: WorkflowEnvironment) -> None:
        self.address = env.client.service_client.config.target_host

    async def run(self, *args: str, stdin: str = "") -> Completed:
        return await cli(*args, "--address", self.address, "--timeout", "20", stdin=stdin)

    async def ok(self, *args: str, stdin: str = "") -> str:
        done = await self.run(*args, stdin=stdin)
        assert done.code == 0, (done.stdout, done.stderr)
        return " ".join(done.stdout.split())


async def test_a_form_answered_then_cancelled_or_declined_and_bad_input_refused(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True)
    term = _Terminal(dev_env)
    async with running(
        dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server], toolkits={"forms": FORMS}
    ) as h:
        # An interaction tool's question is answered, never declined (that is an MCP server's).
        tools = await h.start(_turns(("q", "open_account", {"question": "?"})), agent=FORMS_AGENT)
        await h.wait_interaction(tools, "q")
        refused = await term.run("answer", tools, "q", "--decline", "--yes")
        assert "--decline is for a question an MCP server asked" in refused.error_line()
        assert refused.code == 2

        wf = await h.start(_turns(("p", "notes__paint", {"thing": "shed"})))
        await _asked(h, wf, "p")
        shown = await term.ok("pending", wf)
        assert "What is your name?" in shown and "--decline" in shown and "--cancel" in shown
        for args, says, code in (  # 2: refused before sending; 1: the workflow refused it
            (("--decline", "--cancel"), "give one of --decline, --cancel and --done", 2),
            (('{"name": "x"}', "--decline"), "--decline takes no JSON answer", 2),
            (("--done",), "--done is for a link", 2),
            (("{not json",), "not valid JSON", 2),
            (('{"nom": 1}',), "answer schema", 1),
        ):
            refused = await term.run("answer", wf, "p", *args, "--yes")
            assert says in refused.error_line() and refused.code == code, (args, refused)
        await term.ok("answer", wf, "p", '{"name": "Cy"}', "--yes", "--by", "cy")
        await _asked(h, wf, "p", 2)
        assert "Which color, Cy?" in await term.ok("pending", wf)
        assert "cancelled p" in await term.ok("answer", wf, "p", "--cancel", "--yes")
        first = await h.wait_outputs(wf, "p")

        other = await h.start(_turns(("p", "notes__paint", {"thing": "gate"})))
        await _asked(h, other, "p")
        assert "declined p" in await term.ok("answer", other, "p", "--decline", "--yes")
        await _asked(h, other, "p", 2)
        await term.ok("answer", other, "p", '{"color": "red"}', "--yes")
        second = await h.wait_outputs(other, "p")
    painted = [json.loads(json.loads(o["p"].content)["result"]) for o in (first, second)]
    assert [(p["name"], p["color"]) for p in painted] == [
        ({"name": "Cy"}, "cancel"),
        ("decline", {"color": "red", "coats": 1}),
    ]
    calls = server_log(log, "call")  # the tool body ran once per call, with what was sent
    assert [(c["name"], c["color"]) for c in calls] == [
        ({"name": "Cy"}, "cancel"),
        ("decline", {"color": "red", "coats": 1}),
    ]


async def test_a_link_is_shown_with_its_host_and_needs_consent(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True)
    term = _Terminal(dev_env)
    async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server]) as h:
        wf = await h.start(_turns(("u", "notes__connect", {"url": LINK})))
        await _asked(h, wf, "u")
        listed = await term.ok("pending", wf)
        assert "auth.example.com" in listed and "--done" in listed
        with_value = await term.run("answer", wf, "u", '{"x": 1}', "--yes")
        assert "asks you to open a link (auth.example.com)" in with_value.error_line()
        refused = await term.run("answer", wf, "u", "--done", stdin="n\n")
        assert "not confirmed; nothing was sent" in refused.stderr
        assert refused.code != 0 and server_log(log, "call") == []
        consented = await term.ok("answer", wf, "u", "--done", stdin="y\n")
        outputs = await h.wait_outputs(wf, "u")
    # Before the consent: the link whole (the server's one-time token too) and its host.
    assert f"{LINK}?token=one-time-7f3a" in consented and "auth.example.com" in consented
    assert "Answer this call?" in consented and "answered u" in consented
    assert json.loads(outputs["u"].content) == {"result": "connect: accept"}
    assert [c["action"] for c in server_log(log, "call")] == ["accept"]


async def test_a_sampling_request_approved_with_the_cli(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    server = stdio_test_server(log, trust_annotations=True, sampling="approve")
    term = _Terminal(dev_env)
    model = ScriptedModel(poet)
    async with running(
        dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[server], models={"poet": model}
    ) as h:
        wf = await h.start(_turns(("s", "notes__poem", {"topic": "the sea"})), agent=POET)

        async def sampling() -> PendingApproval | None:
            pending = await h.conversations.pending(wf)
            return next((a for a in pending.approvals if a.input_request is not None), None)

        await eventually(sampling, what="the sampling request's approval")
        assert "A haiku about the sea." in await term.ok("pending", wf)
        assert [r for r in model.requests if r.purpose == "sampling"] == []
        await term.ok("approve", wf, "s", "--yes", "--by", "ada")
        outputs = await h.wait_outputs(wf, "s")
    result = json.loads(json.loads(outputs["s"].content)["result"])
    assert result == {"topic": "the sea", "poem": HAIKU, "model": "poet"}
    assert [c["text"] for c in server_log(log, "call")] == [HAIKU]


async def test_a_tasks_question_answered_with_the_cli_while_it_runs(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "server.jsonl"
    term = _Terminal(dev_env)
    seconds = TASK_ACTIVITY_TIMEOUT + 2.0
    async with running(
        dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[task_test_server(log)]
    ) as h:
        wf = await h.start(_turns(("p", "notes__survey", {"topic": "tides", "seconds": seconds})))
        await _asked(h, wf, "p")
        assert "Who is the survey for?" in await term.ok("pending", wf)
        await term.ok("answer", wf, "p", '{"name": "Ada"}', "--yes")
        outputs = await h.wait_outputs(wf, "p", timeout=seconds + 60)
    assert "survey of tides for Ada (accept)" in outputs["p"].content
    (call,) = server_log(log, "call")
    assert [u["keys"] for u in server_log(log, "task_update")] == [[f"who-{call['task_id']}"]]


async def test_an_oauth_servers_form_after_mcp_login_with_the_cli(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    term = _Terminal(dev_env)
    with oauth_servers(tmp_path, "--ask") as servers:
        config = servers.config(tmp_path, needs_approval=False)  # its tokens in tmp_path/tokens
        config_file = tmp_path / "mcp.toml"
        config_file.write_text(
            f'[servers.notes]\nurl = "{servers.url}"\n'
            f'[servers.notes.oauth]\ntoken_dir = "{tmp_path / "tokens"}"\n'
        )
        login = await Running.start("mcp", "login", "notes", "--mcp-config", str(config_file))
        try:
            url = await login.wait_for_line("/authorize?", timeout=30)
            await asyncio.to_thread(consent, url.strip())  # the person, in their browser
            logged_in = await login.finish(timeout=30)
        finally:
            await login.kill()
        assert logged_in.code == 0 and "Logged in to notes" in logged_in.stdout, logged_in
        async with running(dev_env, task_queue, tmp_path / "l.jsonl", mcp_servers=[config]) as h:
            wf = await h.start(_turns(("o", "notes__open_notes", {})))
            await _asked(h, wf, "o")
            assert "Whose notes should I open?" in await term.ok("pending", wf)
            await term.ok("answer", wf, "o", '{"name": "Ada"}', "--yes")
            outputs = await h.wait_outputs(wf, "o")
        calls = servers.events("call")
    assert "the notes of Ada" in outputs["o"].content, outputs["o"]
    assert [c.get("owner") for c in calls] == ["Ada"]  # once, with the person's answer
