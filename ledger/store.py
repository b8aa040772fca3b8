"""The Postgres event store: lock the head, load streams, append with hash chain, read all.

Every asyncpg error on the write path is translated here, in one place, into ledger errors.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
import msgspec

from ledger.database import DbConnection
from ledger.errors import (
    CommitUnknown,
    InvalidRequest,
    LedgerCorrupt,
    LedgerUnavailable,
    StreamVersionConflict,
)
from ledger.events import LedgerEvent, event_encoder, event_type_of
from ledger.hashing import entry_tail
from ledger.sqlfile import load_queries
from ledger.streams import STREAM_KINDS, RecordedEntry
from ledger.together import Statement, sequenced

SQL = load_queries("ledger", "ledger.sql")


@dataclass(frozen=True)
class Head:
    """The last committed changeSeq and hash-chain tip, and the epoch a projection repair
    advances (a batch decided before a repair must not write after it)."""

    last_seq: int
    last_hash: bytes
    epoch: int = 0


@dataclass(frozen=True)
class PendingEvent:
    """An event decided but not yet appended."""

    stream_type: str
    stream_id: str
    stream_version: int
    event: LedgerEvent
    actor: str
    recorded_at: datetime


OUTAGE_ERRORS = (OSError, TimeoutError, asyncpg.InterfaceError, asyncpg.PostgresConnectionError,
                 asyncpg.exceptions.OperatorInterventionError,
                 asyncpg.exceptions.InsufficientResourcesError, asyncpg.InternalClientError)
"""Errors that mean the database cannot be reached or is going away, not a refused query
(``InternalClientError``: a connection the server cut in the middle of an operation)."""


def is_outage(error: BaseException) -> bool:
    """True when ``error`` says the database is unreachable (a read answers 503 then)."""
    return isinstance(error, OUTAGE_ERRORS)


_ESCAPED_NUL = re.compile(rb"(?:^|[^\\])(?:\\\\)*\\u0000")
"""JSON's escape of U+0000 (an odd number of backslashes before ``u0000``)."""
NUL_REFUSED = "text must not contain NUL characters (U+0000): Postgres cannot store them"


def refuse_nul(payload: bytes) -> None:
    """Refuse an encoded event holding U+0000, which ``jsonb`` cannot store: the command is
    refused as invalid instead of failing its batch as if the database were down."""
    if b"\\u0000" in payload and _ESCAPED_NUL.search(payload):
        raise InvalidRequest(NUL_REFUSED)


def lost_commit() -> CommitUnknown:
    """The error for a commit whose connection was lost: it may or may not be stored."""
    return CommitUnknown("the database connection was lost while committing: the change may "
                         "or may not be stored; retry with the same idempotency key")


def translate_error(error: BaseException) -> Exception:
    """Map a driver error to the ledger's own error type."""
    if isinstance(error, asyncpg.UniqueViolationError) and "stream_version" in str(
        error.constraint_name or ""
    ):
        return StreamVersionConflict()
    if isinstance(error, asyncpg.DataError):  # a value the database refuses, not an outage
        return InvalidRequest("the database refused a value of this request")
    if isinstance(error, asyncpg.PostgresError | OSError | asyncpg.InterfaceError):
        return LedgerUnavailable()
    return error if isinstance(error, Exception) else RuntimeError(str(error))


async def lock_head(conn: DbConnection) -> Head:
    """Lock the head row until commit; every append in the transaction follows it."""
    return _head(await conn.fetchrow(SQL["lock_head"]))


async def read_head(conn: DbConnection) -> Head:
    """The current head without locking it."""
    return _head(await conn.fetchrow(SQL["head"]))


def _head(row: asyncpg.Record | None) -> Head:
    if row is None:
        raise LedgerUnavailable("the ledger head row is missing; run `svc db migrate`")
    return Head(row["last_seq"], bytes(row["last_hash"]), row["epoch"])


async def next_epoch(conn: DbConnection) -> None:
    """Advance the head's epoch (inside a transaction holding the head, after projection rows
    were replaced): batches that read before it will re-read instead of writing."""
    await conn.execute(SQL["next_epoch"])


def entry_from_row(row: asyncpg.Record) -> RecordedEntry:
    """Decode one ledger row into a recorded entry, or raise :class:`LedgerCorrupt` naming
    its changeSeq."""
    seq = row["change_seq"]
    kind = STREAM_KINDS.get(row["stream_type"])
    if kind is None:
        raise LedgerCorrupt(f"changeSeq {seq}: unknown stream type {row['stream_type']!r}",
                            changeSeq=seq)
    try:
        event = kind.decode(row["payload"])
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise LedgerCorrupt(f"changeSeq {seq}: undecodable {row['event_type']} payload: "
                            f"{error}", changeSeq=seq) from None
    return RecordedEntry(
        change_seq=seq,
        stream_type=row["stream_type"],
        stream_id=row["stream_id"],
        stream_version=row["stream_version"],
        event=event,
        actor=row["actor"],
        recorded_at=row["recorded_at"],
    )


