"""One process of ``svc serve --workers N``: its app and HTTP protocol, built from the
settings the supervising ``svc serve`` hands it (msgspec JSON inside uvicorn's configuration,
which each worker receives pickled: the database already resolved and migrated)."""

from __future__ import annotations

import functools
import os
from typing import Any, Unpack

from litestar import Litestar
from uvicorn.config import Config

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
    return create_app(service.database_url, settings=service.runner(), service=service)


class WorkerConfig(Config):
    """uvicorn's configuration of the workers, carrying the settings: each worker builds its
    protocol (its own connection cap) and its app from them when it loads."""

    def __init__(self, settings: ServiceSettings, **options: Any) -> None:
        self.service_settings = settings.encode()
        super().__init__(functools.partial(create, self.service_settings), factory=True, **options)

    def load(self) -> None:
        """In the worker: bind the protocol to the settings, then load as uvicorn does."""
        http = ServiceSettings.decode(self.service_settings).http()
        self.http = protocol_class(http, connection_cap(http.max_connections, raise_fd_limit()))
        super().load()


def supervise(settings: ServiceSettings, **options: Unpack[ServeOptions]) -> bool:
    """Serve the workers with uvicorn's supervisor until SIGTERM or SIGINT stops every one;
    False when a worker could not start (all were stopped)."""
    from uvicorn.config import STARTUP_FAILURE
    from uvicorn.supervisors.multiprocess import Multiprocess

    # The workers share one listening socket, and libuv accepts every pending connection
    # at once: whichever worker woke first took them all (a keep-alive client stays with
    # it). One accept per wake-up spreads connections made together across the workers.
    os.environ.setdefault("UV_TCP_SINGLE_ACCEPT", "1")
    config = WorkerConfig(settings, **options)
    supervisor = Multiprocess(config, sockets=[config.bind_socket()])
    supervisor.run()
    return not any(process.exitcode == STARTUP_FAILURE for process in supervisor.processes)
