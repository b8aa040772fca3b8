"""SQL writers of the projections: load current rows, write folded changes in bulk.

The same statements write the live tables and, during replay, the session's temporary
tables of the same names (``pg_temp`` comes first on the search path).
"""

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


def _columns(rows: Sequence[tuple[Any, ...]], width: int) -> list[list[Any]]:
    return [list(column) for column in zip(*rows, strict=True)] if rows else [[]] * width


def row_from_record(record: asyncpg.Record) -> TaskSummaryRow:
    """Decode a ``task_summary`` record into its row type."""
    values = dict(record)
    values["contract"] = _object_decoder.decode(values["contract"])
    attempt = values["latest_attempt"]
    values["latest_attempt"] = _object_decoder.decode(attempt) if attempt else None
    return TaskSummaryRow(**values)


async def load_tasks(
    conn: DbConnection, task_ids: Sequence[str]
) -> dict[str, TaskSummaryRow]:
    """Current summary rows of the given tasks."""
    if not task_ids:
        return {}
    records = await conn.fetch(SQL["load_tasks"], list(task_ids))
    return {r["task_id"]: row_from_record(r) for r in records}


async def write_changes(conn: DbConnection, changes: Changes) -> None:
    """Write folded changes: task rows, commander rows, cursors and stats deltas."""
    tasks = list(changes.tasks.values())
    if tasks:
        task_rows = []
        for row in tasks:
            values = list(msgspec.structs.astuple(row))
            values[COLUMNS.index("contract")] = _json.encode(row.contract).decode()
            attempt = row.latest_attempt
            values[COLUMNS.index("latest_attempt")] = (
                _json.encode(attempt).decode() if attempt is not None else None
            )
            task_rows.append(tuple(values))
        await conn.execute(SQL["upsert_tasks"], *_columns(task_rows, len(COLUMNS)))
        commander_rows = [msgspec.structs.astuple(commander.derive(r)) for r in tasks]
        await conn.execute(SQL["upsert_commander"], *_columns(commander_rows, 6))
    if changes.cursors:
        cursor_rows = [msgspec.structs.astuple(c) for c in changes.cursors.values()]
        await conn.execute(SQL["upsert_cursors"], *_columns(cursor_rows, 4))
    stats = [(*key, delta) for key, delta in changes.stats.items() if delta != 0]
    if stats:
        await conn.execute(SQL["add_stats"], *_columns(stats, 5))


async def project(conn: DbConnection, entries: list[RecordedEntry]) -> None:
    """Update every projection for freshly appended entries, in the caller's transaction."""
    current = await load_tasks(conn, existing_task_ids(entries))
    await write_changes(conn, fold(current, entries))
