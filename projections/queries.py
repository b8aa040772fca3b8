"""Read queries used by the API: task list, detail, stats and the commander view."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Generic, TypeVar

import asyncpg
import msgspec

from ledger.database import Queryable
from ledger.errors import InvalidRequest
from ledger.sqlfile import load_queries
from projections.attempt_summary import AttemptRow
from projections.rows import (
    CommanderRow,
    JsonObject,
    JudgeRunRow,
    ReservedRun,
    RunView,
    StatsCounter,
    TaskItemRow,
)
from projections.scope import EVERYTHING, Scope
from projections.store import row_from_record
from projections.task_summary import TaskSummaryRow

SQL = load_queries("projections", "queries.sql")
MAX_SEQ = 2**63 - 1
STATS_ROW_LIMIT = 500
_object_decoder = msgspec.json.Decoder(JsonObject)
R = TypeVar("R", bound=msgspec.Struct)


class RowDecoder(Generic[R]):
    """Records of one query shape into one Struct type; JSON text columns decoded first."""

    def __init__(self, kind: type[R], json_columns: tuple[str, ...] = (),
                 nested: tuple[str, ...] = ()) -> None:
        self.kind = kind
        self.json_columns = json_columns
        self.nested = nested

    def one(self, record: Mapping[str, object]) -> R:
        """Decode one record (columns the Struct lacks are ignored; a nested Struct field
        takes its fields from the same record)."""
        values = SimpleNamespace(**record)
        for name in self.json_columns:
            text = getattr(values, name)
            setattr(values, name,
                    _object_decoder.decode(text) if isinstance(text, str) and text else None)
        for name in self.nested:
            setattr(values, name, values)
        return msgspec.convert(values, self.kind, from_attributes=True)

    def many(self, records: Iterable[Mapping[str, object]]) -> list[R]:
        """Decode every record."""
        return [self.one(record) for record in records]

    def maybe(self, record: Mapping[str, object] | None) -> R | None:
        """Decode a record, or None for no record."""
        return None if record is None else self.one(record)


_TASK_ITEMS = RowDecoder(TaskItemRow, ("latest_attempt",))
_COMMANDER = RowDecoder(CommanderRow, ("latest_attempt",))
_COUNTERS = RowDecoder(StatsCounter)
_ATTEMPTS = RowDecoder(AttemptRow)
_RUNS = RowDecoder(RunView, ("plan", "assembly", "runner_startup"))
_RESERVED = RowDecoder(ReservedRun)


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

    rows: list[TaskItemRow]
    next_cursor: str | None
    high_water: int


CURSOR_PATTERN = r"^[ad](0|[1-9][0-9]{0,17})$"
"""Every cursor this code accepts, and no other: a direction and a changeSeq below 10**18
(the OpenAPI document publishes this pattern, so a value it allows is never refused)."""
_CURSOR = re.compile(CURSOR_PATTERN)


def encode_cursor(direction: str, change_seq: int) -> str:
    """An opaque cursor continuing a list after ``change_seq``."""
    return f"{direction}{change_seq}"


def decode_cursor(cursor: str) -> tuple[str, int]:
    """Inverse of :func:`encode_cursor`; a malformed cursor is an ``invalid-request``."""
    if not _CURSOR.fullmatch(cursor):
        raise InvalidRequest("malformed cursor", field="cursor")
    return cursor[0], int(cursor[1:])


async def list_tasks(
    pool: asyncpg.Pool, *, queue: str | None, state: str | None, cursor: str | None,
    limit: int, updated_after: int | None, scope: Scope = EVERYTHING,
) -> TaskPage:
    """A page of tasks: newest first, or oldest change first after ``updated_after``."""
    where = QueueFilter.parse(queue)
    if cursor is not None:
        direction, after = decode_cursor(cursor)
    elif updated_after is not None:
        direction, after = "a", updated_after
    else:
        direction, after = "d", MAX_SEQ
    records = await pool.fetch(SQL["list_tasks"], where.queue, where.lane, state, after,
                               limit + 1, direction == "a", scope.tenant_filter,
                               scope.project_filter)
    high_water: int = records[0]["high_water"]
    rows = _TASK_ITEMS.many(r for r in records if r["task_id"] is not None)
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = encode_cursor(direction, rows[-1].change_seq)
    return TaskPage(rows, next_cursor, high_water)


async def get_task(
    pool: Queryable, task_id: str
) -> tuple[TaskSummaryRow, JsonObject] | None:
    """The summary row and submitted contract of one task, or None."""
    record = await pool.fetchrow(SQL["get_task"], task_id)
    if record is None:
        return None
    return row_from_record(record), _object_decoder.decode(record["contract"])


async def get_tasks(pool: Queryable, task_ids: Sequence[str]
                    ) -> dict[str, tuple[TaskSummaryRow, JsonObject]]:
    """:func:`get_task` of several tasks in one query, by id (those not found left out); no
    ids, no query (a batch whose items are all new reads nothing back)."""
    if not task_ids:
        return {}
    return {record["task_id"]: (row_from_record(record),
                                _object_decoder.decode(record["contract"]))
            for record in await pool.fetch(SQL["get_tasks"], list(task_ids))}


async def high_water(pool: Queryable) -> int:
    """The last committed changeSeq."""
    value = await pool.fetchval(SQL["high_water"])
    return int(value)


@dataclass(frozen=True)
class StatsResult:
    """Counter rows of the stats, their folds, and the high-water mark."""

    rows: list[StatsCounter]
    by_state: dict[str, int]
    by_lane: dict[str, int]
    by_profile: dict[str, int]
    truncated: bool
    high_water: int
    tokens_by_queue: dict[str, TokenSums] = field(default_factory=dict)
    tokens_by_profile: dict[str, TokenSums] = field(default_factory=dict)
    """Token usage (input, cached input, output, reasoning output) per queue and per backend
    profile, when asked for (:func:`token_stats`)."""


TokenSums = tuple[int, int, int, int]
"""Summed token counts: input, cached input, output, reasoning output."""


async def token_stats(pool: Queryable, queue: str | None,
                      scope: Scope = EVERYTHING) -> tuple[dict[str, TokenSums],
                                                          dict[str, TokenSums]]:
    """Token usage per queue and per backend profile, summed at read time over the
    attempts of the tasks ``scope`` sees."""
    where = QueueFilter.parse(queue)
    by: dict[str, dict[str, TokenSums]] = {"queue": {}, "profile": {}}
    for record in await pool.fetch(SQL["token_stats"], where.queue, where.lane,
                                   scope.tenant_filter, scope.project_filter):
        by[record["kind"]][record["name"]] = (
            record["input_tokens"], record["cached_input_tokens"], record["output_tokens"],
            record["reasoning_output_tokens"])
    return by["queue"], by["profile"]


async def stats(pool: Queryable, queue: str | None,
                scope: Scope = EVERYTHING) -> StatsResult:
    """Queue stats read from the incrementally maintained counters (no scan of tasks), of
    the tenants and projects ``scope`` sees."""
    where = QueueFilter.parse(queue)
    records = await pool.fetch(SQL["stats"], where.queue, where.lane, STATS_ROW_LIMIT + 1,
                               scope.tenant_filter, scope.project_filter)
    high: int = records[0]["high_water"]
    rows = _COUNTERS.many(r for r in records if r["queue"] is not None)
    truncated = len(rows) > STATS_ROW_LIMIT
    rows = rows[:STATS_ROW_LIMIT]
    by_state: Counter[str] = Counter()
    by_lane: Counter[str] = Counter()
    by_profile: Counter[str] = Counter()
    for row in rows:
        by_state[row.state] += row.count
        by_lane[f"{row.queue}/{row.lane}"] += row.count
        by_profile[row.backend_profile or "none"] += row.count
    return StatsResult(rows, dict(by_state), dict(by_lane), dict(by_profile), truncated, high)


@dataclass(frozen=True)
class CommanderResult:
    """The commander view's items, its counts and the high-water mark."""

    items: list[CommanderRow]
    stats: StatsResult


