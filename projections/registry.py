"""The registry: every projection, in the order its tables are written, replayed and diffed."""

from __future__ import annotations

from typing import Any

from projections import (
    api_keys,
    attempt_summary,
    commander,
    core_records,
    judge_run,
    queue_stats,
    read_cursor,
    session_summary,
    task_summary,
)
from projections.projection import Projection

REGISTRY: tuple[Projection[Any], ...] = (
    *task_summary.PROJECTIONS,
    *read_cursor.PROJECTIONS,
    *queue_stats.PROJECTIONS,
    *commander.PROJECTIONS,
    *attempt_summary.PROJECTIONS,
    *judge_run.PROJECTIONS,
    *core_records.PROJECTIONS,
    *session_summary.PROJECTIONS,
    *api_keys.PROJECTIONS,
)
TABLES = tuple(p.table for p in REGISTRY)
if len(set(TABLES)) != len(TABLES):
    raise ValueError(f"a projection table is declared twice: {TABLES}")
