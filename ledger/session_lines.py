"""Session output and trace: append-only lines per session and channel with a monotonic seq.

A runner sends a job's lines in batches numbered by ``seq`` (the runner protocol; a job's
``stdout`` and ``stderr`` output streams are numbered apart); each batch is redacted, bounded,
and appended under a lock on the session's head row held to commit: a resent batch is
accepted once, and a reader that has seen seq N never later sees a new line at or below N.
An output line says its stream; a line longer than a protocol line (64 KiB) arrives, and is
kept, as numbered parts (``part`` of ``parts``) that concatenate to it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

import asyncpg
from asyncpg import Record

from ledger.database import DbConnection, Queryable
from ledger.errors import InvalidTransition
from ledger.grouped import LOCK_TIMEOUT
from ledger.redaction import redact_text
from ledger.sqlfile import load_queries

SQL = load_queries("ledger", "session_lines.sql")
CHANNELS = ("output", "trace")
MAX_LINE_CHARS = 128 * 1024
"""The last net for a line read from a file (:func:`take_in`); a protocol line is at most
64 KiB and is kept whole."""
MAX_PAGE_BYTES = 4 * 1024 * 1024
"""A page of lines stops after the line that reaches this many bytes (one line at least)."""
ReadChannel = Callable[[int], Awaitable[tuple[bytes, bool]]]


@dataclass(frozen=True)
class Line:
    """One stored line."""

    seq: int
    runner_job_id: str
    line: str
    recorded_at: datetime
    stream: str = "stdout"
    part: int | None = None
    parts: int | None = None


@dataclass(frozen=True)
class Piece:
    """A line of a batch: a whole line, or part ``part`` of ``parts`` of a longer one."""

    text: str
    part: int | None = None
    parts: int | None = None


def split_lines(data: bytes, final: bool) -> tuple[list[str], int]:
    """Complete lines of ``data`` (all of it when ``final``) and the bytes they used.

    Bytes Postgres text cannot hold become U+FFFD: invalid UTF-8 and NUL, which a backend may
    print but which would otherwise stop the channel's lines at that point for good.
    """
    end = len(data) if final else data.rfind(b"\n") + 1
    text = data[:end].decode("utf-8", errors="replace").replace("\x00", "\ufffd")
    return [bounded_line(line) for line in text.splitlines()], end


def bounded_line(line: str) -> str:
    """A line as stored: redacted (and, past ``MAX_LINE_CHARS``, cut with a visible mark)."""
    clean = redact_text(line)
    return clean if len(clean) <= MAX_LINE_CHARS else clean[:MAX_LINE_CHARS - 1] + "…"


async def take_in(conn: DbConnection, session_id: str, runner_job_id: str, channel: str,
                  read: ReadChannel, *, final: bool) -> int:
    """Append the new complete lines of one job's channel; return how many were appended.

    ``read(offset)`` returns the channel's bytes from ``offset``; with ``final`` a trailing
    line without a newline is taken too (the job has ended).
    """
    async with conn.transaction():
        await conn.execute(SQL["ensure_head"], session_id, channel)
        last_seq = await conn.fetchval(SQL["lock_head"], session_id, channel)
        offset = await conn.fetchval(SQL["source_offset"], runner_job_id, channel) or 0
        data, _ = await read(offset)
        lines, used = split_lines(data, final)
        if used == 0:
            return 0
        seqs = list(range(last_seq + 1, last_seq + 1 + len(lines)))
        if lines:
            await conn.execute(SQL["insert_lines"], session_id, channel, runner_job_id, seqs,
                               lines)
            await conn.execute(SQL["save_head"], session_id, channel, seqs[-1])
        await conn.execute(SQL["save_offset"], runner_job_id, channel, offset + used)
        return len(lines)


async def append_batch(conn: DbConnection, session_id: str, runner_job_id: str, channel: str,
                       batch_seq: int, lines: Sequence[str | Piece],
                       max_bytes: int | None = None, stream: str = "stdout") -> bool:
    """Append one numbered batch of a job's lines (of ``stream``); False when that batch was
    already taken.

    Batches of a job's channel and stream are numbered 1, 2, …; a gap is refused
    (``invalid-transition`` naming the batch expected), so lines are never lost or
    reordered. With ``max_bytes`` (``SVC_OUTPUT_MAX_BYTES``) a job's channel stores at most
    that many bytes of lines, both streams together (each line counted with its newline),
    then one notice, then nothing more: the batches are accepted all the same
    (:func:`within_bound`).
    """
    return await _append_pieces(conn, session_id, runner_job_id, channel, batch_seq,
                                prepared(lines), max_bytes, stream)


def prepared(lines: Sequence[str | Piece]) -> list[Piece]:
    """A batch's lines as stored: NUL replaced, redacted and bounded (:func:`bounded_line`)."""
    return [Piece(bounded_line(line.replace("\x00", "\ufffd")))
            if isinstance(line, str) else
            Piece(bounded_line(line.text.replace("\x00", "\ufffd")), line.part, line.parts)
            for line in lines]


