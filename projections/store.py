"""The live projection writer: load the rows entries change, fold, the upserts (one per table)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg

from ledger.database import DbConnection
from ledger.streams import RecordedEntry
from ledger.together import Statement
from projections.fold import fold, needed_rows
from projections.projection import Fold, Projection, Rows, json_text
from projections.registry import REGISTRY
from projections.task_summary import TASKS, TaskSummaryRow

__all__ = ["change_statements", "committed_task", "json_text", "load_current",
           "plan_projection", "row_from_record"]


def row_from_record(record: asyncpg.Record) -> TaskSummaryRow:
    """Decode a ``task_summary`` record (``latest_attempt`` as text) into its row type."""
    return TASKS.from_record(record)


def committed_task(task_id: str, entries: list[RecordedEntry]) -> TaskSummaryRow | None:
    """The summary row a new task's committed entries fold to: the row the same transaction
    wrote, known without reading it back (None when the entries do not create it). Only the
    task summary's own fold runs (as :func:`fold` applies it), none of the other tables'."""
    how = TASKS.origin
    assert isinstance(how, Fold)
    empty = Rows()
    row: TaskSummaryRow | None = None
    for entry in entries:
        if (entry.stream_type == how.stream
                and (how.events is None or type(entry.event) in how.events)
                and how.key_of(entry, empty) == task_id):
            after = how.evolve(row, entry)
            row = row if after is None else after
    return row


async def _load(conn: DbConnection, projection: Projection[Any], keys: Sequence[Any],
                into: Rows) -> None:
    if len(projection.key) == 1:
        arrays = [list(keys)]
    else:
        arrays = [list(column) for column in zip(*keys, strict=True)]
    rows = into.of(projection)
    for record in await conn.fetch(projection.load_sql, *arrays):
        row = projection.from_record(record)
        rows[projection.key_of(row)] = row


async def load_current(conn: DbConnection, entries: list[RecordedEntry]) -> Rows:
    """The existing rows the entries change (and the rows those depend on)."""
    current = Rows()
    asked: dict[str, set[Any]] = {}
    while True:
        needed = {table: keys - asked.get(table, set())
                  for table, keys in needed_rows(entries, current).items()}
        if not any(needed.values()):
            return current
        for projection in REGISTRY:
            keys = needed.get(projection.table)
            if keys:
                asked.setdefault(projection.table, set()).update(keys)
                await _load(conn, projection, sorted(keys), current)


def change_statements(changes: Rows) -> list[Statement]:
    """The upserts of folded changes: one statement per table that has rows."""
    return [(projection.upsert_sql, (projection.encoded(rows),)) for projection in REGISTRY
            if (rows := changes.rows(projection))]


async def plan_projection(conn: DbConnection, entries: list[RecordedEntry], *,
                          numbered_by_postgres: bool = False) -> list[Statement] | None:
    """Load the rows freshly appended entries change and fold them: the statements that
    update every projection, for the ledger writer's one statement (with the append).

    ``numbered_by_postgres``: the entries are numbered from 1 and Postgres will number them
    where the head is, so their rows must not depend on a stored row (their ``change_seq``
    moves with them); None when they would (the batch must then be numbered after a head).
    """
    if numbered_by_postgres:
        if any(needed_rows(entries, Rows()).values()):
            return None
        return change_statements(fold(Rows(), entries))
    return change_statements(fold(await load_current(conn, entries), entries))
