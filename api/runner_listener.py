"""The runner listener of ``svc serve --workers N`` (N ≥ 2, local driver): the runner
protocol on a Unix socket in the data directory, served by a worker of its own.

A fleet's reports (heartbeats, line batches, every second from hundreds of runners) then
wait in that worker's event loop, not in front of callers' requests in the API workers'
(measured in ``docs/performance.md``: the list p99 under a fleet of 200). The socket's
path depends only on the data directory, so runners started before a restart find the
restarted server there; a runner that finds no listener uses ``SVC_RUNNER_API_URL``, which
every API worker still serves. The socket is the owner's alone (0600 in the data
directory); sandboxed backends do not see the data directory (DESIGN 8, 13).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import stat
from pathlib import Path

from uvicorn.config import STARTUP_FAILURE, Config
from uvicorn.supervisors.multiprocess import Process

from api.metrics_dir import MetricsSupervisor

SOCKET_NAME = "runner.sock"
MAX_PATH_BYTES = 100
"""Longest socket path bound (Linux allows 107 bytes): a longer data directory has no
runner listener; its runners use the API's port."""
BACKLOG = 2048
PROBE_S = 1.0
"""How long the probe of a socket left in the data directory may take to connect."""

logger = logging.getLogger("uvicorn.error")


def socket_path(data_dir: Path) -> Path | None:
    """Where the runner listener of ``data_dir`` listens; None when the path is too long."""
    path = data_dir / SOCKET_NAME
    return path if len(os.fsencode(path)) <= MAX_PATH_BYTES else None


def bind(path: Path) -> socket.socket | None:
    """A listening Unix socket at ``path``, readable and writable by this user alone; a stale
    socket left by a server that has ended is replaced. None when another server answers
    there (its runners keep it) or the path is not a socket."""
    with contextlib.suppress(FileNotFoundError):
        if not stat.S_ISSOCK(path.lstat().st_mode):
            return None
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(PROBE_S)
        try:
            probe.connect(str(path))
            return None  # a live server's listener
        except ConnectionRefusedError:
            path.unlink()
        except OSError:  # busy (its backlog full): live
            return None
        finally:
            probe.close()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        os.chmod(path, 0o600)  # before listen: nobody can connect yet
        listener.listen(BACKLOG)
    except OSError:
        listener.close()
        raise
    return listener


class ListenerSupervisor(MetricsSupervisor):
    """uvicorn's supervisor of the API workers, and of the runner listener's worker when
    ``listener`` gives its configuration and socket: started, replaced when it dies or
    hangs, and stopped with the others."""

    def __init__(self, config: Config, sockets: list[socket.socket], metrics_dir: Path,
                 listener: tuple[Config, socket.socket] | None = None) -> None:
        super().__init__(config, sockets, metrics_dir)
        self.listener = listener
        self.listener_process: Process | None = None

    def every_process(self) -> list[Process]:
        """The API workers and the listener's worker."""
        return [*self.processes, *([self.listener_process] if self.listener_process else [])]

    def init_processes(self) -> None:
        """Start the API workers, then the listener's."""
        super().init_processes()
        self.listener_process = self._new_listener()

    def keep_subprocess_alive(self) -> None:
        """Replace dead or hung workers, the listener's included."""
        super().keep_subprocess_alive()
        process = self.listener_process
        if self.should_exit.is_set() or process is None or \
                process.is_alive(timeout=self.config.timeout_worker_healthcheck):
            return
        self._end(process, kill=True)
        if process.exitcode == STARTUP_FAILURE:
            logger.error("The runner listener's worker failed to start, stopping.")
            self.should_exit.set()
            return
        self.listener_process = self._new_listener()

    def restart_all(self) -> None:
        """Replace every worker (SIGHUP), the listener's after the others; a replacement
        not ready in time is stopped and the old worker kept, as uvicorn does."""
        super().restart_all()
        old = self.listener_process
        if old is None or self.should_exit.is_set():
            return
        new = self._new_listener()
        assert new is not None
        if not new.wait_until_ready(self.config.timeout_worker_healthcheck, self.should_exit):
            self._end(new, kill=True)
            return
        self.listener_process = new
        self._end(old, kill=False)

    def terminate_all(self) -> None:
        """Ask every worker to stop."""
        super().terminate_all()
        if self.listener_process is not None:
            self.listener_process.terminate()

    def join_all(self) -> None:
        """Wait for every worker."""
        super().join_all()
        if self.listener_process is not None:
            self.listener_process.join()

    def _end(self, process: Process, *, kill: bool) -> None:
        """Kill (or ask to stop) ``process``, wait for it, forget its live gauges."""
        if kill:
            process.kill()
        else:
            process.terminate()
        process.join()
        if process.pid is not None:
            self._forget({process.pid})

    def _new_listener(self) -> Process | None:
        if self.listener is None:
            return None
        config, listening = self.listener
        process = Process(config, [listening])
        process.start()
        return process