@dataclass(frozen=True)
class Holder:
    """A runner token's hash and when its batch arrived: the job's lease row, if it holds
    that token, names the batch's session and is renewed to ``at`` (as by a heartbeat)."""

    token_sha256: str
    at: datetime


@dataclass(frozen=True)
class HeldBatch:
    """A numbered batch of prepared pieces under a token its job's lease row should hold:
    :func:`append_once` of a :class:`Holder`, alone or in a group (:func:`append_held_group`)."""

    holder: Holder
    runner_job_id: str
    channel: str
    batch_seq: int
    pieces: Sequence[Piece]
    stream: str = "stdout"

    @property
    def bytes(self) -> int:
        """The batch's bytes as a job channel's bound counts them."""
        return batch_bytes(self.pieces)


def batch_bytes(pieces: Sequence[Piece]) -> int:
    """A batch's bytes as a job channel's bound counts them (a newline each)."""
    return sum(len(piece.text.encode()) + 1 for piece in pieces)


async def append_once(conn: DbConnection, to: str | Holder, runner_job_id: str, channel: str,
                      batch_seq: int, pieces: Sequence[Piece], max_bytes: int | None = None,
                      stream: str = "stdout") -> bool | None:
    """:func:`append_batch` of :func:`prepared` pieces in one round trip (migration 0023), to
    the session ``to`` or, given a :class:`Holder`, to the session of the job's lease row
    that holds its token (renewed); None when the row does not hold it (nothing written).

    The batch that would take the job's channel past ``max_bytes`` is appended by
    :func:`append_batch`'s statements (its notice decided here, in Python)."""
    holder, session_id = (to, None) if isinstance(to, Holder) else (None, to)
    row = await _append_row(conn, runner_job_id, holder, session_id, channel, stream,
                            batch_seq, pieces, max_bytes)
    return await settle(conn, row, runner_job_id, channel, batch_seq, pieces, max_bytes,
                        stream)


async def append_held(db: Queryable, batch: HeldBatch,
                      max_bytes: int | None = None) -> Record:
    """The stored function's answer to ``batch`` alone (:func:`settle` it)."""
    return await _append_row(db, batch.runner_job_id, batch.holder, None, batch.channel,
                             batch.stream, batch.batch_seq, batch.pieces, max_bytes)


async def _append_row(db: Queryable, runner_job_id: str, holder: Holder | None,
                      session_id: str | None, channel: str, stream: str, batch_seq: int,
                      pieces: Sequence[Piece], max_bytes: int | None) -> Record:
    """One call of the stored function (migration 0023): under ``holder``'s token, or to
    ``session_id``."""
    row: Record = await db.fetchrow(
        SQL["append"], runner_job_id, holder.token_sha256 if holder else None,
        holder.at if holder else None, session_id, channel, stream, batch_seq,
        [piece.text for piece in pieces], [piece.part for piece in pieces],
        [piece.parts for piece in pieces], batch_bytes(pieces), max_bytes)
    return row


async def append_held_group(db: Queryable, batches: Sequence[HeldBatch],
                            max_bytes: int | None = None) -> list[Record]:
    """:func:`append_held` of each batch, in order, in one statement and one commit (group
    commit, :mod:`ledger.grouped`): the stored function's answers in the same order."""
    firsts: list[int] = []
    lasts: list[int] = []
    texts: list[str] = []
    part_numbers: list[int | None] = []
    part_counts: list[int | None] = []
    for batch in batches:
        firsts.append(len(texts) + 1)
        for piece in batch.pieces:
            texts.append(piece.text)
            part_numbers.append(piece.part)
            part_counts.append(piece.parts)
        lasts.append(len(texts))
    rows: list[Record] = await db.fetch(
        SQL["append_held_group"], [batch.runner_job_id for batch in batches],
        [batch.holder.token_sha256 for batch in batches],
        [batch.holder.at for batch in batches], [batch.channel for batch in batches],
        [batch.stream for batch in batches], [batch.batch_seq for batch in batches],
        firsts, lasts, [batch.bytes for batch in batches], texts, part_numbers, part_counts,
        max_bytes, LOCK_TIMEOUT)
    return rows


