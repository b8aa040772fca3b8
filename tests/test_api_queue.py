"""Contract tests of list, show, cancel, read, stats, commander, health and unknown routes."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support import post_changing_nothing, snapshot, task_body

TASKS = "/api/v1/queue/tasks"


async def submit(client: Any, **overrides: Any) -> dict[str, Any]:
    response = await client.post(TASKS, json=task_body(**overrides))
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_list_pages_through_every_task_once_newest_first(client: Any) -> None:
    ids = [(await submit(client, title=f"t{i}"))["taskId"] for i in range(7)]
    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(TASKS, params=params)).json()
        seen += [item["taskId"] for item in page["items"]]
        assert page["changeSeq"] == 7
        assert len(page["items"]) <= 3
        cursor = page["nextCursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))


async def test_list_filters_by_queue_lane_and_state(client: Any) -> None:
    a = await submit(client, queue="alpha")
    b = await submit(client, queue="alpha/fast")
    c = await submit(client, queue="beta")
    await client.post(f"{TASKS}/{c['taskId']}/cancel", json={})

    def ids(page: dict[str, Any]) -> set[str]:
        return {item["taskId"] for item in page["items"]}

    assert ids((await client.get(TASKS, params={"queue": "alpha"})).json()) == {
        a["taskId"], b["taskId"]}
    assert ids((await client.get(TASKS, params={"queue": "alpha/fast"})).json()) == {
        b["taskId"]}
    assert ids((await client.get(TASKS, params={"state": "cancelled"})).json()) == {
        c["taskId"]}
    assert ids((await client.get(TASKS, params={"queue": "beta", "state": "pending"})).json()) \
        == set()


async def test_updated_after_returns_exactly_the_tasks_changed_after_it(client: Any) -> None:
    first = await submit(client)
    second = await submit(client)
    mark = (await client.get(TASKS)).json()["changeSeq"]
    third = await submit(client)
    await client.post(f"{TASKS}/{first['taskId']}/cancel", json={})
    await client.post(f"{TASKS}/{second['taskId']}/read", json={"readerId": "r"})
    page = (await client.get(TASKS, params={"updatedAfter": mark})).json()
    assert [i["taskId"] for i in page["items"]] == [third["taskId"], first["taskId"]]
    assert all(i["changeSeq"] > mark for i in page["items"])
    assert page["changeSeq"] == 5
    later = (await client.get(TASKS, params={"updatedAfter": page["changeSeq"]})).json()
    assert later["items"] == []


BAD_QUERIES = [
    {"limit": 0}, {"limit": 501}, {"limit": "ten"}, {"state": "sleeping"},
    {"cursor": "!!"}, {"cursor": "bm9wZQ"}, {"updatedAfter": -1},
    {"updatedAfter": 10**30}, {"queue": "../x"}, {"queue": "a\x00"},
]


@pytest.mark.parametrize("params", BAD_QUERIES, ids=[str(p) for p in BAD_QUERIES])
async def test_list_refuses_bad_query_values(client: Any, params: dict[str, Any]) -> None:
    response = await client.get(TASKS, params=params)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "invalid-request"


async def test_show_unknown_task_is_not_found(client: Any) -> None:
    response = await client.get(f"{TASKS}/tsk_missing")
    assert response.status_code == 404
    assert response.json()["error"] == {
        "code": "not-found", "message": "task tsk_missing not found",
        "details": {"taskId": "tsk_missing"}}


async def test_cancel_moves_a_pending_task_to_cancelled_once(
    client: Any, database_url: str
) -> None:
    task = await submit(client)
    path = f"{TASKS}/{task['taskId']}/cancel"
    response = await client.post(path, json={"reason": "duplicate of another"})
    assert response.status_code == 200
    cancelled = response.json()
    assert (cancelled["state"], cancelled["version"]) == ("cancelled", 2)
    assert cancelled["summary"] == "cancelled: duplicate of another"
    assert cancelled["changeSeq"] > task["changeSeq"]
    before = await snapshot(database_url)
    again = await client.post(path, json={})
    assert again.status_code == 409
    assert again.json()["error"]["code"] == "invalid-transition"
    assert await snapshot(database_url) == before


async def test_cancel_accepts_an_empty_body(client: Any) -> None:
    task = await submit(client)
    response = await client.post(f"{TASKS}/{task['taskId']}/cancel")
    assert response.status_code == 200
    assert response.json()["summary"] == "cancelled"


@pytest.mark.parametrize("body", [{"reason": 5}, {"why": "x"}, {"reason": "x" * 1001}, [1]])
async def test_cancel_refuses_bad_bodies(client: Any, database_url: str, body: Any) -> None:
    task = await submit(client)
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{task['taskId']}/cancel", json=body)
    assert response.status_code == 400
    assert await snapshot(database_url) == before


async def test_cancel_dry_run_plans_and_changes_nothing(client: Any, database_url: str) -> None:
    task = await submit(client)
    plan = (await post_changing_nothing(
        client, database_url, f"{TASKS}/{task['taskId']}/cancel?dryRun=true", {}, 200)).json()
    assert plan["mutation"] is False
    assert plan["plan"]["stateBefore"] == "pending"
    assert plan["plan"]["stateAfter"] == "cancelled"
    assert plan["plan"]["events"] == ["task-cancelled"]


async def test_mutations_on_unknown_tasks_are_not_found(client: Any, database_url: str) -> None:
    before = await snapshot(database_url)
    for action, body in (("cancel", {}), ("read", {"readerId": "r"})):
        for dry in ("", "?dryRun=true"):
            response = await client.post(f"{TASKS}/tsk_nope/{action}{dry}", json=body)
            assert response.status_code == 404
            assert response.json()["error"]["code"] == "not-found"
    assert await snapshot(database_url) == before


async def test_read_advances_the_cursor_without_touching_the_task(
    client: Any, database_url: str
) -> None:
    task = await submit(client)
    view = (await client.get("/api/v1/queue/commander", params={"readerId": "ann"})).json()
    assert view["items"][0]["unread"] is True
    response = await client.post(f"{TASKS}/{task['taskId']}/read", json={"readerId": "ann"})
    assert response.status_code == 200
    read = response.json()
    assert (read["version"], read["changeSeq"]) == (task["version"], task["changeSeq"])
    view = (await client.get("/api/v1/queue/commander", params={"readerId": "ann"})).json()
    assert view["items"][0]["unread"] is False
    other = (await client.get("/api/v1/queue/commander", params={"readerId": "bob"})).json()
    assert other["items"][0]["unread"] is True
    before = await snapshot(database_url)
    again = await client.post(f"{TASKS}/{task['taskId']}/read", json={"readerId": "ann"})
    assert again.status_code == 200
    assert await snapshot(database_url) == before, "a repeated read is a no-op"
    await client.post(f"{TASKS}/{task['taskId']}/cancel", json={})
    view = (await client.get("/api/v1/queue/commander", params={"readerId": "ann"})).json()
    assert view["items"][0]["unread"] is True, "a newer version is unread again"


@pytest.mark.parametrize("body", [None, {}, {"readerId": ""}, {"readerId": 3},
                                  {"readerId": "a b"}, {"readerId": "r", "x": 1}])
async def test_read_refuses_bad_bodies(client: Any, database_url: str, body: Any) -> None:
    task = await submit(client)
    before = await snapshot(database_url)
    path = f"{TASKS}/{task['taskId']}/read"
    response = await (client.post(path) if body is None else client.post(path, json=body))
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid-request"
    assert await snapshot(database_url) == before


async def test_read_dry_run_changes_nothing(client: Any, database_url: str) -> None:
    task = await submit(client)
    before = await snapshot(database_url)
    response = await client.post(f"{TASKS}/{task['taskId']}/read?dryRun=true",
                                 json={"readerId": "ann"})
    assert response.status_code == 200
    assert response.json()["plan"]["events"] == ["task-read-cursor-advanced"]
    assert await snapshot(database_url) == before


async def test_stats_count_by_queue_lane_state_and_profile(client: Any) -> None:
    await submit(client, queue="alpha", backendProfile="profile-1")
    await submit(client, queue="alpha/fast", backendProfile="profile-1")
    doomed = await submit(client, queue="alpha")
    await submit(client, queue="beta", backendProfile="profile-3")
    await client.post(f"{TASKS}/{doomed['taskId']}/cancel", json={})
    everything = (await client.get("/api/v1/queue/stats")).json()
    assert everything["total"] == 4
    assert everything["byState"] == {"pending": 3, "cancelled": 1}
    # A task sent without a profile counts under the default it runs on (profile-1).
    assert everything["byBackendProfile"] == {"profile-1": 3, "profile-3": 1}
    alpha = (await client.get("/api/v1/queue/stats", params={"queue": "alpha"})).json()
    assert alpha["total"] == 3
    assert alpha["byLane"] == {"alpha/default": 2, "alpha/fast": 1}
    assert alpha["byState"] == {"pending": 2, "cancelled": 1}
    assert alpha["changeSeq"] == everything["changeSeq"] == 5
    fast = (await client.get("/api/v1/queue/stats", params={"queue": "alpha/fast"})).json()
    assert fast["total"] == 1


async def test_commander_puts_live_work_before_finished_work(client: Any) -> None:
    done = await submit(client, title="old")
    await client.post(f"{TASKS}/{done['taskId']}/cancel", json={})
    waiting = await submit(client, title="new")
    view = (await client.get("/api/v1/queue/commander")).json()
    assert [i["taskId"] for i in view["items"]] == [waiting["taskId"], done["taskId"]]
    assert view["items"][0]["supervisor"] == {
        "phase": "awaiting-dispatch", "lastActivitySeq": waiting["changeSeq"],
        "lastActivityId": waiting["taskId"], "timeoutBudget": None,
        "recovery": f"svc queue dispatch {waiting['taskId']}"}
    assert view["items"][1]["supervisor"]["recovery"] == "none"
    assert view["items"][0]["unread"] is None
    assert view["byState"] == {"pending": 1, "cancelled": 1}
    limited = (await client.get("/api/v1/queue/commander", params={"limit": 1})).json()
    assert len(limited["items"]) == 1
    bad = await client.get("/api/v1/queue/commander", params={"limit": 501})
    assert bad.status_code == 400


async def test_health_reports_the_high_water_mark(client: Any) -> None:
    await submit(client)
    health = (await client.get("/api/v1/health")).json()
    assert health["status"] == "ok"
    assert health["changeSeq"] == 1


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("GET", "/api/v1/nothing", 404, "not-found"),
    ("GET", "/api/v1/queue/output", 404, "not-found"),
    ("GET", "/api/v1/queue/tasks/x/trace", 404, "not-found"),
    ("DELETE", "/api/v1/queue/tasks", 405, "method-not-allowed"),
    ("PUT", "/api/v1/health", 405, "method-not-allowed"),
])
async def test_unknown_routes_answer_in_the_error_envelope(
    client: Any, method: str, path: str, status: int, code: str
) -> None:
    response = await client.request(method, path)
    assert response.status_code == status
    assert response.json()["error"]["code"] == code
    assert response.headers["content-type"].startswith("application/json")
