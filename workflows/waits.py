"""Durable waits of `AgentWorkflow`, and when a waiting run moves to a new worker version.

A `Waits` decides once per run whether the run follows new worker versions
at its durable waits (FOLLOW_VERSIONS_PATCH), says when such a move is due,
and waits durably (`wait`): until a condition holds or a deadline passes,
with its timer cut into slices where a run must notice a new version.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from datetime import datetime, timedelta

from temporalio import workflow

__all__ = ["FIRST_TASK_EVENTS", "FOLLOW_VERSIONS_PATCH", "MOVED", "Moved", "Waits", "seconds_text"]

FOLLOW_VERSIONS_PATCH = "follow-versions-at-waits"
"""Patch id: histories recorded before it continued as new only after a model turn.

With the marker (recorded at a run's first durable wait on a versioned
worker), a run that waits durably (idle, an approval, a question, a sleep, a
pause, `model_failed`) continues as new at that wait when its target worker
version changes or Temporal suggests it, carrying what waits
(`CarriedState.turn`, `model_failed`, `idle_until`), and checks every
`ConversationOptions.version_check_interval` seconds while it waits.
"""

FIRST_TASK_EVENTS = 3
"""History length during a run's first workflow task (started, task scheduled, task started).

A run does not continue as new at a wait in its first task: a run that a
move started waits for its next task before it moves again (no loop of runs
if the server still reports a version change).
"""


def seconds_text(value: float) -> str:
    """A duration for people: `7 days`, `2 hours`, `90 s`."""
    if value >= 86400 and value % 86400 == 0:
        return f"{value / 86400:g} days"
    if value >= 3600 and value % 3600 == 0:
        return f"{value / 3600:g} hours"
    return f"{value:g} s"


class Waits:
    """Durable waits of one run, and whether the run moves to a new version at them.

    Args:
        version_check_interval: Seconds between checks for a new version
            while a run that follows versions waits.
        embedded: The loop runs inside another workflow (it never moves).
    """

    def __init__(self, version_check_interval: float | None, embedded: bool) -> None:
        self._interval = version_check_interval
        self._embedded = embedded
        # `None` until the run's first durable wait decides it.
        self.follow: bool | None = None
        # Set when a continue-as-new did not fit: the run stays, never moves.
        self.carry_too_large = False

    def follows_versions(self) -> bool:
        """Whether this run continues as new at its durable waits (decided once per run).

        Only on a versioned worker (a pinned run can move to a new version),
        and only in histories with FOLLOW_VERSIONS_PATCH (whose marker is
        recorded here, at the run's first durable wait).
        """
        if self.follow is None:
            self.follow = (
                not self._embedded
                and workflow.info().get_current_deployment_version() is not None
                and workflow.patched(FOLLOW_VERSIONS_PATCH)
            )
        return self.follow

    def move_due(self) -> bool:
        """A wait's condition: continue as new now (a new target version, or Temporal says so).

        Never in a run's first workflow task (a run a move started waits for
        its next task), never when the carried state was too large.
        """
        if not self.follow or self.carry_too_large:
            return False
        info = workflow.info()
        return info.get_current_history_length() > FIRST_TASK_EVENTS and (
            info.is_target_worker_deployment_version_changed()
            or info.is_continue_as_new_suggested()
        )

    async def wait(
        self, condition: Callable[[], bool], until: datetime | None, summary: str
    ) -> None:
        """A durable wait: until `condition` holds, or `until` passes (`TimeoutError`).

        `until` `None`: no deadline. A deadline already past (a wait carried
        across continue-as-new) raises at once unless `condition` holds,
        without a timer. In a run that follows new worker versions
        (`follows_versions`) the deadline's timer is cut into slices of
        `ConversationOptions.version_check_interval` seconds: Temporal tells a
        run its target version changed only in a workflow task, and a slice
        that ends is one (a wait with no deadline gets slices too). A wait
        that ends early cancels its timer as before, so slices cost history
        events only while nothing else happens. Elsewhere (histories before
        FOLLOW_VERSIONS_PATCH, unversioned workers) one timer, as before.
        """
        interval = self._interval if self.follows_versions() else None
        while True:
            left = None if until is None else until - workflow.now()
            if left is not None and left <= timedelta(0):
                if condition():
                    return
                raise builtins.TimeoutError
            step = left
            if interval is not None and (step is None or step > timedelta(seconds=interval)):
                step = timedelta(seconds=interval)
            if step is None:
                await workflow.wait_condition(condition)
                return
            try:
                await workflow.wait_condition(condition, timeout=step, timeout_summary=summary)
                return
            except builtins.TimeoutError:
                if step == left:
                    raise  # the deadline itself
                # A slice ended in a workflow task of its own: a move may be due now.
                if condition():
                    return


class Moved:
    """The sentinel a wait returns when its call moves to the next run (`MOVED`)."""


MOVED = Moved()
