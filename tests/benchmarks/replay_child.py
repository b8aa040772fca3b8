"""Run one replay (verify) in its own process and print its figures as JSON."""

from __future__ import annotations

import asyncio
import resource
import sys
from pathlib import Path

import asyncpg
import msgspec

from projections.replay import replay


def peak_rss_mib() -> float:
    """This process's own peak RSS (``VmHWM``); ``ru_maxrss`` would include the RSS of the
    parent that forked us, which Linux carries across exec."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        report = await replay(conn)
    finally:
        await conn.close()
    peak_mib = peak_rss_mib()
    print(msgspec.json.encode({"events": report.events, "seconds": report.seconds,
                               "ok": report.ok, "peak_rss_mib": peak_mib}).decode())


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
