"""How many CPUs this process may use: its affinity, capped by its cgroup's CPU quota.

A container limited to one CPU on a 64-core node sees 64 cores in ``os.cpu_count()``; its
cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``/``cpu.cfs_period_us``) says one.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

CGROUP = Path("/sys/fs/cgroup")


def usable_cpus(cgroup: Path = CGROUP) -> int:
    """The CPUs the scheduler lets this process run on, at most its CPU quota (rounded up),
    and at least one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    quota = cpu_quota(cgroup)
    return max(1, min(cpus, math.ceil(quota)) if quota is not None else cpus)


def cpu_quota(cgroup: Path = CGROUP) -> float | None:
    """The cgroup's CPU quota in CPUs (None: no quota, or no cgroup to read)."""
    v2 = _read(cgroup / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        return _ratio(quota, period)
    for v1 in (cgroup / "cpu", cgroup / "cpu,cpuacct"):
        quota_us = _read(v1 / "cpu.cfs_quota_us")
        if quota_us is not None:
            return _ratio(quota_us, _read(v1 / "cpu.cfs_period_us") or "")
    return None


def _ratio(quota: str, period: str) -> float | None:
    try:
        value, per = float(quota), float(period)
    except ValueError:
        return None  # "max": no quota
    return value / per if value > 0 and per > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None
