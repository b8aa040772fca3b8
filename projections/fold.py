"""The one fold that drives both the live projection update and the replay."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from ledger.events import (
    AttemptReserved,
    RunCreated,
    SessionOpened,
    SessionTurnReserved,
    TaskCancelled,
    TaskSubmitted,
)
from ledger.run import STREAM_TYPE as RUN_STREAM
from ledger.session import STREAM_TYPE as SESSION_STREAM
from ledger.streams import RecordedEntry
from projections import (
    attempt_summary,
    core_records,
    queue_stats,
    read_cursor,
    session_summary,
    task_summary,
)
from projections.attempt_summary import ATTEMPTS
from projections.core_records import RUNS
from projections.projection import Rows
from projections.queue_stats import STATS, StatsKey
from projections.session_summary import SESSION_CURSORS, SESSIONS, TURNS, SessionChanges
from projections.task_summary import CONTRACTS, TASKS, ContractRow, TaskSummaryRow

Needed = dict[str, set[Any]]


def _latest_attempt_id(row: TaskSummaryRow | None) -> str | None:
    attempt = row.latest_attempt if row is not None else None
    return attempt["attemptId"] if attempt else None


def fold(current: Rows, entries: Iterable[RecordedEntry]) -> Rows:
    """Fold entries over the current rows (which it does not modify); return changed rows.

    Derived projections are not folded: they are computed from their source's changed rows.
    """
    changes = Rows()
    rows, attempts = dict(current.of(TASKS)), dict(current.of(ATTEMPTS))
    runs = dict(current.of(RUNS))
    sessions, turns = dict(current.of(SESSIONS)), dict(current.of(TURNS))
    session_changes = SessionChanges(changes.of(SESSIONS), changes.of(TURNS),
                                     changes.of(SESSION_CURSORS))
    changed_tasks, changed_attempts = changes.of(TASKS), changes.of(ATTEMPTS)
    changed_runs = changes.of(RUNS)
    stats: Counter[StatsKey] = Counter()
    for entry in entries:
        if entry.stream_type == SESSION_STREAM:
            session_summary.fold_entry(sessions, turns, session_changes, entry)
            continue
        if entry.stream_type == RUN_STREAM:
            run = core_records.evolve(runs.get(entry.stream_id), entry)
            if run is not None:
                runs[entry.stream_id] = changed_runs[entry.stream_id] = run
            continue
        event = entry.event
        if type(event) is TaskSubmitted:
            assert isinstance(event, TaskSubmitted)
            changes.put(CONTRACTS, ContractRow(entry.stream_id, event.contract))
        old = rows.get(entry.stream_id)
        attempt_id = attempt_summary.attempt_id_of(entry)
        if attempt_id is None and type(event) is TaskCancelled:
            attempt_id = _latest_attempt_id(old)
        new = task_summary.evolve(old, entry)
        if new is not old and new is not None:
            rows[entry.stream_id] = changed_tasks[entry.stream_id] = new
            queue_stats.add_delta(stats, old, new)
        if attempt_id is not None:
            before = attempts.get(attempt_id)
            after = attempt_summary.evolve(before, entry)
            if after is not None and after is not before:
                attempts[attempt_id] = changed_attempts[attempt_id] = after
        cursor = read_cursor.evolve(entry)
        if cursor is not None:
            changes.put(read_cursor.CURSORS, cursor)
    for delta in queue_stats.delta_rows(stats):
        changes.put(STATS, delta)
    return changes


def needed_rows(entries: Iterable[RecordedEntry], loaded: Rows) -> Needed:
    """Keys of the rows to load before folding, per table: rows the entries change but do
    not create. Given the rows loaded so far, it adds those that depend on them (the
    attempt a cancel closes is the latest attempt of the loaded task row).
    """
    created: set[str] = set()
    tasks: set[str] = set()
    attempts: set[str] = set()
    runs: set[str] = set()
    sessions: set[str] = set()
    turns: set[str] = set()
    loaded_tasks = loaded.of(TASKS)
    for entry in entries:
        kind = type(entry.event)
        if entry.stream_type == SESSION_STREAM:
            if kind is SessionOpened:
                created.add(entry.stream_id)
            elif entry.stream_id not in created:
                sessions.add(entry.stream_id)
            turn_id = session_summary.turn_id_of(entry)
            if kind is SessionTurnReserved and turn_id is not None:
                created.add(turn_id)
            elif turn_id is not None and turn_id not in created:
                turns.add(turn_id)
            continue
        if kind in (TaskSubmitted, RunCreated):
            created.add(entry.stream_id)
            continue
        if kind is AttemptReserved:
            created.add(entry.event.attempt_id)
        if entry.stream_id not in created:
            (runs if entry.stream_type == RUN_STREAM else tasks).add(entry.stream_id)
        attempt_id = attempt_summary.attempt_id_of(entry)
        if attempt_id is not None and attempt_id not in created:
            attempts.add(attempt_id)
        if kind is TaskCancelled:
            cancelled = _latest_attempt_id(loaded_tasks.get(entry.stream_id))
            if cancelled is not None:
                attempts.add(cancelled)
    return {TASKS.table: tasks, ATTEMPTS.table: attempts, RUNS.table: runs,
            SESSIONS.table: sessions, TURNS.table: turns}