async def commander(
    pool: asyncpg.Pool, *, queue: str | None, reader_id: str | None, limit: int,
    scope: Scope = EVERYTHING,
) -> CommanderResult:
    """The most urgent tasks (blocked, failed, running, pending …) with counts by state."""
    where = QueueFilter.parse(queue)
    async with pool.acquire() as conn, conn.transaction(isolation="repeatable_read",
                                                        readonly=True):
        counts = await stats(conn, queue, scope)
        records = await conn.fetch(SQL["commander_items"], where.queue, where.lane,
                                   reader_id, limit, scope.tenant_filter,
                                   scope.project_filter)
    return CommanderResult(_COMMANDER.many(records), counts)


@dataclass(frozen=True)
class AttemptPage:
    """Attempts of one page (oldest first), the next retry-index cursor, the high-water mark."""

    rows: list[AttemptRow]
    next_cursor: str | None
    high_water: int


async def list_attempts(pool: Queryable, task_id: str, *, cursor: int,
                        limit: int) -> AttemptPage:
    """The attempt history of a task from retry index ``cursor`` on."""
    records = await pool.fetch(SQL["list_attempts"], task_id, cursor, limit + 1)
    rows = _ATTEMPTS.many(r for r in records if r["attempt_id"] is not None)
    next_cursor = None
    if len(rows) > limit:
        rows = rows[:limit]
        next_cursor = str(rows[-1].retry_index + 1)
    return AttemptPage(rows, next_cursor, records[0]["high_water"])


