"""The directory the workers of ``svc serve --workers N`` keep their counters in
(Prometheus' multiprocess mode): made private by the supervisor before it starts them, named
to them in ``PROMETHEUS_MULTIPROC_DIR`` (:func:`api.worker.supervise`), removed when it
stops; a dead worker's live gauges go with it, its counters stay (a counter never goes
back)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from socket import socket

from prometheus_client.multiprocess import mark_process_dead
from uvicorn.config import Config
from uvicorn.supervisors.multiprocess import Multiprocess

from runner_assembly.processes import process_exists

PREFIX = "svc-metrics-"


@contextmanager
def private_metrics_dir(parent: Path | None = None) -> Iterator[Path]:
    """A fresh private directory (0700) in ``parent`` (the temporary directory), named with
    this process's id and removed with everything in it afterwards; the ones a supervisor
    killed before it could remove its own are removed first (:func:`remove_orphans`)."""
    parent = parent or Path(tempfile.gettempdir())
    remove_orphans(parent)
    path = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def remove_orphans(parent: Path) -> list[Path]:
    """Remove this user's metrics directories in ``parent`` whose supervisor no longer runs
    (or ran under this process's id: a container restarted keeps its ``/tmp``)."""
    removed = []
    for path in parent.glob(f"{PREFIX}*-*"):
        pid = path.name.removeprefix(PREFIX).split("-", 1)[0]
        if pid.isdigit() and path.stat().st_uid == os.getuid() and (
                int(pid) == os.getpid() or not process_exists(int(pid))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed





class MetricsSupervisor(Multiprocess):
    """uvicorn's supervisor, which also forgets the live gauges of every worker it replaced
    (died, hung, or restarted on SIGHUP)."""

    def __init__(self, config: Config, sockets: list[socket], metrics_dir: Path) -> None:
        super().__init__(config, sockets)
        self.metrics_dir = metrics_dir

    def keep_subprocess_alive(self) -> None:
        """Replace dead workers, as uvicorn does; then forget them."""
        serving = self._pids()
        super().keep_subprocess_alive()
        self._forget(serving - self._pids())

    def restart_all(self) -> None:
        """Replace every worker, as uvicorn does; then forget the replaced ones."""
        serving = self._pids()
        super().restart_all()
        self._forget(serving - self._pids())

    def _pids(self) -> set[int]:
        return {process.pid for process in self.processes if process.pid is not None}

    def _forget(self, gone: set[int]) -> None:
        for pid in gone:
            mark_process_dead(pid, str(self.metrics_dir))  # type: ignore[no-untyped-call]
