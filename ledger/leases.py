"""Runner-job leases: liveness kept apart from history (issue 29, docs/decisions.md).

A heartbeat renews its job's row in place (one statement, no ledger entry); the lease check
reads the newer of the row and the job's last ledger event. The rows are not history: replay
neither reads nor rebuilds them, and a job without one is as silent as its ledger says.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

from ledger.database import Queryable
from ledger.grouped import LOCK_TIMEOUT
from ledger.sqlfile import load_queries

SQL = load_queries("ledger", "leases.sql")


async def renew(db: Queryable, runner_job_id: str, at: datetime,
                token_sha256: str | None = None, session_id: str | None = None) -> None:
    """Renew the job's lease to ``at`` (never back: a late, older beat changes nothing),
    keeping the hash of the token that renewed it, checked against the job's stream, and
    the job's session (None: the next beat is checked so too)."""
    await db.execute(SQL["renew"], runner_job_id, at, token_sha256, session_id)


async def renew_held(db: Queryable, runner_job_id: str, token_sha256: str,
                     at: datetime) -> bool:
    """Renew the lease if its row holds ``token_sha256`` (the token of the last renewal,
    checked then; the row lets go of it at the job's exit and goes at its end): True when it
    did. A lone statement, committed without waiting for the WAL flush (liveness, not
    history): never call it on a connection inside a transaction that writes anything else,
    whose commit would then not wait either."""
    renewed: bool = await db.fetchval(SQL["renew_held"], runner_job_id, token_sha256, at)
    return renewed


class Beat(NamedTuple):
    """A heartbeat under a token the job's lease row should hold (:func:`renew_held`)."""

    runner_job_id: str
    token_sha256: str
    at: datetime


async def renew_held_group(db: Queryable, beats: Sequence[Beat]) -> list[bool]:
    """:func:`renew_held` of each beat, in order, in one statement (group commit,
    :mod:`ledger.grouped`): whether each renewed."""
    rows = await db.fetch(SQL["renew_held_group"], [beat.runner_job_id for beat in beats],
                          [beat.token_sha256 for beat in beats], [beat.at for beat in beats],
                          LOCK_TIMEOUT)
    return [bool(row[0]) for row in rows]


async def held_session(db: Queryable, runner_job_id: str, token_sha256: str) -> str | None:
    """The job's session if its row holds ``token_sha256`` (a live token of the claimed,
    running job, checked at the last full renewal); None: decide on the job's stream."""
    session_id: str | None = await db.fetchval(SQL["held_session"], runner_job_id,
                                               token_sha256)
    return session_id


async def last_seen(db: Queryable, runner_job_id: str) -> datetime | None:
    """When the job's runner last renewed its lease (None: it never did, or the job ended)."""
    seen: datetime | None = await db.fetchval(SQL["last_seen"], runner_job_id)
    return seen


async def let_go(db: Queryable, runner_job_id: str) -> None:
    """Forget which token renewed the lease (the job exited: its tokens are refused now)."""
    await db.execute(SQL["let_go"], runner_job_id)


async def release(db: Queryable, runner_job_id: str) -> None:
    """Forget the lease of a job that has ended."""
    await db.execute(SQL["release"], runner_job_id)
