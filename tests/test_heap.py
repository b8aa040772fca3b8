"""A serving process settles its heap once started: a full collection afterwards walks only
what was made since, not every module, class and pool object of its start."""

from __future__ import annotations

import gc

from litestar.testing import AsyncTestClient

from api.app import create_app
from api.server import YOUNG_COLLECTION_AT, settle_heap
from runner_assembly.settings import RunnerSettings


def test_settled_objects_leave_the_collected_generations() -> None:
    gc.collect()
    before, thresholds = len(gc.get_objects(2)), gc.get_threshold()
    assert gc.get_freeze_count() == 0
    try:
        settle_heap()
        assert gc.get_threshold() == (YOUNG_COLLECTION_AT, *thresholds[1:])
        frozen = gc.get_freeze_count()
        assert frozen > before * 0.9  # what was alive went to the permanent generation
        assert len(gc.get_objects(2)) < before // 10
        made_after = [[index] for index in range(1000)]  # new objects are collected as ever
        gc.collect()
        assert len(gc.get_objects(2)) >= len(made_after)
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    assert gc.get_freeze_count() == 0


async def test_a_long_lived_app_settles_its_heap_once_started(
        database_url: str, runner_settings: RunnerSettings) -> None:
    gc.unfreeze()
    thresholds = gc.get_threshold()
    try:
        async with AsyncTestClient(create_app(database_url, settings=runner_settings)) as http:
            assert (await http.get("/api/v1/health")).status_code == 200
            assert gc.get_freeze_count() == 0  # a test's app, one of many in this process
            assert gc.get_threshold() == thresholds
        async with AsyncTestClient(create_app(database_url, settings=runner_settings,
                                              long_lived=True)) as http:
            assert gc.get_freeze_count() > 0  # svc serve's app: settled before serving
            assert gc.get_threshold()[0] == YOUNG_COLLECTION_AT
            assert (await http.get("/api/v1/health")).status_code == 200
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
