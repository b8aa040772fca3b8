"""The figures ``/metrics`` reads from the projections at scrape time, in one statement
(``sql/metrics.sql``): the same from every worker, since they are the database's."""

from __future__ import annotations

from dataclasses import dataclass, field

from ledger.database import Queryable
from ledger.sqlfile import load_queries
from ledger.states import RunStatus

SQL = load_queries("projections", "metrics.sql")
LIVE_JOB_STATES = (RunStatus.CREATED.value, RunStatus.RUNNING.value)
"""Runner-job statuses ``svc_runner_jobs`` reports (jobs not yet ended), each even at 0."""


@dataclass(frozen=True)
class ServiceFigures:
    """What the projections say at one instant."""

    tasks: list[tuple[str, str, str, str, float]] = field(default_factory=list)
    """(queue, lane, state, profile, count) from ``queue_stats``; profile '' when none."""
    oldest_pending_s: list[tuple[str, str, float]] = field(default_factory=list)
    """(queue, lane, seconds) for each queue and lane with pending tasks."""
    runner_jobs: dict[str, float] = field(default_factory=dict)
    """Runner jobs not yet ended, by status."""
    runner_lost: float = 0.0
    """Runs that ended ``runner-lost``, ever."""
    tokens: list[tuple[str, str, str, float]] = field(default_factory=list)
    """(queue, profile, kind, tokens): the token usage of ended attempts, ever."""


async def service_figures(conn: Queryable, timeout_s: float) -> ServiceFigures:
    """Read every scrape-time figure in one statement."""
    figures = ServiceFigures(runner_jobs=dict.fromkeys(LIVE_JOB_STATES, 0.0))
    lost = 0.0
    for kind, queue, lane, state, profile, value in await conn.fetch(
            SQL["service_gauges"], timeout=timeout_s):
        if kind == "tasks":
            figures.tasks.append((queue, lane, state, profile, value))
        elif kind == "oldest":
            figures.oldest_pending_s.append((queue, lane, value))
        elif kind == "jobs":
            figures.runner_jobs[state] = value
        elif kind == "tokens":
            figures.tokens.append((queue, profile, state, value))
        else:
            lost = value
    return ServiceFigures(figures.tasks, figures.oldest_pending_s, figures.runner_jobs, lost,
                          figures.tokens)
