"""One process of ``svc serve --workers N``: its app and HTTP protocol, built from the
environment the supervising ``svc serve`` prepared (the database already resolved and
migrated), because uvicorn starts each worker afresh from import strings."""

from __future__ import annotations

import os
from functools import cache
from typing import Unpack

from litestar import Litestar

from api.server import (
    DeadlineProtocol,
    HttpSettings,
    ServeOptions,
    connection_cap,
    protocol_class,
    raise_fd_limit,
)


def create() -> Litestar:
    """The worker's app (uvicorn's factory): JSON logs, then the API on ``SVC_DATABASE_URL``."""
    from api.app import create_app
    from api.observability import configure_logging
    from ledger.database import data_dir
    from runner_assembly.settings import RunnerSettings

    configure_logging(os.environ.get("SVC_LOG_LEVEL", "INFO").upper())
    return create_app(os.environ["SVC_DATABASE_URL"],
                      settings=RunnerSettings.from_env(data_dir()))


@cache
def _protocol() -> type[DeadlineProtocol]:
    settings = HttpSettings.from_env()
    return protocol_class(settings, connection_cap(settings.max_connections, raise_fd_limit()))


def __getattr__(name: str) -> type[DeadlineProtocol]:
    """``Protocol``: the worker's HTTP protocol, bound to its own settings and connection cap."""
    if name == "Protocol":
        return _protocol()
    raise AttributeError(name)


def supervise(app: str, **options: Unpack[ServeOptions]) -> bool:
    """Serve ``app`` (a factory's import string) with uvicorn's supervisor until SIGTERM or
    SIGINT stops every worker; False when a worker could not start (all were stopped)."""
    from uvicorn.config import STARTUP_FAILURE, Config
    from uvicorn.supervisors.multiprocess import Multiprocess

    # The workers share one listening socket, and libuv accepts every pending connection
    # at once: whichever worker woke first took them all (a keep-alive client stays with
    # it). One accept per wake-up spreads connections made together across the workers.
    os.environ.setdefault("UV_TCP_SINGLE_ACCEPT", "1")
    config = Config(app, factory=True, **options)
    supervisor = Multiprocess(config, sockets=[config.bind_socket()])
    supervisor.run()
    return not any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes)
