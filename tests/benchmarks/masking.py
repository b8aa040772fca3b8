"""Masking cost: ``mask_us_per_kib`` at 1, 64 and 1024 KiB for the by-value masker and the
pattern net, and the 1024/64 ratio (linear cost keeps it near 1; at most 20 is required).

    python -m tests.benchmarks.masking
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ledger.redaction import redact_text
from runner_assembly.runner.masking import LineMasker, Masker

SIZES_KIB = (1, 64, 1024)
SECRETS = ("SecretCanaryValue-7f3a9c2e1b8d4f6a0c5e", "ToolTok#/!%:@canary-7d21",
           "P@ss#w/rd!%:canary-4c3e", "LabApiKey-canary-88f0")


def sample(kib: int) -> str:
    """Backend-like output: log lines, paths, near-misses, a few secrets and long tokens."""
    lines = ["INFO building src/main/java/com/example/service/OrderProcessingService2.java",
             "running TestHttpClientRetriesOnTimeoutWith503Status ... ok",
             f"token prefix {SECRETS[0][:-3]} (a near miss)", f"GH_TOKEN={SECRETS[1]}",
             "x" * 300, '{"token": "' + SECRETS[3] + '", "n": 1}',
             "https://bot:p@ss@host/repo.git", "A" * 200 + "=="]
    text, size, i = [], 0, 0
    while size < kib * 1024:
        line = lines[i % len(lines)]
        text.append(line)
        size += len(line) + 1
        i += 1
    return "\n".join(text)[: kib * 1024]


def per_kib(work: Callable[[str], object], text: str, kib: int) -> float:
    """Microseconds per KiB of ``work`` on ``text``, the best of a few runs."""
    rounds = max(1, 256 // kib)
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(rounds):
            work(text)
        best = min(best, (time.perf_counter() - started) / rounds)
    return best * 1e6 / kib


def figures(report: Callable[[str, float], None]) -> None:
    """Report the masker's and the pattern net's cost per KiB at each size."""
    masker = Masker()
    masker.add_all(SECRETS)

    def stream(text: str) -> None:
        out: list[bytes] = []
        lines = LineMasker(masker, out.append)
        lines.feed(text.encode())
        lines.close()

    for name, work in (("value", stream), ("pattern", redact_text)):
        costs = {kib: per_kib(work, sample(kib), kib) for kib in SIZES_KIB}
        for kib, cost in costs.items():
            report(f"mask_us_per_kib_{name}_{kib}", cost)
        report(f"mask_ratio_{name}_1024_64", costs[1024] / costs[64])


def main() -> None:
    figures(lambda name, value: print(f"{name}={value:.3f}", flush=True))


if __name__ == "__main__":
    main()
