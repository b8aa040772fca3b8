"""What one scrape of ``/metrics`` exposes beside the counters of :class:`api.observability.
Metrics`: the figures the projections hold (the same from every worker), the build, and the
processes' own metrics.

With ``svc serve --workers N`` (N > 1) the supervisor gives its workers a private
``PROMETHEUS_MULTIPROC_DIR`` (:mod:`api.metrics_dir`): each worker's counters live in files
there, and whichever worker answers a scrape sums them all, so every scrape sees one view.
"""

from __future__ import annotations

import functools
import os
import platform
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ledger.version import VERSION
from projections.metrics_queries import ServiceFigures

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
_PID_IN_FILE = re.compile(r"_(\d+)\.db$")


class Collected(Collector):
    """Families already built, handed to the exposition as one collector."""

    def __init__(self, *sources: Iterable[Metric]) -> None:
        self._sources = sources

    def collect(self) -> Iterator[Metric]:
        """Every family of every source, in order."""
        for source in self._sources:
            yield from source


def figure_families(figures: ServiceFigures | None) -> Iterator[Metric]:
    """The projections' figures as families, and whether the database answered."""
    up = GaugeMetricFamily("svc_database_up", "1 when the database answered this scrape")
    up.add_metric([], 0.0 if figures is None else 1.0)
    yield up
    if figures is None:
        return
    tasks = GaugeMetricFamily("svc_queue_tasks", "Tasks by queue, lane, state and profile",
                              labels=["queue", "lane", "state", "profile"])
    for queue, lane, state, profile, count in figures.tasks:
        tasks.add_metric([queue, lane, state, profile], count)
    oldest = GaugeMetricFamily(
        "svc_queue_oldest_pending_seconds",
        "Age of the oldest pending task of a queue and lane (absent: none pending)",
        labels=["queue", "lane"])
    for queue, lane, seconds in figures.oldest_pending_s:
        oldest.add_metric([queue, lane], seconds)
    jobs = GaugeMetricFamily("svc_runner_jobs", "Runner jobs not yet ended, by state",
                             labels=["state"])
    for state, count in sorted(figures.runner_jobs.items()):
        jobs.add_metric([state], count)
    lost = CounterMetricFamily("svc_runner_lost", "Runs that ended runner-lost (from the "
                               "ledger's projections: the same from every worker)",
                               value=figures.runner_lost)
    tokens = CounterMetricFamily("svc_tokens", "Tokens the ended attempts' backends reported, "
                                 "by queue, profile and kind", labels=["queue", "profile", "kind"])
    for queue, profile, kind, count in figures.tokens:
        tokens.add_metric([queue, profile, kind], count)
    yield from (tasks, oldest, jobs, lost, tokens)


def build_families() -> Iterator[Metric]:
    """``svc_build_info``: 1, labelled with the version and the Python it runs on."""
    info = GaugeMetricFamily("svc_build_info", "The service's build (always 1)",
                             labels=["version", "python"])
    info.add_metric([VERSION, platform.python_version()], 1.0)
    yield info


def process_families(shared: Path | None) -> Iterable[Metric]:
    """The process metrics (``process_*``): this process's alone, or with workers sharing
    ``shared``, every live worker's and the supervisor's, each labelled with its ``pid``."""
    if shared is None:
        return ProcessCollector(registry=None).collect()
    merged: dict[str, Metric] = {}
    for pid in serving_pids(shared):
        for family in ProcessCollector(pid=functools.partial(int, pid), registry=None).collect():
            into = merged.setdefault(family.name, Metric(family.name, family.documentation,
                                                         family.type))
            into.samples.extend(Sample(s.name, {**s.labels, "pid": str(pid)}, s.value)
                                for s in family.samples)
    return merged.values()


def serving_pids(shared: Path) -> list[int]:
    """The supervisor and its live workers: the processes with files in ``shared`` whose
    parent is this worker's parent (a dead worker's files stay, its pid is skipped)."""
    supervisor = os.getppid()
    found = {int(match.group(1)) for name in os.listdir(shared)
             if (match := _PID_IN_FILE.search(name))}
    return [supervisor, *sorted(pid for pid in found | {os.getpid()}
                                if parent_of(pid) == supervisor)]


def parent_of(pid: int) -> int | None:
    """The parent of process ``pid`` (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # after the command name: state, ppid
