"""Health under long prompts: the p99 of ``GET /api/v1/health`` while 65,536-character
prompts without spaces are submitted (issue 13 item 4: at most 50 ms), against a running
``svc serve``; the same p99 with no load is the baseline.

    python -m tests.benchmarks.health http://127.0.0.1:8080
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import httpx
import msgspec

from tests.benchmarks import tools

PROMPT_CHARS = 65_536
SUBMITTERS = 2
WORD = "TestHttpClientRetriesOnTimeoutWith503Status_src/main/java/OrderService2.java;"


def long_prompt(index: int) -> str:
    """A prompt of exactly ``PROMPT_CHARS`` characters, no spaces, unique per index."""
    text = f"{index}:" + WORD * (PROMPT_CHARS // len(WORD) + 1)
    return text[:PROMPT_CHARS]


def bodies(count: int) -> list[bytes]:
    """Submit bodies encoded up front, so the client spends no CPU while measuring."""
    return [msgspec.json.encode({
        "tenantId": "bench", "projectId": "bench", "queue": "bench/long",
        "title": f"long prompt {i}", "payload": {"prompt": long_prompt(i)}})
        for i in range(count)]


def health_samples(base: str, stop: threading.Event, every_s: float = 0.01) -> list[float]:
    """Milliseconds of each health request until ``stop`` is set."""
    samples: list[float] = []
    with httpx.Client(base_url=base, timeout=30) as http:
        while not stop.is_set():
            started = time.perf_counter()
            assert http.get("/api/v1/health").status_code == 200
            samples.append((time.perf_counter() - started) * 1000)
            time.sleep(every_s)
    return samples


def submit_loop(base: str, payloads: list[bytes], stop: threading.Event,
                done: list[float]) -> None:
    """Submit long prompts until ``stop`` is set, recording each submit's milliseconds."""
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=base, timeout=60, headers=tools.auth_headers()) as http:
        i = 0
        while not stop.is_set():
            started = time.perf_counter()
            answer = http.post("/api/v1/queue/tasks", content=payloads[i % len(payloads)],
                               headers=headers)
            assert answer.status_code == 201, answer.text[:300]
            done.append((time.perf_counter() - started) * 1000)
            i += 1


def percentile(samples: list[float], pct: int) -> float:
    """The ``pct`` percentile (nearest rank)."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


def measure(base: str, seconds: float, load: bool) -> tuple[list[float], list[float]]:
    """Health latencies (and submit latencies) over ``seconds``, with or without load."""
    stop = threading.Event()
    submits: list[float] = []
    workers = [threading.Thread(target=submit_loop, args=(
        base, bodies(16), stop, submits)) for _ in range(SUBMITTERS if load else 0)]
    for worker in workers:
        worker.start()
    result: list[list[float]] = []
    poller = threading.Thread(target=lambda: result.append(health_samples(base, stop)))
    poller.start()
    time.sleep(seconds)
    stop.set()
    for thread in (poller, *workers):
        thread.join()
    return result[0], submits


def figures(report: Callable[[str, float], None], base: str, seconds: float = 10) -> None:
    """Report the health p99 idle and under long-prompt submits, and the submit rate."""
    idle, _ = measure(base, min(seconds, 3), load=False)
    loaded, submits = measure(base, seconds, load=True)
    report("health_p99_ms_idle", percentile(idle, 99))
    report("health_p99_ms_long_prompts", percentile(loaded, 99))
    report("health_max_ms_long_prompts", max(loaded))
    report("long_prompt_submit_ms_p50", percentile(submits, 50))
    report("long_prompt_submits_per_s", len(submits) / seconds)


def main() -> None:
    figures(lambda name, value: print(f"{name}={value:.3f}", flush=True), sys.argv[1])


if __name__ == "__main__":
    main()
