"""Read queries used by the API: task list, detail, stats and the commander view."""

from __future__ import annotations

import base64
from collections import Counter
from dataclasses import dataclass
from typing import Any

import asyncpg
import msgspec

from ledger.database import Queryable
from ledger.errors import InvalidRequest
from ledger.sqlfile import load_queries
from projections.store import row_from_record
from projections.task_summary import TaskSummaryRow

SQL = load_queries("projections", "queries.sql")
MAX_SEQ = 2**63 - 1
STATS_ROW_LIMIT = 500
_object_decoder = msgspec.json.Decoder(dict[str, Any])


@dataclass(frozen=True)
class QueueFilter:
    """A ``queue`` argument: ``name`` or ``name/lane``."""

    queue: str | None
    lane: str | None

    @classmethod
    def parse(cls, value: str | None) -> QueueFilter:
        """Split ``name/lane``; a bare name matches every lane."""
        if not value:
            return cls(None, None)
        name, _, lane = value.partition("/")
        return cls(name, lane or None)


@dataclass(frozen=True)
class TaskPage:
    """Rows of one list page, the cursor to the next one and the high-water mark."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    high_water: int


def encode_cursor(direction: str, change_seq: int) -> str:
    """An opaque cursor continuing a list after ``change_seq``."""
    return base64.urlsafe_b64encode(f"{direction}:{change_seq}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[str, int]:
    """Inverse of :func:`encode_cursor`; a malformed cursor is an ``invalid-request``."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        direction, _, seq = raw.partition(":")
        value = int(seq)
    except (ValueError, UnicodeDecodeError) as error:
        raise InvalidRequest("malformed cursor", field="cursor") from error
    if direction not in ("a", "d") or not 0 <= value <= MAX_SEQ:
        raise InvalidRequest("malformed cursor", field="cursor")
    return direction, value


def _task_item(record: asyncpg.Record) -> dict[str, Any]:
    item = dict(record)
    item.pop("high_water", None)
    attempt = item.get("latest_attempt")
    item["latest_attempt"] = _object_decoder.decode(attempt) if attempt else None
    return item


async def list_tasks(
    pool: asyncpg.Pool, *, queue: str | None, state: str | None, cursor: str | None,
    limit: int, updated_after: int | None,
) -> TaskPage:
    """A page of tasks: newest first, or oldest change first after ``updated_after``."""
    where = QueueFilter.parse(queue)
    if cursor is not None:
        direction, after = decode_cursor(cursor)
    elif updated_after is not None:
        direction, after = "a", updated_after
    else:
        direction, after = "d", MAX_SEQ
    query = SQL["list_tasks_asc" if direction == "a" else "list_tasks_desc"]
    records = await pool.fetch(query, where.queue, where.lane, state, after, limit + 1)
    high_water = records[0]["high_water"]
    rows = [_task_item(r) for r in records if r["task_id"] is not None]
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(direction, rows[-1]["change_seq"])
    return TaskPage(rows, next_cursor, high_water)


async def get_task(
    pool: Queryable, task_id: str
) -> tuple[TaskSummaryRow, dict[str, Any]] | None:
    """The summary row and submitted contract of one task, or None."""
    record = await pool.fetchrow(SQL["get_task"], task_id)
    if record is None:
        return None
    return row_from_record(record), _object_decoder.decode(record["contract"])


async def high_water(pool: Queryable) -> int:
    """The last committed changeSeq."""
    value = await pool.fetchval(SQL["high_water"])
    return int(value)


@dataclass(frozen=True)
class StatsResult:
    """Counter rows of the stats, their folds, and the high-water mark."""

    rows: list[tuple[str, str, str, str | None, int]]
    by_state: dict[str, int]
    by_lane: dict[str, int]
    by_profile: dict[str, int]
    truncated: bool
    high_water: int


async def stats(pool: Queryable, queue: str | None) -> StatsResult:
    """Queue stats read from the incrementally maintained counters (no scan of tasks)."""
    where = QueueFilter.parse(queue)
    records = await pool.fetch(SQL["stats"], where.queue, where.lane, STATS_ROW_LIMIT + 1)
    high = records[0]["high_water"]
    rows = [
        (r["queue"], r["lane"], r["state"], r["backend_profile"] or None, r["task_count"])
        for r in records if r["queue"] is not None
    ]
    truncated = len(rows) > STATS_ROW_LIMIT
    rows = rows[:STATS_ROW_LIMIT]
    by_state: Counter[str] = Counter()
    by_lane: Counter[str] = Counter()
    by_profile: Counter[str] = Counter()
    for q, lane, state, profile, count in rows:
        by_state[state] += count
        by_lane[f"{q}/{lane}"] += count
        by_profile[profile or "none"] += count
    return StatsResult(rows, dict(by_state), dict(by_lane), dict(by_profile), truncated, high)


@dataclass(frozen=True)
class CommanderResult:
    """The commander view's items, its counts and the high-water mark."""

    items: list[dict[str, Any]]
    stats: StatsResult


async def commander(
    pool: asyncpg.Pool, *, queue: str | None, reader_id: str | None, limit: int
) -> CommanderResult:
    """The most urgent tasks (blocked, failed, running, pending …) with counts by state."""
    where = QueueFilter.parse(queue)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                        readonly=True):
        counts = await stats(conn, queue)
        records = await conn.fetch(SQL["commander_items"], where.queue, where.lane,
                                   reader_id, limit)
    items = []
    for record in records:
        item = dict(record)
        attempt = item["latest_attempt"]
        item["latest_attempt"] = _object_decoder.decode(attempt) if attempt else None
        read_version = item.pop("read_version")
        item["unread"] = None if reader_id is None else (read_version or 0) < item["version"]
        items.append(item)
    return CommanderResult(items, counts)


@dataclass(frozen=True)
class AttemptPage:
    """Attempts of one page (oldest first), the next retry-index cursor, the high-water mark."""

    rows: list[dict[str, Any]]
    next_cursor: str | None
    high_water: int


async def list_attempts(pool: Queryable, task_id: str, *, cursor: int,
                        limit: int) -> AttemptPage:
    """The attempt history of a task from retry index ``cursor`` on."""
    records = await pool.fetch(SQL["list_attempts"], task_id, cursor, limit + 1)
    rows = [{k: v for k, v in r.items() if k != "high_water"}
            for r in records if r["attempt_id"] is not None]
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = str(rows[-1]["retry_index"] + 1)
    return AttemptPage(rows, next_cursor, records[0]["high_water"])


async def get_attempt(pool: Queryable, attempt_id: str) -> dict[str, Any] | None:
    """One attempt row."""
    record = await pool.fetchrow(SQL["get_attempt"], attempt_id)
    return dict(record) if record is not None else None


async def get_session(pool: Queryable, session_id: str) -> dict[str, Any] | None:
    """A session's identity from its latest run."""
    record = await pool.fetchrow(SQL["get_session"], session_id)
    return dict(record) if record is not None else None


async def get_run(pool: Queryable, run_id: str) -> dict[str, Any] | None:
    """A run's record with its job plan, assembly event and attempt state."""
    record = await pool.fetchrow(SQL["get_run"], run_id)
    if record is None:
        return None
    row = dict(record)
    for name in ("job_plan", "assembly"):
        row[name] = msgspec.json.decode(row[name]) if row[name] else None
    return row


async def get_reserved_run(pool: Queryable, run_id: str) -> dict[str, Any] | None:
    """The attempt a run id was reserved for (the run itself may not exist yet)."""
    record = await pool.fetchrow(SQL["get_reserved_run"], run_id)
    return dict(record) if record is not None else None
