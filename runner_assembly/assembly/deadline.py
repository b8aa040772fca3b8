"""A runner job's deadline: its queue's timeout budget (``SVC_QUEUE_TIMEOUT_BUDGETS``) plus
a margin, rendered as the Kubernetes Job's ``activeDeadlineSeconds``. A queue without a
budget has no deadline."""

from __future__ import annotations

import re
from collections.abc import Mapping

DEADLINE_MARGIN_S = 300
"""Added to the budget: the image pull, the assembly step and the runner's last report
happen inside the Job's deadline too, and must not eat the backend's budget."""
_BUDGET = re.compile(r"(?:\d{1,9}[smhd]?)+")
_PART = re.compile(r"(\d{1,9})([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def budget_seconds(text: str) -> int | None:
    """Seconds of a budget such as ``3600``, ``90s``, ``30m``, ``2h``, ``1d`` or ``1h30m``;
    None when the text is not one (or is zero)."""
    text = text.strip().lower()
    if not _BUDGET.fullmatch(text):
        return None
    total = sum(int(number) * _UNIT_S[unit] for number, unit in _PART.findall(text))
    return total or None


def job_deadline_s(budgets: Mapping[str, str], queue: str | None) -> int | None:
    """``activeDeadlineSeconds`` of a job of ``queue``: its budget plus
    :data:`DEADLINE_MARGIN_S`, or None when the queue has no budget."""
    budget = budgets.get(queue) if queue else None
    seconds = budget_seconds(budget) if budget else None
    return None if seconds is None else seconds + DEADLINE_MARGIN_S
