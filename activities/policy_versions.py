"""Policy versions a worker loads by version: compiled once, read from the run, checked by digest.

A live change (`set_policy`, docs/policies.md "Live change") records the
policy's document once, with the signal; the activities that evaluate it
(`model.turn`, `policy.reevaluate-v1`) are sent a `PolicyRef` (name and
version, the document's RFC 8785 + SHA-256 digest), not the document, so
64 KiB of rules are not recorded again in every model turn's input.

`PolicyVersions.load` finds the document of a version, first found first:

1. the worker's compiled policies, by version (content-addressed: one
   compiled version serves every conversation that installed it);
2. the run in this process (`LiveRun.live_policy`, durable_tools.live_runs),
   as the `agent_config` and `tool_call` reads do;
3. the `policy_version` query to the run, bounded by `query_timeout`
   seconds (default `POLICY_QUERY_TIMEOUT`).

Whatever it reads, it digests again and compares with the version asked
for: a document whose digest is another is never used. A version it cannot
load or verify fails closed, as a rule that does not compile does: every
call the policy sees needs approval, and the verdict's `error` says why
(`UnloadedPolicy`); calls already waiting are not decided again
(`policy.reevaluate-v1` fails, and they wait as before). Inputs recorded
before versions were loaded, with the whole document, are checked the
same way.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import timedelta
from typing import Any, Final

from temporalio import activity

from durable_tools._wire import POLICY_VERSION_QUERY
from durable_tools.handler_input import clean_text
from durable_tools.live_runs import LiveRun, Reads
from durable_tools.policies import MAX_ERROR_CHARS, Policy, PolicyInput
from durable_tools.policy_document import PolicyDocument, PolicyRef, document_version
from durable_tools.policy_verdict import PolicyVerdict

__all__ = ["POLICY_QUERY_TIMEOUT", "PolicyVersions", "UnloadedPolicy"]

POLICY_QUERY_TIMEOUT: Final[float] = 10.0
"""Seconds the `policy_version` query may take, waiting for a query slot included."""

_MAX_VERSIONS: Final[int] = 256
"""Compiled versions a worker keeps (least recently used go first)."""

_DOCUMENT_ANSWER: Any = PolicyDocument | None

_WHERE: Final = {
    "recorded": "recorded in the activity's input",
    "live": "the run in this process holds",
    "query": "the run answered",
}


class UnloadedPolicy(Policy):
    """A policy version the worker could not load or verify: it fails closed.

    Every call it sees needs approval (from the tool's own approvers, else
    anyone who may decide); its verdict names the version and gives the
    reason in `error`, as a rule that does not compile does.

    Args:
        ref: The version asked for.
        error: Why it could not be used (one line).
        transient: Whether a later attempt may load it (the query failed or
            timed out), rather than never (a digest that is another, a run
            that does not hold the version).
    """

    def __init__(self, ref: PolicyRef, error: str, *, transient: bool = False) -> None:
        # No rules to compile: `Policy.__init__` is not for this.
        self.name = clean_text(ref.name, 100) or "(unknown)"
        self.version = clean_text(ref.version, 100)
        self.document = PolicyDocument(name=self.name, rules=[])
        self.rules = ()
        self.default = "approve"
        self.text = ""
        self.error = clean_text(error, MAX_ERROR_CHARS)
        self.transient = transient
        self._programs = {}
        self._errors = {}

    def __repr__(self) -> str:
        return f"UnloadedPolicy({self.name!r}, {self.version[:19]})"

    def decide(self, facts: PolicyInput, *, tool_approvers: Sequence[str] = ()) -> PolicyVerdict:
        """An `approve` verdict with `error` set, for every call (fail closed)."""
        return PolicyVerdict(
            policy=self.name,
            version=self.version,
            outcome="approve",
            approvers=list(tool_approvers),
            error=self.error,
        )


class PolicyVersions:
    """A worker's policy versions: compiled once each, loaded by version, checked by digest.

    Args:
        reads: The worker's counters of in-process reads and queries.
        slot: Holds one of the process's query slots while a query runs
            (`FallbackQueries.slot`, activity_base.py).
        limit: Compiled versions kept (default 256).

    Attributes:
        query_timeout: Seconds the `policy_version` query may take (default
            `POLICY_QUERY_TIMEOUT`); past it the version fails closed.
        loaded: How versions were found since the worker started, by where:
            `compiled`, `live`, `query`, `recorded` (an older input's
            document), `refused` (not loaded or not verified).
    """

    def __init__(
        self,
        reads: Reads,
        slot: Callable[[str], AbstractAsyncContextManager[None]],
        limit: int = _MAX_VERSIONS,
    ) -> None:
        self.query_timeout = POLICY_QUERY_TIMEOUT
        self.loaded: dict[str, int] = {}
        self._reads = reads
        self._slot = slot
        self._limit = limit
        self._compiled: OrderedDict[str, Policy] = OrderedDict()

    def clear(self) -> None:
        """Forget every compiled version (the next use loads it again)."""
        self._compiled.clear()

    def _count(self, where: str) -> None:
        self.loaded[where] = self.loaded.get(where, 0) + 1

    def _compile(self, document: PolicyDocument) -> Policy:
        """The `Policy` of a verified document, kept by its version.

        Rules that do not compile fail closed (`check=False`): the document
        came from a client at run time, and the workflow could not compile it.
        """
        policy = Policy.from_document(document, check=False)
        self._compiled[policy.version] = policy
        self._compiled.move_to_end(policy.version)
        while len(self._compiled) > self._limit:
            self._compiled.popitem(last=False)
        return policy

    def _verified(self, ref: PolicyRef, document: PolicyDocument, where: str) -> Policy:
        """`document` compiled, if its digest is `ref.version`; else an `UnloadedPolicy`.

        `where`: `recorded`, `live` or `query` (counted in `loaded`).
        """
        try:
            digest = document_version(document)
        except Exception as exc:  # text that does not encode: never usable
            digest = f"(none: {type(exc).__name__})"
        if digest != ref.version:
            self._count("refused")
            activity.logger.warning(
                "policy %s %s refused: the document (%s) digests to %s",
                ref.name[:100],
                ref.version[:19],
                where,
                digest[:19],
            )
            return UnloadedPolicy(
                ref,
                f"policy {ref.name!r} {ref.version[:80]} refused, every call needs approval: "
                f"the document {_WHERE[where]} digests to {digest[:80]}",
            )
        self._count(where)
        return self._compile(document)

    async def load(
        self,
        ref: PolicyRef,
        *,
        workflow_id: str,
        run_id: str,
        live: LiveRun | None,
        recorded: PolicyDocument | None = None,
    ) -> Policy:
        """The policy of version `ref.version`, or an `UnloadedPolicy` saying why not.

        Args:
            ref: The version (from the activity's input).
            workflow_id: The conversation (to query).
            run_id: The run that installed it (to query).
            live: The run, when this process holds it.
            recorded: The document an input recorded before versions were
                loaded sent whole (read when the version is not compiled,
                and checked like any other).

        Returns:
            The compiled policy; never raises for a version it cannot load
            (fails closed instead), only if the activity is cancelled.
        """
        policy = self._compiled.get(ref.version)
        if policy is not None:
            self._compiled.move_to_end(ref.version)
            self._count("compiled")
            return policy
        if recorded is not None:
            return self._verified(ref, recorded, "recorded")
        document = live.live_policy(ref.version) if live is not None else None
        if document is not None:
            self._reads.local += 1
            return self._verified(ref, document, "live")
        transient = True
        try:
            document = await self._query(workflow_id, run_id, ref.version)
        except TimeoutError:
            problem = f"the {POLICY_VERSION_QUERY} query took over {self.query_timeout:g} s"
        except Exception as exc:
            problem = f"the {POLICY_VERSION_QUERY} query failed: {type(exc).__name__}: {exc}"
        else:
            if document is not None:
                return self._verified(ref, document, "query")
            problem, transient = "the run does not hold that version", False
        self._count("refused")
        activity.logger.warning(
            "policy %s %s not loaded: %s", ref.name, ref.version[:19], problem[:300]
        )
        return UnloadedPolicy(
            ref,
            f"policy {ref.name!r} {ref.version[:80]} not loaded, every call needs approval: "
            f"{problem}",
            transient=transient,
        )

    async def _query(self, workflow_id: str, run_id: str, version: str) -> PolicyDocument | None:
        """The run's answer to `policy_version`, bounded by `query_timeout` seconds."""
        self._reads.queries += 1
        handle = activity.client().get_workflow_handle(workflow_id, run_id=run_id or None)
        async with asyncio.timeout(self.query_timeout):
            async with self._slot(POLICY_VERSION_QUERY):
                answer: PolicyDocument | None = await handle.query(
                    POLICY_VERSION_QUERY,
                    version,
                    result_type=_DOCUMENT_ANSWER,
                    rpc_timeout=timedelta(seconds=self.query_timeout),
                )
        return answer
