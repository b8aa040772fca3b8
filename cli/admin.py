"""``svc db migrate`` and ``svc ledger replay``: operator commands that talk to Postgres."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

import asyncpg
from cyclopts import App, Parameter

from cli import render

db_app = App(name="db", help="Database schema.")
ledger_app = App(name="ledger", help="The append-only ledger: replay and audit.")


async def _connect() -> tuple[asyncpg.Connection, Any]:

    from ledger.database import resolve_database_url

    url, server = await asyncio.to_thread(resolve_database_url)
    return await asyncpg.connect(url), server


@db_app.command
def migrate() -> int:
    """Apply pending SQL migrations (the server also applies them at start)."""
    from ledger.migrate import migrate as apply

    async def main() -> int:
        conn, _server = await _connect()
        try:
            applied = await apply(conn)
        finally:
            await conn.close()
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in applied)
        render.out(f"applied: {names}" if applied else "schema is up to date")
        return 0

    return asyncio.run(main())


@ledger_app.command
def replay(*, verify: Annotated[bool, Parameter(
        help="Only compare: rebuild into scratch tables, diff, check the hash chain.")] = False,
           ) -> int:
    """Rebuild every projection from the ledger alone and compare it with the live tables.

    With --verify nothing is changed and the exit status is 0 only when the rebuilt
    projections equal the live ones and the hash chain verifies. Without it, the live
    projections are replaced by the rebuild (writers wait meanwhile).
    """
    from projections.replay import replay as run_replay

    async def main() -> int:
        conn, _server = await _connect()
        try:
            report = await run_replay(conn, repair=not verify)
        finally:
            await conn.close()
        render.out(f"events: {report.events}  streams: {report.streams}"
                   f"  seconds: {report.seconds:.2f}")
        render.out(f"hash chain: {report.chain_error or 'ok'}")
        for table, count in report.differences.items():
            sample = ", ".join(report.samples.get(table, []))
            render.out(f"{table}: {'equal' if not count else f'{count} differing rows'}"
                       + (f" (e.g. {sample})" if sample else ""))
        if report.repaired:
            render.out("live projections replaced by the rebuild")
        return 0 if report.ok or report.repaired else 1

    return asyncio.run(main())
