"""Rebuild every projection from the ledger alone, diff it against the live tables, and
verify the hash chain. Streams the ledger: memory does not grow with its size.

The ledger is read in stream order, so every chunk holds whole streams and the fold's rows
are final: they are COPYed into index-free scratch tables (temporary tables with the live
tables' names, which shadow them on this connection). Rows of added projections
(``Merge.ADD``: the stats deltas) are summed in memory, one row per key, and written at the
end. Tables, columns, scratch, diff and replace SQL all come from the registry.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import asyncpg

from ledger import store
from ledger.database import DbConnection
from ledger.hashing import GENESIS_HASH, entry_hash
from ledger.streams import RecordedEntry
from projections.fold import fold
from projections.projection import Merge, Rows
from projections.registry import REGISTRY, TABLES

__all__ = ["TABLES", "ReplayReport", "replay"]
SAMPLE = 5
_SCRATCH = ";\n".join(p.scratch_sql for p in REGISTRY)
_REPLACE = ";\n".join(p.replace_sql for p in REGISTRY)


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


async def _copy(conn: DbConnection, changes: Rows, totals: Rows, *, final: bool) -> None:
    """COPY a chunk's final rows into the scratch tables; deltas are summed until the end."""
    for projection in REGISTRY:
        source = changes
        if projection.merge is Merge.ADD:
            totals.merge(projection, changes)
            if not final:
                continue
            source = totals
        rows = source.rows(projection)
        if rows:
            await conn.copy_records_to_table(
                projection.table, columns=projection.columns,
                records=[projection.to_tuple(row) for row in rows])


async def _rebuild(conn: DbConnection, report: ReplayReport, chunk_events: int) -> None:
    chunk: list[RecordedEntry] = []
    totals = Rows()
    last_stream: str | None = None
    async for rows in store.iter_batches(conn, "read_all_by_stream"):
        for row in rows:
            if row["stream_id"] != last_stream:
                report.streams += 1
                if len(chunk) >= chunk_events:
                    await _copy(conn, fold(Rows(), chunk), totals, final=False)
                    chunk = []
                last_stream = row["stream_id"]
            chunk.append(store.entry_from_row(row))
        report.events += len(rows)
    await _copy(conn, fold(Rows(), chunk), totals, final=True)


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
    Verification reads one snapshot; repair first locks the ledger head to stop writers and
    advances its epoch, so no batch decided from the rows it replaced is written after it.
    """
    report = ReplayReport()
    started = time.perf_counter()
    async with conn.transaction(isolation="read_committed" if repair else "repeatable_read"):
        if repair:
            await store.lock_head(conn)
        await conn.execute(_SCRATCH)
        await _rebuild(conn, report, chunk_events)
        report.chain_error = await _verify_chain(conn)
        for projection in REGISTRY:
            keys = [r["key"] for r in await conn.fetch(projection.diff_sql)]
            report.differences[projection.table] = len(keys)
            report.samples[projection.table] = sorted(set(keys))[:SAMPLE]
        if repair and report.chain_error is None:
            await conn.execute(_REPLACE)
            await store.next_epoch(conn)  # a writer's batch decided before this re-reads
            report.repaired = True
    report.seconds = time.perf_counter() - started
    return report
