"""SQL writers of the live projections: load current rows, write folded changes in bulk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from ledger.database import DbConnection
from ledger.sqlfile import load_queries
from ledger.streams import RecordedEntry
from projections import attempt_summary, commander, core_records, session_summary
from projections.attempt_summary import AttemptRow
from projections.core_records import RunRow
from projections.fold import Changes, Current, cancelled_attempts, fold, needed_rows
from projections.session_summary import SessionChanges, SessionRow, TurnRow
from projections.task_summary import COLUMNS, TaskSummaryRow

SQL = load_queries("projections", "projections.sql")
_json = msgspec.json.Encoder()
_object_decoder = msgspec.json.Decoder(dict[str, Any])
_ATTEMPT = COLUMNS.index("latest_attempt")
_RUN_JSON = tuple(core_records.RUN_COLUMNS.index(name)
                  for name in ("resource_bundle_ref", "job_plan", "assembly", "base"))


def json_text(value: Any) -> str | None:
    """The JSON text stored for a value (None stays NULL)."""
    return None if value is None else _json.encode(value).decode()


def row_from_record(record: asyncpg.Record) -> TaskSummaryRow:
    """Decode a ``task_summary`` record into its row type."""
    values = {name: record[name] for name in COLUMNS}
    attempt = values["latest_attempt"]
    values["latest_attempt"] = _object_decoder.decode(attempt) if attempt else None
    return TaskSummaryRow(**values)


def task_tuple(row: TaskSummaryRow) -> tuple[Any, ...]:
    """A task row as stored: JSON fields as text."""
    values = list(msgspec.structs.astuple(row))
    values[_ATTEMPT] = json_text(row.latest_attempt)
    return tuple(values)


def run_tuple(row: RunRow) -> tuple[Any, ...]:
    """A run row as stored: JSON fields as text."""
    values = list(msgspec.structs.astuple(row))
    for index in _RUN_JSON:
        values[index] = json_text(values[index])
    return tuple(values)


def run_from_record(record: asyncpg.Record) -> RunRow:
    """Decode a ``run_record`` record."""
    values = dict(record)
    for name in ("resource_bundle_ref", "job_plan", "assembly", "base"):
        values[name] = _object_decoder.decode(values[name]) if values[name] else None
    return RunRow(**values)


def columns_of(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    """Transpose rows into the per-column arrays ``unnest`` takes."""
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


async def load_tasks(
    conn: DbConnection, task_ids: Sequence[str]
) -> dict[str, TaskSummaryRow]:
    """Current summary rows of the given tasks."""
    if not task_ids:
        return {}
    records = await conn.fetch(SQL["load_tasks"], list(task_ids))
    return {r["task_id"]: row_from_record(r) for r in records}


async def load_current(conn: DbConnection, entries: list[RecordedEntry]) -> Current:
    """The existing rows the entries change."""
    needed = needed_rows(entries)
    tasks = await load_tasks(conn, needed.task_ids)
    attempt_ids = sorted({*needed.attempt_ids, *cancelled_attempts(entries, tasks)})
    attempts: dict[str, AttemptRow] = {}
    if attempt_ids:
        records = await conn.fetch(SQL["load_attempts"], attempt_ids)
        attempts = {r["attempt_id"]: AttemptRow(**dict(r)) for r in records}
    runs: dict[str, RunRow] = {}
    if needed.run_ids:
        records = await conn.fetch(SQL["load_runs"], needed.run_ids)
        runs = {r["run_id"]: run_from_record(r) for r in records}
    sessions: dict[str, SessionRow] = {}
    if needed.session_ids:
        records = await conn.fetch(SQL["load_sessions"], needed.session_ids)
        sessions = {r["session_id"]: SessionRow(**dict(r)) for r in records}
    turns: dict[str, TurnRow] = {}
    if needed.turn_ids:
        records = await conn.fetch(SQL["load_turns"], needed.turn_ids)
        turns = {r["runner_job_id"]: TurnRow(**dict(r)) for r in records}
    return Current(tasks, attempts, runs, sessions, turns)


async def write_session_changes(conn: DbConnection, changes: SessionChanges) -> None:
    """Upsert the session rows, turn rows and session read cursors a fold produced."""
    for query, rows, width in (
        ("upsert_sessions", changes.sessions.values(), len(session_summary.SESSION_COLUMNS)),
        ("upsert_turns", changes.turns.values(), len(session_summary.TURN_COLUMNS)),
        ("upsert_session_cursors", changes.cursors.values(), 4),
    ):
        tuples = [msgspec.structs.astuple(row) for row in rows]
        if tuples:
            await conn.execute(SQL[query], *columns_of(tuples, width))


async def write_changes(conn: DbConnection, changes: Changes) -> None:
    """Upsert folded changes: every projection row the fold produced, and stats deltas."""
    tasks = list(changes.tasks.values())
    if tasks:
        rows = [task_tuple(row) for row in tasks]
        await conn.execute(SQL["upsert_tasks"], *columns_of(rows, len(COLUMNS)))
        commander_rows = [msgspec.structs.astuple(commander.derive(r)) for r in tasks]
        await conn.execute(SQL["upsert_commander"], *columns_of(commander_rows, 6))
    if changes.contracts:
        await conn.execute(SQL["insert_contracts"], list(changes.contracts),
                           [json_text(c) for c in changes.contracts.values()])
    if changes.cursors:
        cursor_rows = [msgspec.structs.astuple(c) for c in changes.cursors.values()]
        await conn.execute(SQL["upsert_cursors"], *columns_of(cursor_rows, 4))
    stats = [(*key, delta) for key, delta in changes.stats.items() if delta != 0]
    if stats:
        await conn.execute(SQL["add_stats"], *columns_of(stats, 5))
    if changes.attempts:
        rows = [msgspec.structs.astuple(a) for a in changes.attempts.values()]
        await conn.execute(SQL["upsert_attempts"],
                           *columns_of(rows, len(attempt_summary.COLUMNS)))
    runs = list(changes.runs.values())
    if runs:
        await conn.execute(SQL["upsert_runs"],
                           *columns_of([run_tuple(r) for r in runs], len(core_records.RUN_COLUMNS)))
        commanded = [r for r in runs if r.command_id]  # a session run has no first command
        if commanded:
            await conn.execute(SQL["upsert_commands"], *columns_of(
                [core_records.command_tuple(r) for r in commanded], 6))
            await conn.execute(SQL["upsert_jobs"], *columns_of(
                [core_records.job_tuple(r) for r in commanded], 9))
    await write_session_changes(conn, changes.sessions)


async def project(conn: DbConnection, entries: list[RecordedEntry]) -> None:
    """Update every projection for freshly appended entries, in the caller's transaction."""
    await write_changes(conn, fold(await load_current(conn, entries), entries))
