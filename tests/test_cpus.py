"""`svc serve`'s default worker count follows the CPUs a container may use, not the node's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from api.cpus import cpu_quota, usable_cpus


def cgroup(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text + "\n")
    return tmp_path


@pytest.mark.parametrize(("files", "quota"), [
    ({"cpu.max": "100000 100000"}, 1.0),
    ({"cpu.max": "250000 100000"}, 2.5),
    ({"cpu.max": "max 100000"}, None),
    ({"cpu/cpu.cfs_quota_us": "50000", "cpu/cpu.cfs_period_us": "100000"}, 0.5),
    ({"cpu,cpuacct/cpu.cfs_quota_us": "-1", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, None),
    ({"cpu.max": "garbage"}, None),
    ({}, None),
])
def test_the_quota_is_read_from_cgroup_v2_or_v1(tmp_path: Path, files: dict[str, str],
                                                 quota: float | None) -> None:
    assert cpu_quota(cgroup(tmp_path, files)) == quota


def test_workers_are_capped_by_the_quota_rounded_up_and_never_zero(tmp_path: Path) -> None:
    cores = len(os.sched_getaffinity(0))
    assert usable_cpus(cgroup(tmp_path / "none", {})) == cores
    assert usable_cpus(cgroup(tmp_path / "one", {"cpu.max": "100000 100000"})) == 1
    assert usable_cpus(cgroup(tmp_path / "half", {"cpu.max": "50000 100000"})) == 1
    assert usable_cpus(cgroup(tmp_path / "many", {"cpu.max": "6400000 100000"})) == cores
