"""Rebuild every projection from the ledger alone, diff it against the live tables, and
verify the hash chain. Streams the ledger: memory does not grow with its size."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ledger import store
from ledger.database import DbConnection
from ledger.hashing import GENESIS_HASH, entry_hash
from ledger.sqlfile import load_queries
from ledger.streams import RecordedEntry
from projections.fold import fold
from projections.store import write_changes

SQL = load_queries("projections", "replay.sql")
TABLES = ("task_summary", "read_cursor", "queue_stats", "commander_view")
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


async def _rebuild(conn: DbConnection, report: ReplayReport, chunk_events: int) -> None:
    chunk: list[RecordedEntry] = []
    last_stream: str | None = None
    async for row in store.iter_rows(conn, "read_all_by_stream"):
        if row["stream_id"] != last_stream:
            report.streams += 1
            if len(chunk) >= chunk_events:
                await write_changes(conn, fold({}, chunk))
                chunk = []
            last_stream = row["stream_id"]
        chunk.append(store.entry_from_row(row))
        report.events += 1
    if chunk:
        await write_changes(conn, fold({}, chunk))


async def _verify_chain(conn: DbConnection) -> str | None:
    expected_seq, prev = 0, GENESIS_HASH
    async for row in store.iter_rows(conn, "read_all_by_seq"):
        expected_seq += 1
        seq = row["change_seq"]
        if seq != expected_seq:
            return f"changeSeq gap: expected {expected_seq}, found {seq}"
        if bytes(row["prev_hash"]) != prev:
            return f"changeSeq {seq}: prev_hash does not match the previous entry"
        digest = entry_hash(
            prev, change_seq=seq, stream_type=row["stream_type"], stream_id=row["stream_id"],
            stream_version=row["stream_version"], event_type=row["event_type"],
            actor=row["actor"], recorded_at=row["recorded_at"],
            payload=row["payload"].encode(),
        )
        if digest != bytes(row["hash"]):
            return f"changeSeq {seq}: hash does not match its content"
        prev = digest
    head = await store.read_head(conn)
    if (head.last_seq, head.last_hash) != (expected_seq, prev):
        return f"ledger head ({head.last_seq}) does not match the last entry ({expected_seq})"
    return None


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