async def read_streams(
    conn: DbConnection, stream_ids: Sequence[str]
) -> dict[str, list[RecordedEntry]]:
    """All entries of the given streams, in stream order."""
    streams: dict[str, list[RecordedEntry]] = {}
    for row in await conn.fetch(SQL["read_streams"], list(stream_ids)):
        streams.setdefault(row["stream_id"], []).append(entry_from_row(row))
    return streams


@dataclass(frozen=True)
class Prepared:
    """A batch's entries, numbered after some head, ready for :func:`commit`: each entry's
    hash tail and the statement inserting them."""

    recorded: list[RecordedEntry]
    tails: list[bytes]
    insert: Statement | None


@dataclass(frozen=True)
class Committed:
    """What :func:`commit` did: the head after the batch, and what the batch's changeSeqs
    (and its projection rows') were shifted by (0 for a batch numbered after its head)."""

    head: Head
    shift: int


def prepare_append(base: int, pending: Sequence[PendingEvent]) -> Prepared:
    """The entries of ``pending`` numbered ``base + 1 …`` (``base`` 0 when Postgres numbers
    them, see :func:`commit`); an event holding U+0000 is refused here."""
    columns: list[list[object]] = [[] for _ in range(7)]
    recorded: list[RecordedEntry] = []
    tails: list[bytes] = []
    for seq, item in enumerate(pending, base + 1):
        payload = event_encoder.encode(item.event)
        refuse_nul(payload)
        event_type = event_type_of(item.event)
        tails.append(entry_tail(
            stream_type=item.stream_type, stream_id=item.stream_id,
            stream_version=item.stream_version, event_type=event_type, actor=item.actor,
            recorded_at=item.recorded_at, payload=payload))
        row = (item.stream_type, item.stream_id, item.stream_version, event_type,
               payload.decode(), item.actor, item.recorded_at)
        for column, value in zip(columns, row, strict=True):
            column.append(value)
        recorded.append(RecordedEntry(seq, item.stream_type, item.stream_id,
                                      item.stream_version, item.event, item.actor,
                                      item.recorded_at))
    return Prepared(recorded, tails, (SQL["insert_entries"], columns) if pending else None)


async def commit(conn: DbConnection, after: Head | None, prepared: Prepared,
                 statements: Sequence[Statement]) -> Committed | None:
    """Append ``prepared`` with its projection ``statements`` in one statement, committed
    with it unless the caller holds a transaction; the head row is locked first, inside it.

    With ``after`` (the entries were numbered after it, from what was read after it), the
    statement applies only while the head is still ``after``: None, nothing written, when
    another commit came first. Without, Postgres numbers and chains the entries wherever the
    head is (they were numbered from 1; ``Committed.shift`` says by how much they moved),
    for a batch whose writes depend on nothing stored. A connection lost once the statement
    may have reached the server is :class:`CommitUnknown`; other errors change nothing.
    """
    if conn.is_closed():
        raise LedgerUnavailable()
    own_commit = not conn.is_in_transaction()  # asked now: a lost connection cannot answer
    expected = (None, None) if after is None else (after.last_seq, after.epoch)
    head = (SQL["advance_head"], (*expected, prepared.tails))
    writes = [prepared.insert, *statements] if prepared.insert else list(statements)
    text, arguments = sequenced(head, writes)
    try:
        row = await conn.fetchrow(text, *arguments)
    except Exception as error:
        if is_outage(error) and own_commit:
            raise lost_commit() from error
        raise translate_error(error) from error
    if row is None:
        return None
    return Committed(Head(row["new_seq"], bytes(row["new_hash"]), row["new_epoch"]),
                     row["shift"])


async def append(conn: DbConnection, head: Head, pending: Sequence[PendingEvent]
                 ) -> tuple[Head, list[RecordedEntry]]:
    """Append events after ``head``, which the caller holds locked in its transaction (no
    projection is written); return the new head."""
    prepared = prepare_append(head.last_seq, pending)
    committed = await commit(conn, head, prepared, [])
    if committed is None:
        raise StreamVersionConflict()
    return committed.head, prepared.recorded


async def iter_batches(
    conn: DbConnection, query_name: str, batch: int = 5000
) -> AsyncIterator[list[asyncpg.Record]]:
    """Stream ledger rows in batches through a server-side cursor (inside a transaction)."""
    cursor = await conn.cursor(SQL[query_name])
    while rows := await cursor.fetch(batch):
        yield rows


async def hash_at(conn: DbConnection, change_seq: int) -> bytes | None:
    """The stored hash of the entry at ``change_seq`` (None when there is none)."""
    value = await conn.fetchval(SQL["hash_at"], change_seq)
    return None if value is None else bytes(value)
