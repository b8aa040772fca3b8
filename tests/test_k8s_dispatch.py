"""Dispatch through the API with ``SVC_RUNNER_DRIVER=kubernetes`` against kmock's
Kubernetes emulator: the same run renders valid objects, and API failures reach the
attempt as a bounded message without the API's response body."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import kubernetes_validate
import pytest
from litestar.testing import AsyncTestClient

from api.app import create_app
from runner_assembly.assembly.defaults import BuiltImage, RuntimeDefaults
from runner_assembly.settings import RunnerSettings
from tests.bundles import bundle_ref, make_bundle_repo
from tests.support import SECRET_CANARY, snapshot
from tests.test_dispatch import TASKS, dispatch, submit
from tests.test_k8s_driver import IMAGE, JOBS, SOURCE, UidEmulator, objects_of
from tests.test_k8s_manifests import KUBERNETES_VERSION, pod_security_violations


@pytest.fixture
def kube() -> Iterator[Any]:
    """The emulator served from a thread of its own: the test client's portal blocks the
    test's event loop while a request is in flight, so the API must live elsewhere."""
    loop = asyncio.new_event_loop()
    ready: queue.Queue[Any] = queue.Queue()
    stop = asyncio.Event()

    async def serve() -> None:
        async with UidEmulator() as handler, kmock.Server(handler):
            ready.put(handler)
            await stop.wait()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    yield ready.get(timeout=10)
    loop.call_soon_threadsafe(stop.set)
    thread.join(timeout=10)


def kubernetes_settings(base: RunnerSettings, server: Any) -> RunnerSettings:
    return dataclasses.replace(
        base, driver="kubernetes", kubernetes_api=str(server.url).rstrip("/"),
        defaults=RuntimeDefaults(imageSource=SOURCE,
                                 images=[BuiltImage(source=SOURCE, image=IMAGE)]))


async def test_a_dispatch_renders_valid_objects_through_the_kubernetes_driver(
    kube: Any, database_url: str, runner_settings: RunnerSettings, tmp_path: Path
) -> None:
    settings = kubernetes_settings(runner_settings, kube)
    bundle = bundle_ref(make_bundle_repo(tmp_path))
    async with AsyncTestClient(create_app(database_url, settings=settings)) as client:
        task_id = await submit(client, resourceBundleRef=bundle,
                               sessionRef={"sessionId": "ses_kube", "conversationId": "c"})
        dry = await client.post(f"{TASKS}/{task_id}/dispatch?dryRun=true",
                                json={"transientEnv": {"LAB_API_KEY": SECRET_CANARY}})
        assert dry.status_code == 200 and SECRET_CANARY not in dry.text
        plan = dry.json()["plan"]["runnerJob"]
        assert plan["driver"] == "kubernetes" and plan["image"]["image"] == IMAGE
        assert plan["image"]["status"] == "reused"
        assert [p["path"] for p in plan["resourceBundle"]["promptRefs"]] == ["prompts/system.md"]
        assert objects_of(kube) == {}, "a dry run creates nothing"
        task = await dispatch(client, task_id,
                              {"transientEnv": {"LAB_API_KEY": SECRET_CANARY}})
        assert task["state"] == "running"
        run_id = task["latestAttempt"]["runId"]
        job = (await client.get(f"/api/v1/runs/{run_id}/runner-job")).json()
    assert job["driver"] == "kubernetes" and job["plan"]["jobName"].startswith("svc-v01-job-")
    stored = objects_of(kube)
    kinds = sorted(key.split("/")[0] for key in stored)
    assert kinds == ["jobs", "persistentvolumeclaims", "secrets"]
    for key, obj in stored.items():
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        if not key.startswith("secrets/"):
            assert SECRET_CANARY not in json.dumps(obj)
    (job_obj,) = [o for k, o in stored.items() if k.startswith("jobs/")]
    assert pod_security_violations(job_obj["spec"]["template"]["spec"]) == []
    assert stored["persistentvolumeclaims/svc-v01-session-ses-kube"]["spec"]["resources"] == {
        "requests": {"storage": "1Gi"}}


async def test_an_api_refusal_is_recorded_without_its_body(
    kube: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    kube[f"post {JOBS}"] << 422 << {"kind": "Status", "message": f"no: {SECRET_CANARY}"}
    settings = kubernetes_settings(runner_settings, kube)
    async with AsyncTestClient(create_app(database_url, settings=settings)) as client:
        task_id = await submit(client)
        task = await dispatch(client, task_id)
        attempt = task["latestAttempt"]
        assert attempt["state"] == "reserved" and task["state"] == "pending"
        assert attempt["failureKind"] == "infra-failed"
        assert attempt["failureMessage"] == "kubernetes refused the Job (HTTP 422)"
        before = await snapshot(database_url)
        shown = await client.get(f"{TASKS}/{task_id}")
    assert SECRET_CANARY not in shown.text and SECRET_CANARY not in str(before)
    assert not any(key.startswith("secrets/") for key in objects_of(kube))


async def test_an_environment_without_a_built_image_is_build_required(
    kube: Any, database_url: str, runner_settings: RunnerSettings
) -> None:
    settings = dataclasses.replace(kubernetes_settings(runner_settings, kube),
                                   defaults=RuntimeDefaults(imageSource=SOURCE))
    async with AsyncTestClient(create_app(database_url, settings=settings)) as client:
        task_id = await submit(client)
        task = await dispatch(client, task_id)
    assert task["state"] == "blocked"
    assert task["latestAttempt"]["failureKind"] == "build-required"
    assert objects_of(kube) == {}, "nothing was created in the cluster"


async def test_the_manager_does_not_look_for_secrets_with_kubernetes(
    kube: Any, database_url: str, tmp_path: Path
) -> None:
    """The deployed manager has no file store (an emptyDir): dispatch is not refused for
    that; a missing secret surfaces in the job (tests/test_driver_conformance.py)."""
    settings = kubernetes_settings(RunnerSettings(data_dir=tmp_path / "empty"), kube)
    async with AsyncTestClient(create_app(database_url, settings=settings)) as client:
        task_id = await submit(client)
        task = await dispatch(client, task_id)
    assert task["state"] == "running", task["latestAttempt"]
    assert not [r for r in kube if "/secrets" in r.url.path and r.method != "POST"]
