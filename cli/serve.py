"""``svc serve``: start the database (embedded unless ``SVC_DATABASE_URL``), migrate, serve."""

from __future__ import annotations

import asyncio
from typing import Annotated

from cyclopts import Parameter

from cli import render

QUICK_START = """\
Try it (in another terminal, with the virtualenv's bin on PATH or via .venv/bin/svc):
  echo '{{"tenantId":"acme","projectId":"demo","queue":"main","title":"Say hello",\
"payload":{{"prompt":"print hello"}}}}' | svc queue submit --json-stdin --api {api}
  svc queue list --api {api}
  svc queue stats --api {api}
  svc queue commander --reader-id me --api {api}
  svc ledger replay --verify
OpenAPI document: {api}/api/v1/schema"""


async def _migrate(url: str) -> list[str]:
    import asyncpg

    from ledger.migrate import migrate

    conn = await asyncpg.connect(url)
    try:
        return [m.name for m in await migrate(conn)]
    finally:
        await conn.close()


def serve(
    *,
    host: Annotated[str, Parameter(env_var="SVC_HOST", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, Parameter(env_var="SVC_PORT", help="Port to listen on.")] = 8080,
) -> int:
    """Run the API. Data lives under SVC_DATA_DIR (default .svc): an embedded Postgres is
    started there unless SVC_DATABASE_URL names a server. Migrations are applied first."""
    import uvicorn

    from api.app import create_app
    from ledger.database import data_dir, resolve_database_url

    url, server = resolve_database_url()
    applied = asyncio.run(_migrate(url))
    where = "SVC_DATABASE_URL" if server is None else f"embedded Postgres in {data_dir() / 'pg'}"
    api = f"http://{host}:{port}"
    render.out(f"svc serving on {api} (database: {where}; migrations applied: "
               f"{', '.join(applied) or 'none pending'})")
    render.out(QUICK_START.format(api=api))
    uvicorn.run(create_app(url), host=host, port=port, log_level="warning", access_log=False)
    return 0
