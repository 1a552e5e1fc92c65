"""The report of `scale.py`: each figure for ours and bare, its ratio, and the goal it meets.

`rows_of` turns two measured phases into rows (issue 26's goals beside each
ratio), `print_rows` prints them as a table, `print_details` what a phase
measured beyond the table (stages, fallbacks, failures, memory).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scale import Phase


@dataclass
class Row:
    """One line of the report: a figure for ours and bare, and the goal on their ratio."""

    name: str
    ours: float | None
    bare: float | None
    goal: str = ""  # ">= 0.9" / "<= 1.2" on the ratio; "ours <= 1.2" / "ours == 0" on ours
    fmt: str = "{:.1f}"


def met(row: Row) -> tuple[str, str]:
    ratio = row.ours / row.bare if row.ours is not None and row.bare else None
    shown = "" if ratio is None else f"{ratio:.2f}x"
    if not row.goal:
        return shown, ""
    target, op, bound = (
        row.goal.rsplit(" ", 2) if row.goal.startswith("ours") else ("", *row.goal.split())
    )
    value = row.ours if target else ratio
    if value is None:
        return shown, "not measured"
    ok = (
        value >= float(bound)
        if op == ">="
        else value <= float(bound)
        if op == "<="
        else value == float(bound)
    )
    return shown, "met" if ok else "MISSED"


def rows_of(ours: Sequence[Phase], bare: Sequence[Phase], turns: int) -> list[Row]:
    """The rows of one size, from its rounds (one phase per side per round; bare may be empty).

    With more than one round, calls/s and worker CPU per tool call are each
    side's median over its rounds (one round's ratio moved from 1.02x to
    1.18x between quiet runs at 500), conversations finished the fewest of a
    round, lost and duplicated calls the sum, RSS figures the worst round.
    """
    rounds = f", median of {len(ours)}" if len(ours) > 1 else ""

    def median(phases: Sequence[Phase], value: Callable[[Phase], float | None]) -> float | None:
        found = [v for v in (value(p) for p in phases) if v is not None]
        return statistics.median(found) if found else None

    def worst(phases: Sequence[Phase], value: Callable[[Phase], float]) -> float | None:
        return max(value(p) for p in phases) if phases else None

    def total(phases: Sequence[Phase], value: Callable[[Phase], int]) -> float | None:
        return sum(value(p) for p in phases) if phases else None

    def rate(p: Phase) -> float:
        return p.calls / p.calls_seconds

    def per_call(p: Phase) -> float | None:
        return p.worker_cpu / p.calls * 1000 if p.calls else None

    seconds = [max(p.seconds for p in side) if side else 0.0 for side in (ours, bare)]
    rows = [
        Row(f"tool calls/s{rounds}", median(ours, rate), median(bare, rate), ">= 0.9"),
        Row(
            f"worker CPU per tool call (ms){rounds}",
            median(ours, per_call),
            median(bare, per_call),
            "<= 1.2",
            "{:.2f}",
        ),
        Row(
            f"conversations finished in {seconds[0]:.0f} s / {seconds[1]:.0f} s",
            min(p.finished for p in ours),
            min(p.finished for p in bare) if bare else None,
            ">= 0.9",
            "{:.0f}",
        ),
        Row(
            "tool calls lost (histories)",
            total(ours, lambda p: p.checked.lost),
            total(bare, lambda p: p.checked.lost),
            "ours == 0",
            "{:.0f}",
        ),
        Row(
            "tool calls duplicated (histories)",
            total(ours, lambda p: p.checked.duplicated),
            total(bare, lambda p: p.checked.duplicated),
            "ours == 0",
            "{:.0f}",
        ),
        Row("worker RSS peak (MB)", worst(ours, _peak), worst(bare, _peak)),
        Row(
            "worker RSS after drain + gc / at start",
            worst(ours, _kept),
            worst(bare, _kept),
            "ours <= 1.2",
            "{:.2f}",
        ),
    ]
    return rows


def _peak(p: Phase) -> float:
    return p.rss_peak


def _kept(p: Phase) -> float:
    return p.rss_after / p.rss_start


def print_rows(rows: Sequence[Row]) -> None:
    for row in rows:
        ratio, verdict = met(row)
        shown = ["n/a" if v is None else row.fmt.format(v) for v in (row.ours, row.bare)]
        print(f"  {row.name:<50} {shown[0]:>9} {shown[1]:>9} {ratio:>7}  {row.goal:<12} {verdict}")


def print_details(phase: Phase) -> None:
    c = phase.checked
    drained = (
        "not drained" if phase.drain_seconds is None else f"drained in {phase.drain_seconds:.0f} s"
    )
    print(
        f"    {phase.side} N={phase.n}: {phase.calls} tool calls in {phase.calls_seconds:.1f} s, "
        f"all closed or window at {phase.seconds:.1f} s, "
        f"{drained}; closed {dict(c.closed)}; calls made {c.calls}, answered once {c.answered}, "
        f"lost {c.lost}, duplicated {c.duplicated}, unanswered in running {c.unanswered_open}, "
        f"unknown {c.unknown}; activities timed out: tool {c.tool_timeouts}, "
        f"model {c.model_timeouts}; "
        f"tools run more than once {phase.reran}"
    )
    server = phase.server_ms_per_call
    server = float("nan") if server is None else server
    print(
        f"      worker CPU {phase.worker_cpu:.1f} s, server CPU {phase.server_cpu:.1f} s "
        f"({server:.2f} ms/call), other processes {phase.other_cpu:.1f} s; "
        f"RSS ready {phase.rss_ready:.0f} MB, start {phase.rss_start:.0f}, "
        f"peak {phase.rss_peak:.0f}, after drain + gc {phase.rss_after:.0f}; "
        f"allocator {phase.allocator or 'unknown'}"
    )
    if c.completed_turns:
        print(
            f"      history {c.bytes / c.completed_turns:,.0f} B per tool turn "
            f"({c.events / c.completed_turns:.1f} events)"
        )
    if phase.requests:
        print(f"      server requests in the span: {dict(phase.requests)}")
    print(f"      activity failures: {dict(phase.failures) or 'none'}")
    if phase.gc:  # since the worker started: warm-up and the phase
        print(f"      garbage collections, count and seconds (first worker): {phase.gc}")
    sent = sum(phase.queries.values())
    per_call = f", {sent / phase.calls:.3f} per tool call" if phase.calls and sent else ""
    print(f"      queries the activities sent: {dict(phase.queries) or 'none'}{per_call}")
    if any(phase.fallback.values()):
        print(f"      fallback queries bounded (16 in flight per process): {dict(phase.fallback)}")
    if phase.side == "ours":
        shown = {k: v for k, v in phase.cache.items() if v}
        print(f"      transcript cache: {shown}")
        print(f"      kept for conversations after the drain (first worker): {phase.held}")
    if phase.heap_after:
        shown = ", ".join(
            f"{k} {phase.heap_start.get(k, float('nan')):,} -> {v:,}"
            for k, v in phase.heap_after.items()
        )
        print(f"      heap at start -> after drain + gc (first worker): {shown}")
    for line in phase.grown:
        print(f"      grew since start: {line}")
    if c.stages:
        shown = ", ".join(f"{k} {v:.0f}" for k, v in sorted(c.stage_ms().items()))
        print(f"      mean ms per stage (event timestamps): {shown}")
    if phase.warnings:
        print(f"      SDK warnings: {dict(phase.warnings.most_common(8))}")
