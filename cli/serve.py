"""``svc serve``: start the database (embedded unless ``SVC_DATABASE_URL``), migrate, serve."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import signal
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Unpack

from cyclopts import Parameter

from api.variables import help_text
from cli import render

if TYPE_CHECKING:
    from api.server import ServeOptions
    from api.settings import ServiceSettings

QUICK_START = """\
Try it in another terminal (`source .venv/bin/activate` first; add --api {api} if you
changed the address):
  TASK=$(echo '{{"tenantId":"acme","projectId":"demo","queue":"main","title":"Say hello",\
"payload":{{"prompt":"print hello"}}}}' | svc queue submit --json-stdin --raw \
| python3 -c 'import json,sys; print(json.load(sys.stdin)["taskId"])')
  svc queue dispatch $TASK        # runs the reference backend as a local runner job
  svc queue refresh $TASK         # writes the finished run back: completed
  svc queue attempts $TASK
  svc queue list; svc queue stats; svc queue commander --reader-id me
  svc ledger replay --verify      # rebuild every projection from the ledger and compare
OpenAPI document: {api}/api/v1/schema"""

MAX_WORKERS = 64

SANDBOX_BANNER = {
    ("local", "bwrap"): "local sandbox: bwrap (backends see only their own job)",
    ("local", "off"): "local sandbox: OFF (SVC_LOCAL_SANDBOX=off): backends run unsandboxed and "
                      "can read every secret and job under the data directory",
    ("kubernetes", "bwrap"): "pod sandbox: bwrap (a backend cannot read its runner's token; "
                             "nodes must allow user namespaces)",
    ("kubernetes", "off"): "pod sandbox: OFF (SVC_POD_SANDBOX=off): a backend can read its "
                           "runner's token and speak for its runner",
}


def ensure_demo_secret(data: Path) -> bool:
    """With the embedded defaults, give profile-1 a placeholder secret (reference backend
    only) so the quick start can dispatch. Returns True when it created one."""
    from runner_assembly.assembly.profiles import PROFILE_SECRETS
    from runner_assembly.settings import DEFAULT_NAMESPACE

    secret = PROFILE_SECRETS["profile-1"]
    folder = data / "secrets" / DEFAULT_NAMESPACE / secret.name
    if folder.exists():
        return False
    folder.mkdir(parents=True, mode=0o700)
    for key in secret.keys:
        (folder / key).write_text("# placeholder for the reference backend; not a credential\n")
    return True


async def _migrate(url: str) -> list[str]:
    import asyncpg

    from ledger.migrate import migrate

    conn = await asyncpg.connect(url)
    try:
        return [m.name for m in await migrate(conn)]
    finally:
        await conn.close()


async def _first_admin_key(url: str, data: Path) -> Path | None:
    from api.auth_bootstrap import ensure_admin_key

    return await ensure_admin_key(url, data)


def serve(
    *,
    host: Annotated[str, Parameter(env_var="SVC_HOST", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, Parameter(env_var="SVC_PORT", help="Port to listen on.")] = 8080,
    workers: Annotated[int | None, Parameter(
        env_var="SVC_WORKERS",
        help="API processes sharing the port (default: the CPUs this process may use, its "
             "cgroup's CPU quota included). The database "
             "is started and migrated once; SIGTERM or Ctrl-C stops every worker.")] = None,
) -> int:
    """Run the API. Data lives under SVC_DATA_DIR (default .svc): an embedded Postgres is
    started there unless SVC_DATABASE_URL names a server. Migrations are applied first.

    Example: SVC_DATA_DIR=/var/lib/svc svc serve --port 8081 --workers 2
    """
    import asyncpg
    import msgspec
    import uvicorn

    from api.app import create_app
    from api.cpus import usable_cpus
    from api.observability import configure_logging
    from api.server import uvicorn_options
    from api.settings import ServiceSettings
    from ledger.database import resolve_database_urls
    from runner_assembly.assembly.defaults import DefaultsError
    from runner_assembly.drivers import DRIVERS, DriverError, make_driver

    try:
        service = ServiceSettings.from_env()  # the one read of the environment
        data = service.data_path()
        settings = service.runner(data)
        if settings.driver in DRIVERS:
            make_driver(settings)  # fail now, clearly, not in the middle of startup
        http = service.http()
    except (DefaultsError, DriverError, ValueError) as error:
        render.error("invalid-request", str(error))
        return 2
    if settings.driver not in DRIVERS:
        render.error("invalid-request", f"unknown runner driver {settings.driver!r}; "
                     f"SVC_RUNNER_DRIVER is one of {', '.join(DRIVERS)}")
        return 2
    workers = usable_cpus() if workers is None else workers
    if not 1 <= workers <= MAX_WORKERS:
        render.error("invalid-request",
                     f"SVC_WORKERS/--workers must be between 1 and {MAX_WORKERS}, not {workers}")
        return 2
    refusal = _unusable_address(host, port) or _forwarded_service(service, port)
    if refusal is not None:
        render.error("invalid-request", refusal)
        return 2
    try:
        urls = resolve_database_urls(service.database_url, service.migrate_database_url, data)
        applied = asyncio.run(_migrate(urls.owner))
        admin_key = None if service.admin_key_sha256 else asyncio.run(
            _first_admin_key(urls.owner, data))
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as error:
        render.error("infra-failed", f"cannot use the database ({type(error).__name__}: "
                     f"{error}); is SVC_DATABASE_URL right and its server up?")
        return 3
    server, url = urls.server, urls.app
    where = ("SVC_DATABASE_URL" if server is None
             else f"embedded Postgres in {data / 'pg'}, serving as svc_api")
    api = f"http://{host}:{port}"
    listener = None
    if settings.runner_api_url is None and settings.driver == "local":  # pods: the Service
        local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
        runner_api = f"http://[{local}]:{port}" if ":" in local else f"http://{local}:{port}"
        settings = dataclasses.replace(settings, runner_api_url=runner_api)
        service = msgspec.structs.replace(service, runner_api_url=runner_api)
        if workers > 1:
            listener = _runner_listener(data)
            if listener is not None:
                service = msgspec.structs.replace(service,
                                                  runner_api_socket=listener.getsockname())
    render.out(f"svc serving on {api} with {workers} worker{'s' * (workers > 1)} "
               f"(database: {where}; migrations applied: {', '.join(applied) or 'none pending'})")
    render.out(SANDBOX_BANNER[settings.driver, settings.sandbox])
    if listener is not None:
        render.out(f"runner protocol: a worker of its own on {listener.getsockname()} (local "
                   f"runners reach it there; {settings.runner_api_url} serves them too)")
    if settings.backend_network == "pasta":
        forwarded = ", ".join(map(str, settings.backend_loopback_ports)) or "none"
        render.out("backend network: a namespace of its own (pasta): the network, but no "
                   "loopback service of this host (forwarded, SVC_BACKEND_LOOPBACK_PORTS: "
                   f"{forwarded})")
    elif settings.backend_network == "proxy":
        render.out("backend network: a namespace with only a loopback: out through its "
                   "runner's egress proxy (public hosts; never the manager or the database; "
                   "other hosts only as SVC_FETCH_ALLOW_HOSTS allows)")
    if admin_key is not None:
        render.out(f"wrote the first admin API key to {admin_key} (0600): the CLI sends it "
                   "from there (or set SVC_TOKEN); `svc auth key create` makes others")
    if server is not None and ensure_demo_secret(data):
        render.out(f"created a placeholder profile-1 secret under {data / 'secrets'} "
                   "(reference backend only)")
    render.out(QUICK_START.format(api=api))
    sys.stdout.flush()  # the banner reaches a log file now, not when the server stops
    configure_logging(service.log_level.upper())
    # uvicorn re-raises SIGTERM after its graceful shutdown: exit through Python instead, so
    # the embedded Postgres is stopped (and its pid list cleared) on SIGTERM as on Ctrl-C.
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(0))
    options: ServeOptions = {"host": host, "port": port, "log_level": "warning",
                             "access_log": False, "log_config": None,
                             **uvicorn_options(http, workers)}
    started = True
    try:
        service = msgspec.structs.replace(service, database_url=url)  # resolved
        if workers == 1:
            uvicorn.run(create_app(url, settings=settings, service=service, long_lived=True),
                        **options)
        else:  # each worker builds the app from these settings (uvicorn's supervisor)
            started = supervise_with_relay(service, listener, **options)
    except KeyboardInterrupt:
        pass
    finally:
        if server is not None:
            server.cleanup()
    if not started:
        render.error("infra-failed", "a worker could not start (see the log above); every "
                     "worker was stopped")
        return 3
    return 0


serve.__doc__ = "\n\n".join([inspect.cleandoc(serve.__doc__ or ""), "Settings, read from the "
                              "environment once at start (README, Configuration):", help_text()])


def supervise_with_relay(service: ServiceSettings, listener: socket.socket | None,
                         **options: Unpack[ServeOptions]) -> bool:
    """Serve the workers with one ledger writer for them all (:mod:`ledger.relay`), on a
    thread of this process, which only supervises them otherwise; each worker is handed
    ``service`` and the relay's address; ``listener``: the runner listener's socket, served
    by a worker of its own."""
    import msgspec

    from api.app import relay_writer
    from api.worker import supervise
    from ledger.relay import RelayHost

    assert service.database_url is not None
    relay = RelayHost(functools.partial(relay_writer, service.database_url,
                                       not service.pgbouncer))
    try:
        try:
            service = msgspec.structs.replace(service, ledger_relay=relay.start().encode())
        except Exception as error:  # the workers can do without it, and will say what is wrong
            render.warn(f"the ledger relay did not start ({type(error).__name__}: {error}); "
                        "each worker writes through its own ledger writer")
        return supervise(service, listener, **options)
    finally:  # also on SIGTERM or Ctrl-C, even during the relay's start
        relay.stop()


def _runner_listener(data: Path) -> socket.socket | None:
    """The runner listener's socket in the data directory ``data``; None (said why) when it
    cannot be made: local runners then use the API's port."""
    from api.runner_listener import bind, socket_path

    path = socket_path(data)
    try:
        listener = None if path is None else bind(path)
    except OSError as error:
        render.warn(f"no runner listener at {path} ({error}); runners use the API's port")
        return None
    if listener is None:
        render.warn(f"no runner listener: {path or 'the data directory'} "
                    f"{'is in use or not a socket' if path else 'is too long a path'}; "
                    "runners use the API's port")
    return listener


def _forwarded_service(service: ServiceSettings, api_port: int) -> str | None:
    """Why ``SVC_BACKEND_LOOPBACK_PORTS`` cannot be served: it names the port of the API or
    of the database (DESIGN 13)."""
    from runner_assembly.runner.network import refused_ports, url_port

    return refused_ports(service.backend_loopback_ports, {
        "the API (SVC_PORT/--port)": api_port,
        "the runner protocol (SVC_RUNNER_API_URL)": url_port(service.runner_api_url, 80),
        "the database (SVC_DATABASE_URL)": url_port(service.database_url, 5432),
        "the schema owner's database (SVC_MIGRATE_DATABASE_URL)":
            url_port(service.migrate_database_url, 5432)})


def _unusable_address(host: str, port: int) -> str | None:
    """Why ``host:port`` cannot be served (a bad port, or another process holds it)."""
    if not 1 <= port <= 65535:
        return f"SVC_PORT/--port must be between 1 and 65535, not {port}"
    try:
        with socket.create_server((host, port)):
            return None
    except OSError as error:
        return f"cannot listen on {host}:{port}: {error.strerror} (is another `svc serve` " \
               "running? set SVC_PORT or --port)"
