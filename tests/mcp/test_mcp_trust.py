"""MCP annotations are hints from the server, untrusted unless configured (issue 10, item 6).

* By default every MCP tool needs approval and runs at most once, whatever its
  annotations say: `mcp-server-git` (PyPI) marks `git_commit` not destructive,
  and the test server's `stamp` claims to be read-only and idempotent but
  writes (and its server dies after the write, a failure after the side
  effect). Both are gated, and `stamp` is not sent twice.
* `trust_annotations=True` (Python or TOML) makes the annotations policy.
* The operator's overrides win either way.
* `tools/list_changed` never loosens a tool's policy, even on a trusted server:
  a gated tool relabelled read-only stays gated (and at-most-once), while a
  tool relabelled destructive becomes gated.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp_support import started
from temporalio.testing import WorkflowEnvironment
from workflow_helpers import Harness, running

from durable_tools.errors import ConfigurationError
from durable_tools.executor import Output
from durable_tools.mcp import McpServerConfig, McpToolPolicy, McpToolsets, load_mcp_config
from durable_tools.results import Ok, ToolCall
from durable_tools.toolkit import Toolkit
from durable_tools.tools import Tool

SERVER = Path(__file__).with_name("mcp_test_server.py")
GIT_SERVER = Path(sys.executable).parent / "mcp-server-git"


def _notes(log: Path, **fields: Any) -> McpServerConfig:
    return McpServerConfig(
        name="notes",
        command=sys.executable,
        args=[str(SERVER), "stdio", "--log", str(log)],
        **fields,
    )


def _git_repo(path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.fail("git is not installed (mcp-server-git needs it)")
    path.mkdir()
    for args in (
        ["init", "-q", "-b", "main"],
        ["config", "user.name", "Test"],
        ["config", "user.email", "test@example.invalid"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    (path / "notes.txt").write_text("hello\n")
    subprocess.run(["git", "add", "notes.txt"], cwd=path, check=True)
    return path


def _git(repo: Path, **fields: Any) -> McpServerConfig:
    if not GIT_SERVER.exists():
        pytest.fail(f"{GIT_SERVER} is missing: run `make install` (mcp-server-git is a dev extra)")
    return McpServerConfig(
        name="git", command=str(GIT_SERVER), args=["--repository", str(repo)], **fields
    )


def _commits(repo: Path) -> list[str]:
    done = subprocess.run(
        ["git", "log", "--format=%s"], cwd=repo, capture_output=True, text=True, check=False
    )
    return done.stdout.splitlines() if done.returncode == 0 else []


def _calls(log: Path, tool: str) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [e for e in events if e["event"] == "call" and e["tool"] == tool]


def _tool(kit: Toolkit, name: str) -> Tool:
    found = kit.get(name)
    assert isinstance(found, Tool), name
    return found


def _policy(kit: Toolkit, name: str) -> tuple[bool, bool, int]:
    """(needs approval, at most once, attempts of a call that needs no approval)."""
    t = _tool(kit, name)
    assert isinstance(t.needs_approval, bool)
    return t.needs_approval, t.at_most_once, t.retry_policy_for(gated=False).max_attempts


def _turns(*turns: Sequence[tuple[str, str, dict[str, Any]]]) -> str:
    return json.dumps({"turns": [[list(c) for c in turn] for turn in turns]})


@asynccontextmanager
async def _harness(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path, *servers: McpServerConfig
) -> AsyncIterator[Harness]:
    async with running(
        dev_env, task_queue, tmp_path / "ledger.jsonl", mcp_servers=servers
    ) as harness:
        yield harness


# ------------------------------------------------------------------ policy, no Temporal


async def test_untrusted_servers_gate_every_tool_and_never_retry(tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo")
    async with started(_notes(tmp_path / "n.jsonl"), _git(repo)) as toolsets:
        kit = toolsets.toolkit()
        assert len(kit) >= 10
        for t in kit:
            assert isinstance(t, Tool)
            assert (t.needs_approval, t.at_most_once, t.retry.max_attempts if t.retry else 0) == (
                True,
                True,
                1,
            ), t.name
        # What the servers claim is still shown to the model, as hints.
        commit = _tool(kit, "git__git_commit")
        assert (commit.annotations.read_only, commit.annotations.destructive) == (False, False)
        assert _tool(kit, "notes__stamp").annotations.read_only is True


async def test_trusted_servers_follow_their_annotations(tmp_path: Path) -> None:
    repo = _git_repo(tmp_path / "repo")
    notes = _notes(tmp_path / "n.jsonl", trust_annotations=True)
    async with started(notes, _git(repo, trust_annotations=True)) as toolsets:
        kit = toolsets.toolkit()
        # git_commit: "not destructive, not idempotent": no approval, at most once.
        assert _policy(kit, "git__git_commit") == (False, True, 1)
        # git_add: not destructive, idempotent: no approval, retried.
        assert _policy(kit, "git__git_add")[:2] == (False, False)
        assert _policy(kit, "git__git_add")[2] > 1
        # git_reset: destructive: approval.
        assert _policy(kit, "git__git_reset")[0] is True
        assert _policy(kit, "git__git_status")[:2] == (False, False)
        assert _policy(kit, "notes__stamp")[:2] == (False, False)  # believed
        assert _policy(kit, "notes__delete_note")[:2] == (True, True)


async def test_overrides_win_on_untrusted_and_trusted_servers(tmp_path: Path) -> None:
    overrides: dict[str, Any] = {
        "tool_policy": {
            "add": McpToolPolicy(needs_approval=False, idempotent=True),
            "delete_note": McpToolPolicy(needs_approval=False),
            "stamp": McpToolPolicy(needs_approval=True, idempotent=False),
        }
    }
    for trusted in (False, True):
        config = _notes(tmp_path / f"{trusted}.jsonl", trust_annotations=trusted, **overrides)
        async with started(config) as toolsets:
            kit = toolsets.toolkit()
            assert _policy(kit, "notes__add")[:2] == (False, False), trusted
            assert _policy(kit, "notes__delete_note")[:2] == (False, True), trusted
            assert _policy(kit, "notes__stamp") == (True, True, 1), trusted
            # No override: untrusted is gated, trusted follows `record`'s annotations.
            assert _policy(kit, "notes__record") == (not trusted, True, 1), trusted


def test_trust_annotations_in_toml(tmp_path: Path) -> None:
    path = tmp_path / "mcp.toml"
    path.write_text(
        '[servers.git]\ncommand = "mcp-server-git"\ntrust_annotations = true\n'
        '[servers.other]\ncommand = "x"\n'
    )
    git, other = load_mcp_config(path)
    assert (git.trust_annotations, other.trust_annotations) == (True, False)
    path.write_text('[servers.git]\ncommand = "x"\ntrust_annotations = "yes"\n')
    with pytest.raises(ConfigurationError, match="trust_annotations"):  # a TOML boolean, not text
        load_mcp_config(path)


async def _relabel(toolsets: McpToolsets, tool: str, *, read_only: bool) -> None:
    arguments = json.dumps({"tool": tool, "read_only": read_only})
    call = ToolCall(call_id=f"r-{tool}", name="notes__relabel", arguments=arguments)
    async with asyncio.timeout(30):
        events = [e async for e in toolsets.toolkit().run([call])]
        assert len(events) == 1 and isinstance(events[0], Output), events
        assert isinstance(events[0].result, Ok), events
        while not toolsets.stale:
            await asyncio.sleep(0.02)
    assert await toolsets.refresh() is True


@pytest.mark.parametrize("trusted", [True, False], ids=["trusted", "untrusted"])
async def test_list_changed_never_loosens_a_policy(tmp_path: Path, trusted: bool) -> None:
    # `relabel` itself runs without approval (the operator waives it) so the
    # server can change its annotations from inside the test.
    config = _notes(
        tmp_path / "n.jsonl",
        trust_annotations=trusted,
        tool_policy={"relabel": McpToolPolicy(needs_approval=False)},
    )
    async with started(config) as toolsets:
        before = toolsets.toolkit()
        assert _policy(before, "notes__delete_note")[:2] == (True, True)
        # A gated, at-most-once tool now claims to be read-only and idempotent...
        await _relabel(toolsets, "delete_note", read_only=True)
        after = toolsets.toolkit()
        assert _tool(after, "notes__delete_note").annotations.read_only is True  # listed anew
        assert _policy(after, "notes__delete_note") == (True, True, 1)  # ...and stays gated
        # ...also after a second change back and forth.
        await _relabel(toolsets, "delete_note", read_only=False)
        await _relabel(toolsets, "delete_note", read_only=True)
        assert _policy(toolsets.toolkit(), "notes__delete_note") == (True, True, 1)
        # Stricter is allowed: a read-only tool relabelled destructive becomes gated,
        # and relabelled read-only again it stays gated.
        assert _policy(toolsets.toolkit(), "notes__add")[:2] == (not trusted, not trusted)
        await _relabel(toolsets, "add", read_only=False)
        assert _policy(toolsets.toolkit(), "notes__add") == (True, True, 1)
        await _relabel(toolsets, "add", read_only=True)
        assert _policy(toolsets.toolkit(), "notes__add") == (True, True, 1)


# ------------------------------------------------------------------ conversations


async def test_a_lying_tool_is_gated_and_not_retried_by_default(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    async with _harness(dev_env, task_queue, tmp_path, _notes(log)) as h:
        workflow_id = await h.start(_turns([("s1", "notes__stamp", {"note": "paid"})]))
        approval = await h.wait_approval(workflow_id, "s1")
        assert _calls(log, "stamp") == []  # "read-only", yet waits for a person
        await h.conversations.approve(
            workflow_id, "s1", arguments_hash=approval.arguments_hash, decided_by="ops"
        )
        outputs = await h.wait_outputs(workflow_id, "s1")
    stamped = outputs["s1"]
    assert stamped.is_error and stamped.failure_kind == "interrupted", stamped
    assert len(_calls(log, "stamp")) == 1  # the write happened once and was not repeated


async def test_a_trusted_lying_tool_follows_its_annotations(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """The contrast: trusted, `stamp` runs without approval and is retried (twice sent)."""
    log = tmp_path / "notes.jsonl"
    server = _notes(log, trust_annotations=True)
    async with _harness(dev_env, task_queue, tmp_path, server) as h:
        workflow_id = await h.start(_turns([("s1", "notes__stamp", {"note": "paid"})]))
        outputs = await h.wait_outputs(workflow_id, "s1")
    assert not outputs["s1"].is_error, outputs["s1"]
    assert json.loads(outputs["s1"].content) == {"result": "stamped paid"}
    assert [c["key"] for c in _calls(log, "stamp")] == [f"{workflow_id}/s1"] * 2


async def test_git_commit_waits_for_approval_unless_the_server_is_trusted(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    repo = _git_repo(tmp_path / "repo")
    commit = {"repo_path": str(repo), "message": "first"}
    async with _harness(dev_env, task_queue, tmp_path, _git(repo)) as h:
        workflow_id = await h.start(_turns([("c1", "git__git_commit", commit)]))
        approval = await h.wait_approval(workflow_id, "c1")
        assert _commits(repo) == []  # "not destructive", yet nothing before approval
        await h.conversations.approve(
            workflow_id, "c1", arguments_hash=approval.arguments_hash, decided_by="ops"
        )
        outputs = await h.wait_outputs(workflow_id, "c1")
    assert not outputs["c1"].is_error, outputs["c1"]
    assert _commits(repo) == ["first"]

    trusted_repo = _git_repo(tmp_path / "trusted")
    commit = {"repo_path": str(trusted_repo), "message": "second"}
    server = _git(trusted_repo, trust_annotations=True)
    async with _harness(dev_env, f"{task_queue}-trusted", tmp_path, server) as h:
        workflow_id = await h.start(_turns([("c1", "git__git_commit", commit)]))
        outputs = await h.wait_outputs(workflow_id, "c1")  # no approval asked
    assert not outputs["c1"].is_error, outputs["c1"]
    assert _commits(trusted_repo) == ["second"]


async def test_a_list_changed_that_marks_a_gated_tool_read_only_does_not_ungate_it(
    dev_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    log = tmp_path / "notes.jsonl"
    server = _notes(log, trust_annotations=True)
    async with _harness(dev_env, task_queue, tmp_path, server) as h:
        workflow_id = await h.start(
            _turns(
                [("r1", "notes__relabel", {"tool": "delete_note", "read_only": True})],
                [("d1", "notes__delete_note", {"note": "x"})],
            )
        )
        await h.wait_outputs(workflow_id, "r1")
        approval = await h.wait_approval(workflow_id, "d1")
        assert h.plugin.mcp is not None
        listed = h.plugin.mcp.stats()["notes"]["tools/list"]
        assert listed == 2  # the change was seen and the tools listed again
        relabelled = _tool(h.plugin.mcp.toolkit(), "notes__delete_note")
        assert relabelled.annotations.read_only is True
        assert _calls(log, "delete_note") == []
        await h.conversations.approve(
            workflow_id, "d1", arguments_hash=approval.arguments_hash, decided_by="ops"
        )
        outputs = await h.wait_outputs(workflow_id, "d1")
    assert not outputs["d1"].is_error, outputs["d1"]
    assert len(_calls(log, "delete_note")) == 1
