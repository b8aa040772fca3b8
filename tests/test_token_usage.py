"""Token usage (issue 27 item 2, docs/backends.md) through the real app, the local driver and
real Postgres: a ``command`` backend's ``{"svc": "usage"}`` line lands on its attempt, the
task's ``latestAttempt``, the stats per queue and profile (of the caller's tenant only), the
CLI and ``svc_tokens_total``, and survives replay; a runner exit with a bad usage is refused
and changes nothing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx

from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import fetch_value, replay_report, snapshot, with_script_backend
from tests.test_auth import bearer, new_key
from tests.test_cli import svc
from tests.test_dispatch import TASKS, run_task
from tests.test_metrics import named, samples
from tests.test_runner_protocol import JOBS, auth, protocol_on

BACKEND = '''
import json, sys
n = int(sys.stdin.read().split()[-1])
def say(**fields):
    print(json.dumps(fields), flush=True)
say(svc="usage", input_tokens=1, output_tokens=1)
say(type="turn.completed", usage={"input_tokens": 9})
say(svc="usage", input_tokens=100 * n, cached_input_tokens=10 * n, output_tokens=n,
    reasoning_output_tokens=-5, total_tokens=7)
'''
"""Prints two ``{"svc": "usage"}`` lines for a prompt ending in ``n`` (the last counts; its
negative count and unknown key are left out) and a Codex event the command kind ignores."""


def usage(n: int) -> dict[str, int]:
    return {"inputTokens": 100 * n, "cachedInputTokens": 10 * n, "outputTokens": n,
            "reasoningOutputTokens": 0}


def summed(*ns: int) -> dict[str, int]:
    return {name: sum(usage(n)[name] for n in ns) for name in usage(0)}


async def test_usage_lands_on_the_attempt_the_task_and_the_stats_of_its_tenant_only(
    database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = with_script_backend(runner_settings, BACKEND)
    async with app_client(database_url, settings) as client:
        key_a, _ = await new_key(client, "operator", tenant="alpha")
        key_b, _ = await new_key(client, "operator", tenant="beta")
        tasks = []
        for n, tenant, queue in ((3, "alpha", "main"), (4, "alpha", "main"),
                                 (5, "beta", "other")):
            task_id, task = await run_task(client, f"count {n}", tenantId=tenant, queue=queue)
            assert task["state"] == "completed", task
            assert task["latestAttempt"]["usage"] == usage(n), task["latestAttempt"]
            tasks.append(task_id)
        attempts = (await client.get(f"{TASKS}/{tasks[0]}/attempts")).json()["items"]
        assert [a["usage"] for a in attempts] == [usage(3)]
        detail = (await client.get(f"{TASKS}/{tasks[1]}")).json()
        assert detail["latestAttempt"]["usage"] == usage(4)

        alpha = (await client.get("/api/v1/queue/stats", headers=bearer(key_a))).json()
        assert alpha["tokensByQueue"] == {"main": summed(3, 4)}, alpha
        assert alpha["tokensByBackendProfile"] == {"profile-1": summed(3, 4)}
        beta = (await client.get("/api/v1/queue/stats", headers=bearer(key_b))).json()
        assert beta["tokensByQueue"] == {"other": summed(5)}, "another tenant's are not seen"
        assert beta["tokensByBackendProfile"] == {"profile-1": summed(5)}
        admin = (await client.get("/api/v1/queue/stats", params={"queue": "main"})).json()
        assert admin["tokensByQueue"] == {"main": summed(3, 4)}, "the queue filter applies"
        everything = (await client.get("/api/v1/queue/stats")).json()
        assert everything["tokensByBackendProfile"] == {"profile-1": summed(3, 4, 5)}
        scraped = samples((await client.get("/metrics")).text)
        assert named(scraped, "svc_tokens_total") == {
            frozenset({"queue": queue, "profile": "profile-1", "kind": kind}.items()): float(
                summed(*ns)[name])
            for queue, ns in (("main", (3, 4)), ("other", (5,)))
            for kind, name in (("input", "inputTokens"), ("cached_input", "cachedInputTokens"),
                               ("output", "outputTokens"),
                               ("reasoning_output", "reasoningOutputTokens"))}

        api = str(client.base_url)
        stats = await asyncio.to_thread(svc, "queue", "stats", api=api)
        total = summed(3, 4, 5)
        assert (f"  tokens of profile profile-1: in {total['inputTokens']} (cached "
                f"{total['cachedInputTokens']}) out {total['outputTokens']} (reasoning 0)"
                ) in stats.stdout, stats.stdout
        assert "  tokens of queue main: in 700 (cached 70) out 7 (reasoning 0)" in stats.stdout
        shown = await asyncio.to_thread(svc, "queue", "show", tasks[0], api=api)
        assert "  tokens: in 300 (cached 30) out 3 (reasoning 0)" in shown.stdout, shown.stdout
        listed = await asyncio.to_thread(svc, "queue", "attempts", tasks[1], api=api)
        assert "  tokens: in 400 (cached 40) out 4 (reasoning 0)" in listed.stdout
        raw = await asyncio.to_thread(svc, "queue", "attempts", tasks[1], "--raw", api=api)
        assert json.loads(raw.stdout)["items"][0]["usage"] == usage(4)
    assert (await replay_report(database_url)).ok, "replay rebuilds the usage as live"


BAD_USAGES: list[Any] = [
    {"inputTokens": -1}, {"inputTokens": "5"}, {"outputTokens": 2**53},
    {"outputTokens": 2**64}, {"inputTokens": True}, {"inputTokens": 1.5},
    {"totalTokens": 3}, [1, 2], "many",
]


async def test_a_runner_exit_with_a_bad_usage_is_refused_and_changes_nothing(
    client: httpx.AsyncClient, database_url: str, tmp_path: Path
) -> None:
    async with protocol_on(database_url, tmp_path) as protocol:
        token = await protocol.issue("job_u", session_id="ses_u", run_id="run_u")
    claimed = await client.post(f"{JOBS}/job_u/claim", json={"claimant": "r1"},
                                headers=auth(token))
    assert claimed.status_code == 200, claimed.text
    before = await snapshot(database_url)
    for bad in BAD_USAGES:
        refused = await client.post(f"{JOBS}/job_u/exit", headers=auth(token), json={
            "state": "completed", "exitCode": 0, "usage": bad})
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["code"] == "invalid-request", refused.text
    assert await snapshot(database_url) == before, "a refused exit changes nothing"
    good = {"inputTokens": 2**53 - 1, "outputTokens": 0}
    ended = await client.post(f"{JOBS}/job_u/exit", headers=auth(token), json={
        "state": "completed", "exitCode": 0, "usage": good})
    assert ended.status_code == 200, ended.text
    payload = await fetch_value(database_url, "SELECT payload::text FROM ledger WHERE "
                                "stream_id = 'job_u' AND event_type = 'job-exited'")
    assert json.loads(payload)["usage"] == {
        "input_tokens": 2**53 - 1, "cached_input_tokens": 0, "output_tokens": 0,
        "reasoning_output_tokens": 0}
