"""Run one replay (verify) in its own process and print its figures as JSON."""

from __future__ import annotations

import asyncio
import resource
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
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(msgspec.json.encode({"events": report.events, "seconds": report.seconds,
                               "ok": report.ok, "peak_rss_mib": peak_mib}).decode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
