"""Run one replay (verify) in its own process and print its figures as JSON."""

from __future__ import annotations

import asyncio
import sys

import asyncpg
import msgspec

from projections.replay import replay


async def main(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        report = await replay(conn)
    finally:
        await conn.close()
    print(msgspec.json.encode({"events": report.events, "seconds": report.seconds,
                               "ok": report.ok}).decode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
