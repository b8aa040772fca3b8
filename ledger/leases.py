"""Runner-job leases: liveness kept apart from history (issue 29, docs/decisions.md).

A heartbeat renews its job's row in place (one statement, no ledger entry); the lease check
reads the newer of the row and the job's last ledger event. The rows are not history: replay
neither reads nor rebuilds them, and a job without one is as silent as its ledger says.
"""

from __future__ import annotations

from datetime import datetime

from ledger.database import Queryable
from ledger.sqlfile import load_queries

SQL = load_queries("ledger", "leases.sql")


async def renew(db: Queryable, runner_job_id: str, at: datetime) -> None:
    """Renew the job's lease to ``at`` (never back: a late, older beat changes nothing)."""
    await db.execute(SQL["renew"], runner_job_id, at)


async def last_seen(db: Queryable, runner_job_id: str) -> datetime | None:
    """When the job's runner last renewed its lease (None: it never did, or the job ended)."""
    seen: datetime | None = await db.fetchval(SQL["last_seen"], runner_job_id)
    return seen


async def release(db: Queryable, runner_job_id: str) -> None:
    """Forget the lease of a job that has ended."""
    await db.execute(SQL["release"], runner_job_id)