async def get_attempt(pool: Queryable, task_id: str, attempt_id: str) -> AttemptRow | None:
    """One attempt row: an attempt id is unique within its task only."""
    return _ATTEMPTS.maybe(await pool.fetchrow(SQL["get_attempt"], task_id, attempt_id))


async def get_run(pool: Queryable, run_id: str) -> RunView | None:
    """A run's record with its job plan, assembly event and attempt state."""
    return _RUNS.maybe(await pool.fetchrow(SQL["get_run"], run_id))


async def get_reserved_run(pool: Queryable, run_id: str) -> ReservedRun | None:
    """The attempt a run id was reserved for (the run itself may not exist yet)."""
    return _RESERVED.maybe(await pool.fetchrow(SQL["get_reserved_run"], run_id))


_JUDGE_RUNS = RowDecoder(JudgeRunRow, ("request",))
JUDGE_RUN_LIMIT = 500
"""At most this many judge runs are shown with one page of attempts."""


async def judge_runs(pool: Queryable, task_id: str,
                     attempt_ids: list[str] | None = None) -> list[JudgeRunRow]:
    """The judge runs of a task (or of some of its attempts), oldest first."""
    return _JUDGE_RUNS.many(await pool.fetch(SQL["judge_runs"], task_id, attempt_ids,
                                             JUDGE_RUN_LIMIT))


async def get_judge_run(pool: Queryable, task_id: str, judge_id: str) -> JudgeRunRow | None:
    """One judge run of a task."""
    return _JUDGE_RUNS.maybe(await pool.fetchrow(SQL["get_judge_run"], task_id, judge_id))


OWNER_QUERIES = {"task": "task_owner", "run": "run_owner", "session": "session_owner"}
"""The query that finds the tenant and project of a resource, by kind."""


async def owner(pool: Queryable, kind: str, resource_id: str) -> tuple[str, str | None] | None:
    """The tenant and project (None: the resource has none) of a task, run or session, or
    None when it does not exist."""
    record = await pool.fetchrow(SQL[OWNER_QUERIES[kind]], resource_id)
    return None if record is None else (record["tenant_id"], record["project_id"])
