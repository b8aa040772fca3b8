"""Property (DESIGN 12): for random sequences of submits, dispatches, reads and lists by keys
of two tenants, through the real app on real Postgres, no answer to one tenant ever holds an
id (task, attempt, run, session, runner job) of the other; a call naming the other tenant's
id is answered 404 (which repeats only the id it was asked about)."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.support import task_body
from tests.test_auth import bearer, new_key
from tests.test_dispatch import settle

TASKS = "/api/v1/queue/tasks"
SESSIONS = "/api/v1/sessions"
TENANTS = ("alpha", "beta")
TENANT = st.sampled_from(TENANTS)
PICK = st.integers(0, 50)
STEP = st.one_of(
    st.tuples(st.just("submit"), TENANT, PICK),
    st.tuples(st.just("dispatch"), TENANT, PICK),
    st.tuples(st.just("session"), TENANT, PICK),
    st.tuples(st.sampled_from(["show", "attempts", "cancel", "read", "runner-job",
                               "session-show", "session-output", "list", "poll", "stats",
                               "commander", "sessions"]), TENANT, PICK),
)
Answers = list[tuple[str, str, httpx.Response]]


class Program:
    """One example: the keys of both tenants, what was made, every answer by tenant."""

    def __init__(self, client: httpx.AsyncClient, keys: dict[str, str]) -> None:
        self.client = client
        self.keys = keys
        self.tasks: list[str] = []
        self.runs: list[str] = []
        self.sessions: list[str] = []
        self.answers: Answers = []

    async def ask(self, tenant: str, method: str, url: str, body: Any = None) -> Any:
        answer = await self.client.request(method, url, json=body,
                                           headers=bearer(self.keys[tenant]))
        assert answer.status_code < 500, answer.text
        self.answers.append((tenant, url, answer))
        return answer.json() if answer.status_code < 300 else None

    async def step(self, kind: str, tenant: str, pick: int) -> None:
        """One call as ``tenant`` (an id picked among every tenant's)."""
        task = self.tasks[pick % len(self.tasks)] if self.tasks else "tsk_none"
        run = self.runs[pick % len(self.runs)] if self.runs else "run_none"
        session = self.sessions[pick % len(self.sessions)] if self.sessions else "ses_none"
        if kind == "submit":
            made = await self.ask(tenant, "POST", TASKS, task_body(tenantId=tenant))
            self.tasks.append(made["taskId"])
        elif kind == "dispatch":
            await self._dispatch(tenant, task)
        elif kind == "session":
            made = await self.ask(tenant, "POST", SESSIONS, {})
            self.sessions.append(made["sessionId"])
        else:
            method, url, body = _read_or_act(kind, task, run, session, pick)
            await self.ask(tenant, method, url, body)

    async def _dispatch(self, tenant: str, task: str) -> None:
        dispatched = await self.ask(tenant, "POST", f"{TASKS}/{task}/dispatch", {})
        if dispatched and dispatched.get("latestAttempt"):
            latest = dispatched["latestAttempt"]
            self.runs.append(latest["runId"])
            self.sessions.append(latest["sessionId"])
            await settle(self.client, task)  # its runner job ends within the example


def _read_or_act(kind: str, task: str, run: str, session: str,
                 pick: int) -> tuple[str, str, Any]:
    limit = 1 + pick % 5
    return {
        "show": ("GET", f"{TASKS}/{task}", None),
        "attempts": ("GET", f"{TASKS}/{task}/attempts", None),
        "cancel": ("POST", f"{TASKS}/{task}/cancel", {}),
        "read": ("POST", f"{TASKS}/{task}/read", {"readerId": "me"}),
        "runner-job": ("GET", f"/api/v1/runs/{run}/runner-job", None),
        "session-show": ("GET", f"{SESSIONS}/{session}", None),
        "session-output": ("GET", f"{SESSIONS}/{session}/output", None),
        "list": ("GET", f"{TASKS}?limit={limit}", None),
        "poll": ("GET", f"{TASKS}?updatedAfter=0", None),
        "stats": ("GET", "/api/v1/queue/stats", None),
        "commander": ("GET", f"/api/v1/queue/commander?limit={limit}", None),
        "sessions": ("GET", f"{SESSIONS}?state=all&limit={limit}", None),
    }[kind]


async def ids_by_tenant(url: str) -> dict[str, set[str]]:
    """Every task, attempt, run, runner job and session id, by the tenant it belongs to."""
    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetch(
            "SELECT t.tenant_id, t.task_id AS id FROM task_summary t "
            "UNION SELECT t.tenant_id, unnest(array[a.attempt_id, a.run_id, a.runner_job_id, "
            "a.session_id]) FROM attempt_summary a JOIN task_summary t USING (task_id) "
            "UNION SELECT t.tenant_id, unnest(array[r.run_id, r.runner_job_id, r.session_id]) "
            "FROM run_record r JOIN task_summary t USING (task_id) "
            "UNION SELECT tenant_id, session_id FROM session_summary")
    finally:
        await conn.close()
    found: dict[str, set[str]] = {}
    for row in rows:
        if row["id"]:
            found.setdefault(row["tenant_id"], set()).add(row["id"])
    return found


async def run_program(app_url: str, database_url: str, runner_settings: RunnerSettings,
                      steps: list[tuple[str, str, int]]) -> None:
    async with app_client(app_url, runner_settings) as client:
        keys = {tenant: (await new_key(client, "operator", tenant=tenant))[0]
                for tenant in TENANTS}
        program = Program(client, keys)
        for kind, tenant, pick in steps:
            await program.step(kind, tenant, pick)
    owned = await ids_by_tenant(database_url)
    for tenant, url, answer in program.answers:
        for other in TENANTS:
            if other == tenant:
                continue
            if any(i in url for i in owned.get(other, ())):
                assert answer.status_code == 404, (tenant, url, answer.text)
                assert answer.json()["error"]["code"] == "not-found"
                continue
            leaked = [i for i in owned.get(other, ()) if i in answer.text]
            assert not leaked, (tenant, other, leaked, url, answer.text)


def test_no_answer_to_one_tenant_names_an_id_of_the_other(
        app_url: str, database_url: str, runner_settings: RunnerSettings) -> None:
    @settings(max_examples=6, deadline=None,
              suppress_health_check=[HealthCheck.too_slow,
                                     HealthCheck.function_scoped_fixture])
    @given(steps=st.lists(STEP, min_size=4, max_size=12).filter(
        lambda steps: sum(kind == "dispatch" for kind, _, _ in steps) <= 2))
    def check(steps: list[tuple[str, str, int]]) -> None:
        asyncio.run(run_program(app_url, database_url, runner_settings, steps))

    check()
