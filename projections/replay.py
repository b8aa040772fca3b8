"""Rebuild every projection from the ledger alone, diff it against the live tables, and
verify the hash chain. Streams the ledger: memory does not grow with its size.

The ledger is read in stream order, so every chunk holds whole streams and the fold's rows
are final: they are COPYed into index-free scratch tables (temporary tables with the live
tables' names, which shadow them on this connection). Stats deltas are summed in memory
(one counter per queue, lane, state and profile) and written at the end.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import asyncpg
import msgspec

from ledger import store
from ledger.database import DbConnection
from ledger.hashing import GENESIS_HASH, entry_hash
from ledger.sqlfile import load_queries
from ledger.streams import RecordedEntry
from projections import attempt_summary, commander, core_records, session_summary
from projections.fold import Changes, Current, fold
from projections.queue_stats import StatsKey
from projections.store import json_text, run_tuple, task_tuple
from projections.task_summary import COLUMNS

SQL = load_queries("projections", "replay.sql")
TABLES = ("task_summary", "task_contract", "read_cursor", "queue_stats", "commander_view",
          "attempt_summary", "run_record", "command_record", "runner_job_record",
          "session_summary", "session_turn", "session_read_cursor")
_COMMANDER_COLUMNS = tuple(commander.CommanderRow.__struct_fields__)
SAMPLE = 5


@dataclass
class ReplayReport:
    """The outcome of a replay: counts, chain check and per-table differences."""

    events: int = 0
    streams: int = 0
    seconds: float = 0.0
    chain_error: str | None = None
    differences: dict[str, int] = field(default_factory=dict)
    samples: dict[str, list[str]] = field(default_factory=dict)
    repaired: bool = False

    @property
    def ok(self) -> bool:
        """True when the chain verifies and every projection equals its rebuild."""
        return self.chain_error is None and not any(self.differences.values())


async def _copy_rows(conn: DbConnection, changes: Changes) -> None:
    tasks = list(changes.tasks.values())
    if tasks:
        await conn.copy_records_to_table(
            "task_summary", records=[task_tuple(r) for r in tasks], columns=COLUMNS)
        await conn.copy_records_to_table(
            "commander_view", columns=_COMMANDER_COLUMNS,
            records=[msgspec.structs.astuple(commander.derive(r)) for r in tasks])
    if changes.contracts:
        await conn.copy_records_to_table(
            "task_contract", columns=("task_id", "contract"),
            records=[(k, json_text(v)) for k, v in changes.contracts.items()])
    if changes.cursors:
        await conn.copy_records_to_table(
            "read_cursor", columns=("reader_id", "task_id", "version", "change_seq"),
            records=[msgspec.structs.astuple(c) for c in changes.cursors.values()])
    if changes.attempts:
        await conn.copy_records_to_table(
            "attempt_summary", columns=attempt_summary.COLUMNS,
            records=[msgspec.structs.astuple(a) for a in changes.attempts.values()])
    runs = list(changes.runs.values())
    if runs:
        await conn.copy_records_to_table("run_record", columns=core_records.RUN_COLUMNS,
                                         records=[run_tuple(r) for r in runs])
        commanded = [r for r in runs if r.command_id]
        await conn.copy_records_to_table("command_record", columns=core_records.COMMAND_COLUMNS,
                                         records=[core_records.command_tuple(r)
                                                  for r in commanded])
        await conn.copy_records_to_table("runner_job_record", columns=core_records.JOB_COLUMNS,
                                         records=[core_records.job_tuple(r) for r in commanded])
    for table, columns, rows in (
        ("session_summary", session_summary.SESSION_COLUMNS, changes.sessions.sessions),
        ("session_turn", session_summary.TURN_COLUMNS, changes.sessions.turns),
        ("session_read_cursor", session_summary.CURSOR_COLUMNS, changes.sessions.cursors),
    ):
        if rows:
            await conn.copy_records_to_table(
                table, columns=columns,
                records=[msgspec.structs.astuple(r) for r in rows.values()])


async def _rebuild(conn: DbConnection, report: ReplayReport, chunk_events: int) -> None:
    chunk: list[RecordedEntry] = []
    stats: Counter[StatsKey] = Counter()
    last_stream: str | None = None
    async for rows in store.iter_batches(conn, "read_all_by_stream"):
        for row in rows:
            if row["stream_id"] != last_stream:
                report.streams += 1
                if len(chunk) >= chunk_events:
                    changes = fold(Current(), chunk)
                    stats.update(changes.stats)
                    await _copy_rows(conn, changes)
                    chunk = []
                last_stream = row["stream_id"]
            chunk.append(store.entry_from_row(row))
        report.events += len(rows)
    changes = fold(Current(), chunk)
    stats.update(changes.stats)
    await _copy_rows(conn, changes)
    await conn.copy_records_to_table(
        "queue_stats", columns=("queue", "lane", "state", "backend_profile", "task_count"),
        records=[(*key, count) for key, count in stats.items() if count != 0])


async def _verify_chain(conn: DbConnection) -> str | None:
    expected_seq, prev = 0, GENESIS_HASH
    async for rows in store.iter_batches(conn, "read_all_by_seq"):
        error, expected_seq, prev = _verify_rows(rows, expected_seq, prev)
        if error:
            return error
    head = await store.read_head(conn)
    if (head.last_seq, head.last_hash) != (expected_seq, prev):
        return f"ledger head ({head.last_seq}) does not match the last entry ({expected_seq})"
    return None


def _verify_rows(
    rows: list[asyncpg.Record], expected_seq: int, prev: bytes
) -> tuple[str | None, int, bytes]:
    for row in rows:
        expected_seq += 1
        seq = row["change_seq"]
        if seq != expected_seq:
            return f"changeSeq gap: expected {expected_seq}, found {seq}", expected_seq, prev
        if bytes(row["prev_hash"]) != prev:
            return (f"changeSeq {seq}: prev_hash does not match the previous entry",
                    expected_seq, prev)
        digest = entry_hash(
            prev, change_seq=seq, stream_type=row["stream_type"], stream_id=row["stream_id"],
            stream_version=row["stream_version"], event_type=row["event_type"],
            actor=row["actor"], recorded_at=row["recorded_at"],
            payload=row["payload"].encode(),
        )
        if digest != bytes(row["hash"]):
            return f"changeSeq {seq}: hash does not match its content", expected_seq, prev
        prev = digest
    return None, expected_seq, prev


async def replay(
    conn: DbConnection, *, repair: bool = False, chunk_events: int = 5000
) -> ReplayReport:
    """Rebuild projections into scratch tables and compare; with ``repair`` replace the live ones.

    Use a dedicated connection: the scratch tables shadow the live ones on it.
    Verification reads one snapshot; repair first locks the ledger head to stop writers.
    """
    report = ReplayReport()
    started = time.perf_counter()
    async with conn.transaction(isolation="read_committed" if repair else "repeatable_read"):
        if repair:
            await store.lock_head(conn)
        await conn.execute(SQL["create_scratch"])
        await _rebuild(conn, report, chunk_events)
        report.chain_error = await _verify_chain(conn)
        for table in TABLES:
            keys = [r["key"] for r in await conn.fetch(SQL[f"diff_{table}"])]
            report.differences[table] = len(keys)
            report.samples[table] = sorted(set(keys))[:SAMPLE]
        if repair and report.chain_error is None:
            await conn.execute(SQL["replace_live"])
            report.repaired = True
    report.seconds = time.perf_counter() - started
    return report
