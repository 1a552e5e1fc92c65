"""Toolkits: named sets of tools, composed safely, and the graceful executor."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from durable_tools.approvals import Decision, call_digest, plan_approvals
from durable_tools.arguments import DEFAULT_MAX_ARGUMENT_BYTES
from durable_tools.constructors import normalize_run
from durable_tools.descriptor import ToolDescriptor
from durable_tools.errors import DuplicateToolName, ToolNotFound
from durable_tools.executor import (
    ApprovalRequested,
    Output,
    PreparedCall,
    Progress,
    ToolEvent,
    execute_prepared,
    prepare_call,
)
from durable_tools.results import Failure, ToolCall
from durable_tools.tools import (
    AnyTool,
    ApprovalContext,
    Emit,
    Tool,
    ToolContext,
    ToolRun,
)

__all__ = ["Middleware", "Toolkit", "compose"]

Middleware = Callable[[Tool, ToolRun], ToolRun]
"""`middleware(tool, run) -> run`: wraps a local tool's run (logging, auth, metrics)."""


class Toolkit:
    """An ordered set of tools with unique names.

    Args:
        *tools: The tools. Names must be unique.
        label: Where the tools come from (shown in `DuplicateToolName`);
            default `"toolkit"`.
        sources: Where each tool came from, by tool name, when that is not
            `label` (`compose` passes the labels of the original toolkits, so
            a later collision still names them). Default: `label` for all.

    Raises:
        DuplicateToolName: Two tools share a name.

    Example:
        ```python
        kit = Toolkit(get_weather, send_email, label="app")
        async for event in kit.run(calls):
            ...
        ```
    """

    def __init__(
        self, *tools: AnyTool, label: str = "toolkit", sources: Mapping[str, str] | None = None
    ) -> None:
        self.label = label
        self._tools: dict[str, AnyTool] = {}
        self._sources: dict[str, str] = {}
        given = sources or {}
        for t in tools:
            source = given.get(t.name, label)
            if t.name in self._tools:
                raise DuplicateToolName(t.name, (self._sources[t.name], source))
            self._tools[t.name] = t
            self._sources[t.name] = source

    @classmethod
    def from_list(cls, tools: Iterable[AnyTool], *, label: str = "toolkit") -> Toolkit:
        """Build a toolkit from a runtime list; a later tool replaces an earlier one.

        Use it for lists you do not control (an MCP server's `tools/list`).

        Args:
            tools: The tools, in order.
            label: Source label.

        Returns:
            A new `Toolkit` (last-wins on duplicate names).
        """
        by_name: dict[str, AnyTool] = {}
        for t in tools:
            by_name.pop(t.name, None)
            by_name[t.name] = t
        return cls(*by_name.values(), label=label)

    @property
    def tools(self) -> Mapping[str, AnyTool]:
        """The tools by name, in insertion order (read-only view)."""
        return self._tools

    def source(self, name: str) -> str:
        """Where a tool came from.

        Args:
            name: The tool name.

        Returns:
            The label of the toolkit the tool was first put in.

        Raises:
            KeyError: No tool called `name`.
        """
        return self._sources[name]

    def get(self, name: str) -> AnyTool:
        """The tool called `name`.

        Args:
            name: The tool name.

        Returns:
            The tool, of any kind.

        Raises:
            ToolNotFound: No such tool.
        """
        try:
            return self._tools[name]
        except KeyError:
            raise ToolNotFound(f"no tool named {name!r} in toolkit {self.label!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[AnyTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"Toolkit({', '.join(self._tools)}, label={self.label!r})"

    def descriptors(self) -> list[ToolDescriptor]:
        """What the model sees: one descriptor per tool, in order."""
        return [t.descriptor() for t in self._tools.values()]

    def _derive(self, tools: Iterable[tuple[AnyTool, str]], label: str | None = None) -> Toolkit:
        return _assemble(tools, label or self.label)

    def namespace(self, prefix: str) -> Toolkit:
        """Rename every tool to `prefix__name`.

        Args:
            prefix: The namespace, e.g. `"github"`.

        Returns:
            A new toolkit labelled `prefix`.

        Raises:
            InvalidToolName: A prefixed name is not a valid tool name (too long).
        """
        return self._derive(
            ((t.renamed(f"{prefix}__{t.name}"), self._sources[t.name]) for t in self), label=prefix
        )

    def wrap(self, middleware: Middleware) -> Toolkit:
        """Wrap the run of every local tool; other kinds are left untouched.

        Args:
            middleware: `middleware(tool, run) -> run`.

        Returns:
            A new toolkit; descriptors are unchanged.
        """
        return self._derive(
            (
                (dataclasses.replace(t, run=middleware(t, t.run)) if isinstance(t, Tool) else t),
                self._sources[t.name],
            )
            for t in self
        )

    def with_run(self, name: str, run: Callable[..., Any]) -> Toolkit:
        """Swap the run of one local tool, keeping its descriptor identical.

        Args:
            name: The tool.
            run: `run(input)`, `run(input, emit)` or `run(input, emit, ctx)`.

        Returns:
            A new toolkit.

        Raises:
            ToolNotFound: No local tool called `name`.
        """
        target = self.get(name)
        if not isinstance(target, Tool):
            raise ToolNotFound(f"{name!r} is a {target.kind} tool; only local tools have a run")
        replaced = dataclasses.replace(target, run=normalize_run(run))
        return self._derive(
            ((replaced if t.name == name else t), self._sources[t.name]) for t in self
        )

    async def run(
        self,
        calls: Sequence[ToolCall],
        concurrency: int | None = None,
        *,
        decisions: Mapping[str, Decision] | None = None,
        transcript: Sequence[Any] = (),
        idempotency_key: Callable[[ToolCall], str] | None = None,
        deps: Any = None,
        max_argument_bytes: int = DEFAULT_MAX_ARGUMENT_BYTES,
    ) -> AsyncIterator[ToolEvent]:
        """Execute calls concurrently, yielding events as they happen.

        Every call ends with exactly one terminal event: an `Output`, or an
        `ApprovalRequested` for a call whose `needs_approval` holds and that
        has no valid decision in `decisions` (it is not run; answer it later
        by running it again with a decision, or with `results.denied`).
        Nothing a model can send makes this raise: unknown names, non-local
        kinds, bad arguments, exceptions and timeouts become `Failure`s.
        Runs are attempted once; retries are the durable loop's job.

        Args:
            calls: The calls of one turn (call ids should be unique).
            concurrency: Most runs in flight at once (`None` = unbounded).
            decisions: Decisions for approval-gated calls, by call id.
            transcript: Passed to `needs_approval` functions.
            idempotency_key: `key(call)` for `ToolContext.idempotency_key`
                (default: the call id).
            deps: `ToolContext.deps` for every run (default `None`).
            max_argument_bytes: Size limit of argument text (default 1 MiB).

        Yields:
            `Progress`, `Output` and `ApprovalRequested` events, in real time.

        Raises:
            Exception: Only what a run raises when its tool's
                `failure_mode == "raise"`.
        """
        loop = asyncio.get_running_loop()
        loop_thread = threading.get_ident()
        queue: asyncio.Queue[ToolEvent | BaseException | None] = asyncio.Queue()
        limit = asyncio.Semaphore(concurrency) if concurrency else None
        decided = decisions or {}
        key: Callable[[ToolCall], str] = idempotency_key or _call_id
        history = tuple(transcript)
        runnable: list[PreparedCall] = []

        for call in calls:
            prepared = prepare_call(self, call, max_argument_bytes=max_argument_bytes)
            if isinstance(prepared, Failure):
                yield Output(prepared)
                continue
            try:
                gated = prepared.tool.requires_approval(
                    prepared.input,
                    ApprovalContext(call_id=call.call_id, tool=call.name, transcript=history),
                )
            except Exception as exc:
                yield Output(
                    Failure(
                        call_id=call.call_id,
                        tool=call.name,
                        kind="execution_error",
                        reason=f"needs_approval raised {type(exc).__name__}: {exc}",
                    )
                )
                continue
            if gated:
                split = plan_approvals([call], lambda _call: True, decided)
                if split.pending:  # no decision, or one not bound to this call
                    yield ApprovalRequested(
                        call, call_digest(call.name, call.call_id, call.arguments)
                    )
                    continue
                if split.rejected:
                    yield Output(split.rejected[0])
                    continue
            runnable.append(prepared)

        def emitter(call: ToolCall) -> Emit:
            def emit(event: Any) -> None:
                item = Progress(call.call_id, call.name, event)
                if threading.get_ident() == loop_thread:
                    queue.put_nowait(item)
                else:
                    loop.call_soon_threadsafe(queue.put_nowait, item)

            return emit

        async def one(prepared: PreparedCall) -> None:
            call = prepared.call
            ctx = ToolContext(
                call_id=call.call_id, tool=call.name, idempotency_key=key(call), deps=deps
            )
            try:
                if limit is None:
                    result = await execute_prepared(prepared, context=ctx, emit=emitter(call))
                else:
                    async with limit:
                        result = await execute_prepared(prepared, context=ctx, emit=emitter(call))
            except Exception as exc:  # failure_mode="raise"
                queue.put_nowait(exc)
                return
            queue.put_nowait(Output(result))

        tasks = [asyncio.ensure_future(one(p)) for p in runnable]
        remaining = len(tasks)
        try:
            while remaining:
                item = await queue.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, Output):
                    remaining -= 1
                if item is not None:
                    yield item
        finally:
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.gather(*tasks, return_exceptions=True)


def _call_id(call: ToolCall) -> str:
    return call.call_id


def compose(*toolkits: Toolkit, label: str = "composed") -> Toolkit:
    """Combine toolkits; a name present in two of them is an error.

    Args:
        *toolkits: Toolkits to combine, in order.
        label: Label of the result.

    Returns:
        One toolkit with every tool.

    Raises:
        DuplicateToolName: Naming the colliding name and both sources (the
            labels of the toolkits it came from). Namespace one of them first.
    """
    return _assemble(((t, kit.source(t.name)) for kit in toolkits for t in kit), label)


def _assemble(tools: Iterable[tuple[AnyTool, str]], label: str) -> Toolkit:
    """A toolkit of `(tool, source)` pairs; a repeated name names both sources."""
    ordered: list[AnyTool] = []
    sources: dict[str, str] = {}
    for t, source in tools:
        if t.name in sources:
            raise DuplicateToolName(t.name, (sources[t.name], source))
        ordered.append(t)
        sources[t.name] = source
    return Toolkit(*ordered, label=label, sources=sources)
