"""``svc db migrate`` and ``svc ledger replay``: operator commands that talk to Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from cyclopts import App, Parameter

from cli import render

if TYPE_CHECKING:
    import asyncpg

    from ledger.database import EmbeddedServer
    from projections.replay import ReplayReport

db_app = App(name="db", help="Database schema.")
ledger_app = App(name="ledger", help="The append-only ledger: replay and audit.")


class NoServiceData(Exception):
    """There is no database to read here: no SVC_DATABASE_URL and no embedded one."""


class InvalidSettings(Exception):
    """A setting the command needs cannot be read (the message names the variable)."""


def _run(main: Coroutine[Any, Any, int]) -> int:
    """Run a command; no database here is exit 3, an invalid setting exit 2."""
    try:
        return asyncio.run(main)
    except NoServiceData as error:
        render.error("not-found", str(error))
        return 3
    except InvalidSettings as error:
        render.error("invalid-request", str(error))
        return 2


async def _connect(
        *, owner: bool = False) -> tuple[asyncpg.Connection, EmbeddedServer | None]:
    """A connection as the service's role, or as the schema owner (migrations).

    Only ``svc db migrate`` (``owner``) may start a new embedded database: reading commands
    run in a directory without one would otherwise audit an empty, fresh Postgres.
    """
    import asyncpg

    from api.settings import ServiceSettings
    from ledger.database import resolve_database_urls

    try:
        service = ServiceSettings.from_env()
    except ValueError as error:
        raise InvalidSettings(str(error)) from None
    where = Path(service.data_dir).expanduser().resolve()
    if not owner and not service.database_url and not (where / "pg").is_dir():
        raise NoServiceData(f"no service database under {where}: run this where `svc serve` "
                            "keeps its data (SVC_DATA_DIR), or set SVC_DATABASE_URL")
    urls = await asyncio.to_thread(resolve_database_urls, service.database_url,
                                   service.migrate_database_url, where)
    return await asyncpg.connect(urls.owner if owner else urls.app), urls.server


Raw = Annotated[render.RawOption | None, Parameter(name="*")]


@db_app.command
def migrate(*, output: Raw = None) -> int:
    """Apply pending SQL migrations (the server also applies them at start).

    Example: SVC_DATA_DIR=/var/lib/svc svc db migrate
    """
    from ledger.migrate import migrate as apply

    async def main() -> int:
        conn, _server = await _connect(owner=True)
        try:
            applied = await apply(conn)
        finally:
            await conn.close()
        names = [f"{m.version:04d}_{m.name}" for m in applied]
        if output and output.raw:
            render.json_line({"applied": names})
        else:
            render.out(f"applied: {', '.join(names)}" if applied else "schema is up to date")
        return 0

    return _run(main())


@ledger_app.command
def anchor(*, output: Raw = None) -> int:
    """Print the head of the hash chain as SEQ:HASH.

    Keep it outside the database (a ticket, a commit, another system): later,
    `svc ledger replay --verify --anchor SEQ:HASH` proves the history up to SEQ is unchanged,
    even against a role that could rewrite the ledger and recompute its hashes.

    Example: svc ledger anchor >> anchors.txt
    """
    from ledger.anchor import head_anchor

    async def main() -> int:
        conn, _server = await _connect()
        try:
            head = await head_anchor(conn)
            if output and output.raw:
                render.json_line({"changeSeq": head.change_seq, "hash": head.hash.hex(),
                                  "anchor": str(head)})
            else:
                render.out(str(head))
        finally:
            await conn.close()
        return 0

    return _run(main())


@ledger_app.command
def replay(*, verify: Annotated[bool, Parameter(
        help="Only compare: rebuild into scratch tables, diff, check the hash chain.")] = False,
           anchor: Annotated[str | None, Parameter(
        help="SEQ:HASH from `svc ledger anchor`: also fail when the history up to SEQ "
             "no longer hashes to it.")] = None,
           output: Raw = None) -> int:
    """Rebuild every projection from the ledger alone and compare it with the live tables.

    With --verify nothing is changed and the exit status is 0 only when the rebuilt
    projections equal the live ones and the hash chain verifies (and reaches --anchor).
    Without it, the live projections are replaced by the rebuild (writers wait meanwhile).
    An entry that cannot be decoded is reported as `changeSeq N: <reason>` (exit 1).

    Example: svc ledger replay --verify --anchor 1234:9f86d0…
    """
    from ledger.anchor import anchor_error, parse_anchor
    from ledger.errors import DomainError
    from projections.replay import replay as run_replay

    async def main() -> int:
        wanted = parse_anchor(anchor) if anchor is not None else None
        conn, _server = await _connect()
        try:
            report = await run_replay(conn, repair=not verify)
            anchored = await anchor_error(conn, wanted) if wanted else None
        finally:
            await conn.close()
        ok = (report.ok or report.repaired) and anchored is None
        if output and output.raw:
            render.json_line({"ok": ok, "events": report.events, "streams": report.streams,
                              "seconds": round(report.seconds, 3),
                              "hashChain": report.chain_error or "ok",
                              "anchor": None if wanted is None else anchored or "ok",
                              "differences": report.differences, "samples": report.samples,
                              "repaired": report.repaired})
        else:
            _replay_text(report, None if wanted is None else anchored or "ok")
        return 0 if ok else 1

    try:
        return _run(main())
    except DomainError as error:
        render.error(error.code, error.message)
        return 1


def _replay_text(report: ReplayReport, anchored: str | None) -> None:
    """A replay's report, a line per check and per table."""
    render.out(f"events: {report.events}  streams: {report.streams}"
               f"  seconds: {report.seconds:.2f}")
    render.out(f"hash chain: {report.chain_error or 'ok'}")
    if anchored is not None:
        render.out(f"anchor: {anchored}")
    for table, count in report.differences.items():
        sample = ", ".join(report.samples.get(table, []))
        render.out(f"{table}: {'equal' if not count else f'{count} differing rows'}"
                   + (f" (e.g. {sample})" if sample else ""))
    if report.repaired:
        render.out("live projections replaced by the rebuild")
