"""The peers' write rate on the same Postgres: Procrastinate ``defer_async`` and PgQueuer
``enqueue``, in-process (no HTTP), with N concurrent clients, each deferring one job at a
time with the body svc's submit benchmark sends. Runs in its own process (so neither peer's
imports nor its event loop share anything with the harness) and prints JSON.

    python -m tests.benchmarks.peers procrastinate|pgqueuer URL CLIENTS SECONDS
    python -m tests.benchmarks.peers procrastinate-batch|pgqueuer-batch URL CLIENTS SECONDS SIZE

The ``-batch`` peers defer SIZE jobs per call through their own batch API (Procrastinate
``batch_defer_async``, PgQueuer ``enqueue`` of lists); their rate counts jobs.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

BODY: dict[str, Any] = {"tenantId": "bench", "projectId": "bench", "queue": "bench",
                        "title": "bench", "payload": {"prompt": "benchmark prompt"}}
"""The JSON body of ``submit.lua``: each peer stores the same document per job."""
WARM_UP_S = 1.0


async def closed_loop(one: Callable[[], Awaitable[object]], clients: int,
                      seconds: float) -> float:
    """Jobs per second of ``clients`` coroutines calling ``one`` back to back, counted over
    ``seconds`` after a warm-up."""
    counted = 0
    start = time.perf_counter() + WARM_UP_S
    end = start + seconds

    async def client() -> None:
        nonlocal counted
        while (now := time.perf_counter()) < end:
            await one()
            if now >= start:
                counted += 1

    await asyncio.gather(*(client() for _ in range(clients)))
    return counted / seconds


async def procrastinate_rate(url: str, clients: int, seconds: float) -> float:
    """Procrastinate 3 ``defer_async`` on a psycopg pool of ``clients`` connections."""
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=url, min_size=clients, max_size=clients))

    @app.task(name="bench", queue="bench")
    async def bench(task: dict[str, Any]) -> None:
        """Never run: only deferred."""

    async with app.open_async():
        if not await _has_table(url, "procrastinate_jobs"):
            await app.schema_manager.apply_schema_async()
        return await closed_loop(lambda: bench.defer_async(task=BODY), clients, seconds)


async def pgqueuer_rate(url: str, clients: int, seconds: float) -> float:
    """PgQueuer ``Queries.enqueue`` of one job on an asyncpg pool of ``clients``
    connections."""
    import asyncpg
    from pgqueuer.db import AsyncpgPoolDriver
    from pgqueuer.queries import Queries

    payload = msgspec.json.encode(BODY)
    async with asyncpg.create_pool(url, min_size=clients, max_size=clients) as pool:
        queries = Queries(AsyncpgPoolDriver(pool))
        if not await _has_table(url, "pgqueuer"):
            await queries.install()
        return await closed_loop(lambda: queries.enqueue("bench", payload, 0), clients,
                                 seconds)


async def procrastinate_batch_rate(url: str, clients: int, seconds: float,
                                   size: int) -> float:
    """Procrastinate 3 ``batch_defer_async`` of ``size`` jobs a call: jobs per second."""
    from procrastinate import App, PsycopgConnector

    app = App(connector=PsycopgConnector(conninfo=url, min_size=clients, max_size=clients))

    @app.task(name="bench", queue="bench")
    async def bench(task: dict[str, Any]) -> None:
        """Never run: only deferred."""

    jobs: list[dict[str, Any]] = [{"task": BODY}] * size
    async with app.open_async():
        if not await _has_table(url, "procrastinate_jobs"):
            await app.schema_manager.apply_schema_async()
        calls = await closed_loop(lambda: bench.batch_defer_async(*jobs),
                                  clients, seconds)
        return calls * size


async def pgqueuer_batch_rate(url: str, clients: int, seconds: float, size: int) -> float:
    """PgQueuer ``Queries.enqueue`` of ``size`` jobs a call (its list form): jobs per
    second."""
    import asyncpg
    from pgqueuer.db import AsyncpgPoolDriver
    from pgqueuer.queries import Queries

    payload = msgspec.json.encode(BODY)
    payloads: list[bytes | None] = [payload] * size
    names, priorities = ["bench"] * size, [0] * size
    async with asyncpg.create_pool(url, min_size=clients, max_size=clients) as pool:
        queries = Queries(AsyncpgPoolDriver(pool))
        if not await _has_table(url, "pgqueuer"):
            await queries.install()
        calls = await closed_loop(lambda: queries.enqueue(names, payloads, priorities),
                                  clients, seconds)
        return calls * size


async def _has_table(url: str, name: str) -> bool:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return bool(await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", name))
    finally:
        await conn.close()


PEERS = {"procrastinate": procrastinate_rate, "pgqueuer": pgqueuer_rate}
BATCH_PEERS = {"procrastinate-batch": procrastinate_batch_rate,
               "pgqueuer-batch": pgqueuer_batch_rate}


def main() -> None:
    logging.basicConfig(level=logging.ERROR)  # not Procrastinate's "App in __main__" note
    peer, url, clients, seconds = sys.argv[1:5]
    if peer in BATCH_PEERS:
        rate = asyncio.run(BATCH_PEERS[peer](url, int(clients), float(seconds),
                                             int(sys.argv[5])))
    else:
        rate = asyncio.run(PEERS[peer](url, int(clients), float(seconds)))
    print(msgspec.json.encode({"peer": peer, "clients": int(clients), "per_s": rate}).decode())


if __name__ == "__main__":
    main()
