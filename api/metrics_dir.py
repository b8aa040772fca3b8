"""The directory the workers of ``svc serve --workers N`` keep their counters in
(Prometheus' multiprocess mode): made private by the supervisor before it starts them, named
to them in ``PROMETHEUS_MULTIPROC_DIR`` (:func:`api.worker.supervise`), removed when it
stops; a dead worker's live gauges go with it, its counters stay (a counter never goes
back)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from prometheus_client.multiprocess import mark_process_dead
from uvicorn.supervisors.multiprocess import Multiprocess


@contextmanager
def private_metrics_dir() -> Iterator[Path]:
    """A fresh private directory (0700), removed with everything in it afterwards."""
    path = Path(tempfile.mkdtemp(prefix="svc-metrics-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class MetricsSupervisor(Multiprocess):
    """uvicorn's supervisor, which also forgets the live gauges of every worker it replaced
    (died, hung, or restarted on SIGHUP)."""

    def __init__(self, *args: object, metrics_dir: Path, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
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
