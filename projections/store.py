"""SQL writers of the live projections: load current rows, write folded changes in bulk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import msgspec

from ledger.database import DbConnection
from ledger.sqlfile import load_queries
from ledger.streams import RecordedEntry
from projections import commander
from projections.fold import Changes, existing_task_ids, fold
from projections.task_summary import COLUMNS, TaskSummaryRow

SQL = load_queries("projections", "projections.sql")
_json = msgspec.json.Encoder()
_object_decoder = msgspec.json.Decoder(dict[str, Any])
_ATTEMPT = COLUMNS.index("latest_attempt")


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


async def write_changes(conn: DbConnection, changes: Changes) -> None:
    """Upsert folded changes: task rows, contracts, commander rows, cursors, stats deltas."""
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


async def project(conn: DbConnection, entries: list[RecordedEntry]) -> None:
    """Update every projection for freshly appended entries, in the caller's transaction."""
    current = await load_tasks(conn, existing_task_ids(entries))
    await write_changes(conn, fold(current, entries))
