"""Queue stats projection: task counts by queue, lane, state and backend profile, per
tenant and project (so a caller's counts are its own, DESIGN 12).

Maintained incrementally as deltas: a changed task row moves one count from its old key to
its new key; a batch folds its deltas before writing, so a hot counter row is written once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import msgspec

from projections.projection import Derived, Merge, Projection
from projections.task_summary import TASKS, TaskSummaryRow

StatsKey = tuple[str, str, str, str, str, str]
NO_PROFILE = ""


class StatsRow(msgspec.Struct, frozen=True):
    """A row of ``queue_stats``; as a change, ``task_count`` is a delta."""

    queue: str
    lane: str
    state: str
    backend_profile: str
    task_count: int
    tenant_id: str = ""
    project_id: str = ""


def stats_key(row: TaskSummaryRow) -> StatsKey:
    """The counter a task row belongs to."""
    return (row.queue, row.lane, row.state, row.backend_profile or NO_PROFILE, row.tenant_id,
            row.project_id)


def _row(key: StatsKey, delta: int) -> StatsRow:
    queue, lane, state, profile, tenant_id, project_id = key
    return StatsRow(queue, lane, state, profile, delta, tenant_id, project_id)


def add_delta(deltas: Counter[StatsKey], old: TaskSummaryRow | None,
              new: TaskSummaryRow | None) -> None:
    """Move the task's count from its old key to its new key."""
    old_key = stats_key(old) if old is not None else None
    new_key = stats_key(new) if new is not None else None
    if old_key == new_key:
        return
    if old_key is not None:
        deltas[old_key] -= 1
    if new_key is not None:
        deltas[new_key] += 1


def _deltas(before: TaskSummaryRow | None, after: TaskSummaryRow) -> Iterator[StatsRow]:
    """A task's move over a fold: the steps in between cancel out."""
    old_key, new_key = stats_key(before) if before is not None else None, stats_key(after)
    if old_key != new_key:
        if old_key is not None:
            yield _row(old_key, -1)
        yield _row(new_key, 1)


STATS = Projection("queue_stats", StatsRow, key=("queue", "lane", "state", "backend_profile",
                                                  "tenant_id", "project_id"),
                   merge=Merge.ADD, origin=Derived(TASKS, _deltas))
PROJECTIONS = (STATS,)
