"""The one fold that drives both the live projection update and the replay."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
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
from projections.attempt_summary import AttemptRow
from projections.core_records import RunRow
from projections.queue_stats import StatsKey
from projections.read_cursor import ReadCursorRow
from projections.session_summary import SessionChanges, SessionRow, TurnRow
from projections.task_summary import TaskSummaryRow


@dataclass
class Current:
    """The rows a fold starts from (those the entries do not create themselves)."""

    tasks: dict[str, TaskSummaryRow] = field(default_factory=dict)
    attempts: dict[str, AttemptRow] = field(default_factory=dict)
    runs: dict[str, RunRow] = field(default_factory=dict)
    sessions: dict[str, SessionRow] = field(default_factory=dict)
    turns: dict[str, TurnRow] = field(default_factory=dict)


@dataclass
class Changes:
    """Rows to write after folding a run of entries."""

    tasks: dict[str, TaskSummaryRow] = field(default_factory=dict)
    contracts: dict[str, dict[str, Any]] = field(default_factory=dict)
    cursors: dict[tuple[str, str], ReadCursorRow] = field(default_factory=dict)
    stats: Counter[StatsKey] = field(default_factory=Counter)
    attempts: dict[str, AttemptRow] = field(default_factory=dict)
    runs: dict[str, RunRow] = field(default_factory=dict)
    sessions: SessionChanges = field(default_factory=SessionChanges)


def _latest_attempt_id(row: TaskSummaryRow | None) -> str | None:
    attempt = row.latest_attempt if row is not None else None
    return attempt["attemptId"] if attempt else None


def fold(current: Current, entries: Iterable[RecordedEntry]) -> Changes:
    """Fold entries over the current rows (which it does not modify)."""
    changes = Changes()
    rows, attempts, runs = dict(current.tasks), dict(current.attempts), dict(current.runs)
    sessions, turns = dict(current.sessions), dict(current.turns)
    for entry in entries:
        if entry.stream_type == SESSION_STREAM:
            session_summary.fold_entry(sessions, turns, changes.sessions, entry)
            continue
        if entry.stream_type == RUN_STREAM:
            run = core_records.evolve(runs.get(entry.stream_id), entry)
            if run is not None:
                runs[entry.stream_id] = changes.runs[entry.stream_id] = run
            continue
        event = entry.event
        if type(event) is TaskSubmitted:
            assert isinstance(event, TaskSubmitted)
            changes.contracts[entry.stream_id] = event.contract
        old = rows.get(entry.stream_id)
        attempt_id = attempt_summary.attempt_id_of(entry)
        if attempt_id is None and type(event) is TaskCancelled:
            attempt_id = _latest_attempt_id(old)
        new = task_summary.evolve(old, entry)
        if new is not old and new is not None:
            rows[entry.stream_id] = changes.tasks[entry.stream_id] = new
            queue_stats.add_delta(changes.stats, old, new)
        if attempt_id is not None:
            before = attempts.get(attempt_id)
            after = attempt_summary.evolve(before, entry)
            if after is not None and after is not before:
                attempts[attempt_id] = changes.attempts[attempt_id] = after
        cursor = read_cursor.evolve(entry)
        if cursor is not None:
            changes.cursors[(cursor.reader_id, cursor.task_id)] = cursor
    return changes


@dataclass
class Needed:
    """Ids of the rows a fold of some entries must load first."""

    task_ids: list[str]
    attempt_ids: list[str]
    run_ids: list[str]
    session_ids: list[str] = field(default_factory=list)
    turn_ids: list[str] = field(default_factory=list)


def needed_rows(entries: Iterable[RecordedEntry]) -> Needed:
    """What to load before folding: rows the entries change but do not create."""
    created: set[str] = set()
    tasks: set[str] = set()
    attempts: set[str] = set()
    runs: set[str] = set()
    sessions: set[str] = set()
    turns: set[str] = set()
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
    return Needed(sorted(tasks), sorted(attempts), sorted(runs), sorted(sessions),
                  sorted(turns))


def cancelled_attempts(entries: Iterable[RecordedEntry],
                       tasks: dict[str, TaskSummaryRow]) -> list[str]:
    """Latest attempts of loaded tasks that a cancel in the entries may close."""
    ids = {_latest_attempt_id(tasks.get(e.stream_id)) for e in entries
           if type(e.event) is TaskCancelled}
    return sorted(i for i in ids if i is not None)
