"""A serving process settles its heap once started: a full collection afterwards walks only
what was made since, not every module, class and pool object of its start."""

from __future__ import annotations

import gc

from litestar.testing import AsyncTestClient

from api.app import create_app
from api.server import settle_heap
from runner_assembly.settings import RunnerSettings


def test_settled_objects_leave_the_collected_generations() -> None:
    gc.collect()
    before = len(gc.get_objects(2))
    assert gc.get_freeze_count() == 0
    try:
        settle_heap()
        frozen = gc.get_freeze_count()
        assert frozen > before * 0.9  # what was alive went to the permanent generation
        assert len(gc.get_objects(2)) < before // 10
        made_after = [[index] for index in range(1000)]  # new objects are collected as ever
        gc.collect()
        assert len(gc.get_objects(2)) >= len(made_after)
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0


async def test_a_long_lived_app_settles_its_heap_once_started(
        database_url: str, runner_settings: RunnerSettings) -> None:
    gc.unfreeze()
    try:
        async with AsyncTestClient(create_app(database_url, settings=runner_settings)) as http:
            assert (await http.get("/api/v1/health")).status_code == 200
            assert gc.get_freeze_count() == 0  # a test's app, one of many in this process
        async with AsyncTestClient(create_app(database_url, settings=runner_settings,
                                              long_lived=True)) as http:
            assert gc.get_freeze_count() > 0  # svc serve's app: settled before serving
            assert (await http.get("/api/v1/health")).status_code == 200
    finally:
        gc.unfreeze()
