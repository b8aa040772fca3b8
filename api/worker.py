"""One process of ``svc serve --workers N``: its app and HTTP protocol, built from the
settings the supervising ``svc serve`` hands it (msgspec JSON inside uvicorn's configuration,
which each worker receives pickled: the database already resolved and migrated).

A worker ends with its supervisor, however the supervisor ends (``kill -9`` included): it
asks Linux for ``SIGKILL`` when its parent dies (``PR_SET_PDEATHSIG``), and a watchdog thread
ends it when its parent changes (other systems, and a supervisor that died before the worker
could ask). An orphan would keep the port and answer 503 forever (its ledger relay lived in
the supervisor), and fight a restarted server over the port. Nothing acknowledged is lost:
an answer leaves only after its commit.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path
from socket import socket
from typing import Any, Unpack

import msgspec
from litestar import Litestar
from uvicorn.config import Config

from api.metrics_export import MULTIPROC_ENV
from api.server import ServeOptions, connection_cap, protocol_class, raise_fd_limit
from api.settings import ServiceSettings


def create(settings: bytes) -> Litestar:
    """The worker's app (uvicorn's factory): JSON logs, then the API on the settings'
    database."""
    from api.app import create_app
    from api.observability import configure_logging

    service = ServiceSettings.decode(settings)
    configure_logging(service.log_level.upper())
    assert service.database_url is not None, "svc serve hands its workers the database"
    shared = os.environ.get(MULTIPROC_ENV)  # set by the supervisor: counters in its files
    return create_app(service.database_url, settings=service.runner(), service=service,
                      metrics_dir=Path(shared) if shared else None, long_lived=True)


PR_SET_PDEATHSIG = 1
WATCH_S = 0.2
"""How often the watchdog looks at the worker's parent."""


def end_with(supervisor: int) -> None:
    """In a worker: be killed when the supervisor (pid ``supervisor``) ends, however."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    threading.Thread(target=_watch, args=(supervisor,), name="supervisor-watchdog",
                     daemon=True).start()


def _watch(supervisor: int) -> None:
    """End this process as soon as its parent is no longer ``supervisor`` (at once if it
    already is not: it died before the death signal was asked for)."""
    while os.getppid() == supervisor:
        time.sleep(WATCH_S)
    os.kill(os.getpid(), signal.SIGKILL)


class WorkerConfig(Config):
    """uvicorn's configuration of the workers, carrying the settings: each worker builds its
    protocol (its own connection cap) and its app from them when it loads."""

    def __init__(self, settings: ServiceSettings, **options: Any) -> None:
        self.service_settings = settings.encode()
        self.supervisor = os.getpid()
        super().__init__(functools.partial(create, self.service_settings), factory=True, **options)

    def load(self) -> None:
        """In the worker: end with the supervisor, bind the protocol to the settings, then
        load as uvicorn does."""
        if os.getpid() != self.supervisor:
            end_with(self.supervisor)
        http = ServiceSettings.decode(self.service_settings).http()
        self.http = protocol_class(http, connection_cap(http.max_connections, raise_fd_limit()))
        super().load()


def supervise(settings: ServiceSettings, listener: socket | None = None,
              **options: Unpack[ServeOptions]) -> bool:
    """Serve the workers with uvicorn's supervisor until SIGTERM or SIGINT stops every one,
    their metrics shared (:mod:`api.metrics_dir`), and a worker of its own on the runner
    listener's socket ``listener`` (:mod:`api.runner_listener`); False when a worker could
    not start (all were stopped)."""
    from uvicorn.config import STARTUP_FAILURE

    from api.metrics_dir import private_metrics_dir
    from api.runner_listener import ListenerSupervisor

    # The workers share one listening socket, and libuv accepts every pending connection
    # at once: whichever worker woke first took them all (a keep-alive client stays with
    # it). One accept per wake-up spreads connections made together across the workers.
    os.environ.setdefault("UV_TCP_SINGLE_ACCEPT", "1")
    with private_metrics_dir() as metrics_dir:  # one view of the counters from any worker
        os.environ[MULTIPROC_ENV] = str(metrics_dir)  # the workers inherit it when spawned
        try:
            config = WorkerConfig(settings, **options)
            own = None if listener is None else (WorkerConfig(
                msgspec.structs.replace(settings, runner_listener=True),
                **{**options, "workers": 1}), listener)
            supervisor = ListenerSupervisor(config, sockets=[config.bind_socket()],
                                            metrics_dir=metrics_dir, listener=own)
            supervisor.run()
        finally:
            os.environ.pop(MULTIPROC_ENV, None)
    return not any(process.exitcode == STARTUP_FAILURE
                   for process in supervisor.every_process())