async def settle(db: Queryable, row: Record, runner_job_id: str, channel: str,
                 batch_seq: int, pieces: Sequence[Piece], max_bytes: int | None,
                 stream: str) -> bool | None:
    """What the stored function's ``row`` means for its batch: True stored, False taken
    before, None not held (nothing written); a gap raises ``invalid-transition``, and a
    batch past the job channel's bound is appended here with its notice."""
    outcome = row["outcome"]
    if outcome == "unheld":
        return None
    if outcome == "gap":
        raise _out_of_order(batch_seq, row["expected_seq"])
    if outcome == "bound":
        if isinstance(db, asyncpg.Pool):
            async with db.acquire() as conn:
                return await _append_pieces(conn, row["held_session"], runner_job_id, channel,
                                            batch_seq, pieces, max_bytes, stream)
        return await _append_pieces(db, row["held_session"], runner_job_id, channel,
                                    batch_seq, pieces, max_bytes, stream)
    return bool(outcome == "stored")


def _out_of_order(batch_seq: int, expected: int) -> InvalidTransition:
    return InvalidTransition(f"batch {batch_seq} out of order; expected {expected}",
                             expectedSeq=expected)


async def _append_pieces(conn: DbConnection, session_id: str, runner_job_id: str, channel: str,
                         batch_seq: int, pieces: Sequence[Piece],
                         max_bytes: int | None, stream: str) -> bool:
    """:func:`append_batch` of prepared pieces, statement by statement in a transaction."""
    source_channel = channel if stream == "stdout" else f"{channel}:{stream}"
    async with conn.transaction():
        await conn.execute(SQL["ensure_head"], session_id, channel)
        last = await conn.fetchval(SQL["lock_head"], session_id, channel)
        source = await conn.fetchrow(SQL["source_batch"], runner_job_id, source_channel)
        taken, received = (source["batch_seq"], source["byte_offset"]) if source else (0, 0)
        if batch_seq <= taken:
            return False
        if batch_seq != taken + 1:
            raise _out_of_order(batch_seq, taken + 1)
        before = int(await conn.fetchval(SQL["channel_received"], runner_job_id, channel))
        stored, after = _pieces_within_bound(list(pieces), before, max_bytes, channel)
        if stored:
            seqs = list(range(last + 1, last + 1 + len(stored)))
            await conn.execute(SQL["insert_pieces"], session_id, channel, runner_job_id, seqs,
                               [piece.text for piece in stored], stream,
                               [piece.part for piece in stored],
                               [piece.parts for piece in stored])
            await conn.execute(SQL["save_head"], session_id, channel, seqs[-1])
        await conn.execute(SQL["save_batch"], runner_job_id, source_channel, batch_seq,
                           received + after - before)
        return True


def _pieces_within_bound(pieces: list[Piece], received: int, max_bytes: int | None,
                         channel: str) -> tuple[list[Piece], int]:
    """:func:`within_bound` for pieces: those that fit, then its notice (a whole line)."""
    texts, total = within_bound([piece.text for piece in pieces], received, max_bytes,
                                channel)
    noticed = max_bytes is not None and total > max_bytes >= received
    kept = len(texts) - noticed
    return [*pieces[:kept], *([Piece(texts[-1])] if noticed else [])], total


def within_bound(lines: list[str], received: int, max_bytes: int | None,
                 channel: str) -> tuple[list[str], int]:
    """The lines of a batch that fit in a job channel's bound, given the bytes ``received``
    before it (kept in the source's ``byte_offset``), and the bytes received after it. The
    batch that crosses the bound keeps its lines that fit and one notice in place of the
    rest; later batches keep nothing. The runner bounds its output first (DESIGN 13): this
    is the manager's own net against a runner that does not."""
    sizes = [len(line.encode()) + 1 for line in lines]
    total = received + sum(sizes)
    if max_bytes is None or total <= max_bytes:
        return lines, total
    if received > max_bytes:
        return [], total
    kept, used = 0, received
    while used + sizes[kept] <= max_bytes:
        used += sizes[kept]
        kept += 1
    notice = (f"[svc] the manager stores no more of this job's {channel} past its bound of "
              f"{max_bytes} bytes (SVC_OUTPUT_MAX_BYTES)")
    return [*lines[:kept], notice], total


async def last_seq(db: Queryable, session_id: str, channel: str) -> int:
    """The seq of the channel's newest line (0 when it has none)."""
    return int(await db.fetchval(SQL["last_seq"], session_id, channel))


async def page(db: Queryable, session_id: str, channel: str, after_seq: int,
               limit: int) -> tuple[list[Line], int]:
    """Lines after ``after_seq`` (at most ``limit``, and no more once they hold
    :data:`MAX_PAGE_BYTES`: lines of 64 KiB keep a page bounded) and the channel's last
    seq."""
    rows = await db.fetch(SQL["page"], session_id, channel, after_seq, limit, MAX_PAGE_BYTES)
    lines = [Line(r["seq"], r["runner_job_id"], r["line"], r["recorded_at"], r["stream"],
                  r["part"], r["parts"]) for r in rows]
    return lines, await last_seq(db, session_id, channel)
