"""The one fold that drives both the live projection update and the replay."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.events import TaskSubmitted
from ledger.streams import RecordedEntry
from ledger.task import STREAM_TYPE as TASK_STREAM
from projections import queue_stats, read_cursor, task_summary
from projections.queue_stats import StatsKey
from projections.read_cursor import ReadCursorRow
from projections.task_summary import TaskSummaryRow


@dataclass
class Changes:
    """Rows to write after folding a run of entries."""

    tasks: dict[str, TaskSummaryRow] = field(default_factory=dict)
    contracts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cursors: dict[tuple[str, str], ReadCursorRow] = field(default_factory=dict)
    stats: Counter[StatsKey] = field(default_factory=Counter)


def fold(current: dict[str, TaskSummaryRow], entries: Iterable[RecordedEntry]) -> Changes:
    """Fold entries over the current task rows (which it does not modify)."""
    changes = Changes()
    rows = dict(current)
    for entry in entries:
        if entry.stream_type != TASK_STREAM:
            continue
        event = entry.event
        if type(event) is TaskSubmitted:
            assert isinstance(event, TaskSubmitted)
            changes.contracts[entry.stream_id] = event.contract
        old = rows.get(entry.stream_id)
        new = task_summary.evolve(old, entry)
        if new is not old and new is not None:
            rows[entry.stream_id] = new
            changes.tasks[entry.stream_id] = new
            queue_stats.add_delta(changes.stats, old, new)
        cursor = read_cursor.evolve(entry)
        if cursor is not None:
            changes.cursors[(cursor.reader_id, cursor.task_id)] = cursor
    return changes


def existing_task_ids(entries: Iterable[RecordedEntry]) -> list[str]:
    """Task streams whose current row must be loaded before folding (not created here)."""
    created: set[str] = set()
    needed: set[str] = set()
    for entry in entries:
        if entry.stream_type != TASK_STREAM:
            continue
        if type(entry.event) is TaskSubmitted:
            created.add(entry.stream_id)
        elif entry.stream_id not in created:
            needed.add(entry.stream_id)
    return sorted(needed)
