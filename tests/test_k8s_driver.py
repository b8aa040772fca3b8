"""The Kubernetes runner driver: rendered objects checked against the official schemas and
Pod Security "restricted", and the driver's calls driven against kmock's Kubernetes
emulator, with its faults: 409 (adopt), 422, 500 and timeouts (issue 4 item 5)."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import kmock
import kubernetes_validate
import pytest
from kmock._internal import enums
from kubernetes import client as k8s

from cli.serve import SANDBOX_BANNER
from runner_assembly.assembly import k8s_objects
from runner_assembly.assembly.defaults import BuiltImage, RuntimeDefaults
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.assembly.model import ImageSource
from runner_assembly.assembly.names import job_name
from runner_assembly.assembly.plan import Ids, RunnerJobPlan, render_plan
from runner_assembly.assembly.resolve import Resolver
from runner_assembly.assembly.secret_store import FileSecretStore
from runner_assembly.contract.jobfile import JobFile, PromptCaps
from runner_assembly.drivers import make_driver
from runner_assembly.drivers.k8s import KubernetesDriver, api_client, pods_alive_at
from runner_assembly.drivers.protocol import DriverError, JobSpec
from runner_assembly.runner import pod as pod_runner
from runner_assembly.runner.sandbox import pod_mounts
from runner_assembly.settings import RunnerSettings
from tests.grants_support import granting
from tests.support import SECRET_CANARY, write_profile_secret
from tests.test_k8s_manifests import KUBERNETES_VERSION, pod_security_violations

NS = "svc-v01"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
PVCS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
SOURCE = ImageSource(kind="env-image-dockerfile", repoUrl="https://code.example/env.git",
                     commitId="a" * 40, dockerfilePath="images/runner/Dockerfile")
IMAGE = "registry.example/svc-runner@sha256:" + "b" * 64
LAB_KEY = "LabKeyCanary-3e9d0f1a"


class UidEmulator(kmock.KubernetesEmulator):  # type: ignore[misc]
    """kmock's emulator, plus what every real API server does: a uid for a new object."""

    async def _handle(self, request: Any) -> Any:
        if request.action == enums.action.CREATE and isinstance(request.data, dict):
            request.data.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
        return await super()._handle(request)


pytestmark = pytest.mark.kmock(cls=UidEmulator)


def contract(tmp_path: Path) -> dict[str, Any]:
    """A task contract using every element: session, bundle, tool credentials."""
    return {
        "tenantId": "acme", "payload": {"prompt": "go"},
        "sessionRef": {"sessionId": "ses_k8s", "conversationId": "cnv_k8s"},
        "resourceBundleRef": {"kind": "gitbundle", "repoUrl": "https://github.com/acme/bundle",
                              "promptRefs": [{"name": "p", "path": "prompts/p.md"}]},
        "workspaceRef": {"branch": "main"},
        "executionPolicy": {"secretScope": {"toolCredentials": [
            {"tool": "git-host", "purpose": "pull-request",
             "secretRef": {"name": "tok", "keys": ["GIT_HOST_TOKEN"]},
             "projection": {"kind": "env", "envName": "GIT_HOST_TOKEN"}},
            {"tool": "git-host", "purpose": "git-host-ssh",
             "secretRef": {"name": "ssh", "keys": ["id_ed25519", "known_hosts", "config"]},
             "projection": {"kind": "volume", "mountPath": "/home/svc/.ssh"}}]}},
    }


def secrets_root(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    write_profile_secret(data)
    for name, keys in (("tok", ["GIT_HOST_TOKEN"]),
                       ("ssh", ["id_ed25519", "known_hosts", "config"])):
        folder = data / "secrets" / NS / name
        folder.mkdir(parents=True)
        for key in keys:
            (folder / key).write_text(SECRET_CANARY)
    return data / "secrets"


def resolver(tmp_path: Path, **defaults: Any) -> Resolver:
    defaults.setdefault("tenantPolicies", granting(
        *contract(tmp_path)["executionPolicy"]["secretScope"]["toolCredentials"]))
    return Resolver(namespace=NS, driver="kubernetes",
                    secrets=FileSecretStore(secrets_root(tmp_path)),
                    defaults=RuntimeDefaults(**defaults), storage_class="local-path",
                    rollout_subdir="sessions")


def plan_of(tmp_path: Path) -> RunnerJobPlan:
    assembly = resolver(tmp_path, imageSource=SOURCE,
                        images=[BuiltImage(source=SOURCE, image=IMAGE)]).resolve(
        contract(tmp_path), "profile-1", {"LAB_API_KEY": LAB_KEY})
    ids = Ids(task_id="tsk_1", attempt_id="att_1", run_id="run_1", command_id="cmd_1",
              runner_job_id="job_01abc")
    return render_plan(assembly, ids, namespace=NS, driver="kubernetes",
                       smoke_tools=("git", "rg"))


def rendered_objects(plan: RunnerJobPlan) -> list[dict[str, Any]]:
    """Every object of the runner job: the session PVC (if any), the Secret without data,
    the Job."""
    pvc = k8s_objects.session_pvc(plan)
    return [*([pvc] if pvc else []), k8s_objects.per_job_secret(plan, None, None),
            k8s_objects.job(plan)]


def spec_of(plan: RunnerJobPlan) -> JobSpec:
    return JobSpec(job=JobFile(runner_job_id="job_01abc", run_id="run_1", task_id="tsk_1",
                               attempt_id="att_1", session_id="ses_k8s",
                               backend_profile="profile-1", backend_command=["agent"],
                               prompt="go", plan=plan,
                               prompt_caps=PromptCaps(per_prompt=1, total=1)),
                   secret_root="/var/run/svc/secrets", job_secret={"LAB_API_KEY": LAB_KEY})


def driver_for(server: Any, **options: Any) -> KubernetesDriver:
    return KubernetesDriver(api_client(str(server.url).rstrip("/")), NS, backoff_s=0.01,
                            **options)


def objects_of(server: Any) -> dict[str, dict[str, Any]]:
    """Stored objects by ``plural/name``."""
    return {f"{key[0].plural}/{key[2]}": dict(obj.raw) for key, obj in
            ((k, server.objects[k]) for k in list(server.objects)) if not obj.deleted}


def test_every_rendered_object_validates_strictly_and_holds_no_value(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    rendered = rendered_objects(plan)
    assert [o["kind"] for o in rendered] == ["PersistentVolumeClaim", "Secret", "Job"]
    for obj in rendered:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    owned = k8s_objects.per_job_secret(plan, str(uuid.uuid4()), {"LAB_API_KEY": "eA=="})
    kubernetes_validate.validate(owned, KUBERNETES_VERSION, strict=True)
    text = json.dumps(rendered)
    assert SECRET_CANARY not in text and LAB_KEY not in text
    pod = rendered[2]["spec"]["template"]["spec"]
    assert pod_security_violations(pod) == []
    assert pod["automountServiceAccountToken"] is False
    containers = pod["initContainers"] + pod["containers"]
    assert all(c["securityContext"]["readOnlyRootFilesystem"] for c in containers)
    secret_volumes = {v["name"] for v in pod["volumes"] if "secret" in v}
    mounts = [m for c in containers for m in c["volumeMounts"] if m["name"] in secret_volumes]
    assert mounts and all(m.get("readOnly") for m in mounts), "secrets mount read-only"
    (backend,) = pod["containers"]
    env = {e["name"]: e for e in backend["env"]}
    assert env["LAB_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "svc-v01-job-01abc-env", "key": "LAB_API_KEY"}
    assert env["GIT_HOST_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "tok",
                                                                  "key": "GIT_HOST_TOKEN"}
    assert all("value" not in e or e["name"] == "SVC_JOB_SPEC" for e in backend["env"])
    session = next(m for m in backend["volumeMounts"] if m["name"] == "session")
    assert session["mountPath"] == "/home/svc/.backend/sessions"
    ssh = next(m for m in backend["volumeMounts"] if m["mountPath"] == "/home/svc/.ssh")
    assert ssh["readOnly"] is True
    (assemble,) = pod["initContainers"]
    assert not any(m["mountPath"] == "/home/svc/.ssh" for m in assemble["volumeMounts"])
    assert "env" not in json.dumps(assemble["env"]).replace("SVC_JOB_SPEC", "")
    pvc = rendered[0]
    assert pvc["metadata"]["name"] == "svc-v01-session-ses-k8s"
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert pvc["spec"]["storageClassName"] == "local-path"
    assert plan.resource_bundle is not None
    assert plan.resource_bundle.fetches[0].mirror_used is False, "no mirror configured"


def test_the_backend_sandbox_shows_every_backend_mount_but_the_job_secret(
    tmp_path: Path
) -> None:
    """The ``backend`` container mounts the per-job Secret (its runner needs the token); the
    backend itself runs under bwrap with every other mount of its container and not that."""
    plan = plan_of(tmp_path)
    (backend,) = k8s_objects.job(plan)["spec"]["template"]["spec"]["containers"]
    job = spec_of(plan).job
    mounts = pod_mounts(job, pod_runner.layout_of(job), pod_runner.STATE_DIR)
    shown = [*mounts.read_write, *mounts.read_only, *mounts.read_only_over]
    by_name = {m["name"]: Path(m["mountPath"]) for m in backend["volumeMounts"]}
    assert {"job", "session", "home", "workspace"} <= set(by_name)
    assert not any(by_name["job"].is_relative_to(path) for path in shown), "token hidden"
    for name, path in by_name.items():
        if name not in ("job", "tmp"):  # the sandbox has its own /tmp
            assert any(path.is_relative_to(shown_path) for shown_path in shown), name
    assert pod_runner.STATE_DIR in mounts.hidden


def test_the_image_is_reused_or_build_required(tmp_path: Path) -> None:
    contract_ = {"tenantId": "acme", "payload": {"prompt": "go"}}
    with pytest.raises(AssemblyFailure) as no_source:
        resolver(tmp_path).resolve(contract_, "profile-1", {})
    assert no_source.value.kind == "build-required"
    with pytest.raises(AssemblyFailure) as not_built:
        resolver(tmp_path / "b", imageSource=SOURCE).resolve(contract_, "profile-1", {})
    assert not_built.value.kind == "build-required"
    image = resolver(tmp_path / "c", imageSource=SOURCE, images=[
        BuiltImage(source=SOURCE, image=IMAGE)]).resolve(contract_, "profile-1", {}).image
    assert (image.image, image.status) == (IMAGE, "reused")
    assert image.environment_id is not None and image.environment_id.startswith("env-")


def test_the_mirror_rewrites_only_the_main_public_code_host(tmp_path: Path) -> None:
    from runner_assembly.assembly.defaults import Mirror

    res = resolver(tmp_path, mirror=Mirror(baseUrl="https://mirror.internal/gh"),
                   imageSource=SOURCE, images=[BuiltImage(source=SOURCE, image=IMAGE)])
    bundle = {"kind": "gitbundle", "repoUrl": "https://github.com/acme/tools",
              "bundles": [{"subpath": "x", "target_path": "x",
                           "repoUrl": "https://gitlab.example/acme/other.git"}]}
    fetches = res.resolve({"tenantId": "t", "resourceBundleRef": bundle}, "profile-1",
                          {}).fetches
    assert [(f.repo_url, f.fetch_repo_url, f.mirror_used, f.mirror_base_url)
            for f in fetches] == [
        ("https://github.com/acme/tools", "https://mirror.internal/gh/acme/tools.git", True,
         "https://mirror.internal/gh"),
        ("https://gitlab.example/acme/other.git", "https://gitlab.example/acme/other.git",
         False, None)]


async def test_the_driver_creates_the_pvc_then_the_job_then_its_owned_secret(
    kmock: Any, tmp_path: Path
) -> None:
    plan = plan_of(tmp_path)
    handle = await driver_for(kmock).create(spec_of(plan))
    assert handle.adopted is False and handle.name == "svc-v01-job-01abc"
    stored = objects_of(kmock)
    assert set(stored) == {"persistentvolumeclaims/svc-v01-session-ses-k8s",
                           "jobs/svc-v01-job-01abc", "secrets/svc-v01-job-01abc-env"}
    posts = [r.url.path for r in kmock if r.method == "POST"]
    assert posts == [PVCS, JOBS, SECRETS], "PVC before the Job, Secret after it"
    job, secret = stored["jobs/svc-v01-job-01abc"], stored["secrets/svc-v01-job-01abc-env"]
    (owner,) = secret["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", job["metadata"]["name"],
                                                            job["metadata"]["uid"])
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data["LAB_API_KEY"] == LAB_KEY
    assert LAB_KEY not in data["job-spec.json"], "the spec holds names only"
    assert json.loads(data["job-spec.json"])["plan"]["jobName"] == "svc-v01-job-01abc"
    for obj in (job, secret, stored["persistentvolumeclaims/svc-v01-session-ses-k8s"]):
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


async def test_a_second_create_adopts_everything(kmock: Any, tmp_path: Path) -> None:
    driver = driver_for(kmock)
    spec = spec_of(plan_of(tmp_path))
    await driver.create(spec)
    again = await driver.create(spec)
    assert again.adopted is True
    assert len(objects_of(kmock)) == 3


async def test_a_500_whose_create_happened_converges_by_adoption(
    kmock: Any, tmp_path: Path
) -> None:
    kmock[f"post {JOBS}"][:1] << 500
    handle = await driver_for(kmock).create(spec_of(plan_of(tmp_path)))
    assert handle.adopted is True, "the lost create was found, not duplicated"
    assert sorted(objects_of(kmock)) == ["jobs/svc-v01-job-01abc",
                                         "persistentvolumeclaims/svc-v01-session-ses-k8s",
                                         "secrets/svc-v01-job-01abc-env"]


async def test_a_422_fails_cleanly_with_no_secret_and_no_body(
    kmock: Any, tmp_path: Path
) -> None:
    kmock[f"post {JOBS}"] << 422 << {"kind": "Status", "message": f"bad {SECRET_CANARY}"}
    with pytest.raises(DriverError) as refused:
        await driver_for(kmock).create(spec_of(plan_of(tmp_path)))
    assert refused.value.kind == "infra-failed"
    assert refused.value.message == "kubernetes refused the Job (HTTP 422)"
    assert not any(key.startswith("secrets/") for key in objects_of(kmock)), "no orphan"


async def test_timeouts_and_lost_responses_are_retried_until_they_converge(
    kmock: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    for name in ("kubernetes", "client", "urllib3"):
        logging.getLogger(name).setLevel(logging.DEBUG)
    kmock[f"post {PVCS}"][:1] << (lambda: asyncio.sleep(1.5)) << {}
    kmock[f"post {SECRETS}"][:1] << 503
    driver = driver_for(kmock, attempts=4, request_timeout=(1.0, 0.5))
    await driver.create(spec_of(plan_of(tmp_path)))
    stored = objects_of(kmock)
    assert sorted(stored) == ["jobs/svc-v01-job-01abc",
                              "persistentvolumeclaims/svc-v01-session-ses-k8s",
                              "secrets/svc-v01-job-01abc-env"], "one of each, no twin"
    assert stored["secrets/svc-v01-job-01abc-env"]["metadata"]["ownerReferences"]
    logged = caplog.text
    encoded = base64.b64encode(LAB_KEY.encode()).decode()
    assert LAB_KEY not in logged and encoded not in logged


async def test_exhausted_retries_fail_without_an_orphaned_secret(
    kmock: Any, tmp_path: Path
) -> None:
    kmock[f"post {JOBS}"] << 503 << {"message": f"busy {SECRET_CANARY}"}
    kmock[f"get {JOBS}/svc-v01-job-01abc"] << 503 << {"message": f"busy {SECRET_CANARY}"}
    with pytest.raises(DriverError) as failed:
        await driver_for(kmock, attempts=3).create(spec_of(plan_of(tmp_path)))
    assert failed.value.message == "kubernetes did not answer for the Job after 3 attempts"
    assert not any(key.startswith("secrets/") for key in objects_of(kmock))


async def test_status_and_cancel_follow_the_job(kmock: Any, tmp_path: Path) -> None:
    driver = driver_for(kmock)
    await driver.create(spec_of(plan_of(tmp_path)))
    assert (await driver.status("job_01abc")).state == "running"
    kmock[f"get {JOBS}/svc-v01-job-01abc"] << {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "svc-v01-job-01abc"},
        "status": {"succeeded": 1, "startTime": "2026-01-02T03:04:05Z",
                   "completionTime": "2026-01-02T03:04:07Z"}}
    done = await driver.status("job_01abc")
    assert done.state == "completed"
    assert done.started_at is not None and done.finished_at is not None
    assert (done.finished_at - done.started_at).total_seconds() == 2, "the Job's own times"
    await driver.cancel("job_01abc")
    assert (await driver.status("job_nope")).failure_kind == "infra-failed"


RUNNER_ENV = {"SVC_RUNNER_API_URL": "http://svc-manager.svc-v01.svc",
              "SVC_RUNNER_HEARTBEAT_S": "10.0"}
TOKEN = "job_01abc.TokenCanary-7f1e2d"


async def test_the_token_travels_in_the_secret_only_and_the_job_names_the_service(
    kmock: Any, tmp_path: Path
) -> None:
    spec = dataclasses.replace(spec_of(plan_of(tmp_path)), runner_token=TOKEN)
    driver = driver_for(kmock, runner_env=RUNNER_ENV)
    await driver.create(spec)
    await driver.create(spec)  # adopted: the Secret is never read back
    stored = objects_of(kmock)
    job, secret = stored["jobs/svc-v01-job-01abc"], stored["secrets/svc-v01-job-01abc-env"]
    assert TOKEN not in json.dumps(job) and TOKEN not in json.dumps(spec.public())
    assert base64.b64decode(secret["data"]["runner-token"]).decode() == TOKEN
    pod = job["spec"]["template"]["spec"]
    for container in [*pod["initContainers"], *pod["containers"]]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["SVC_RUNNER_API_URL"] == "http://svc-manager.svc-v01.svc"
        assert not any("token" in arg.lower() for arg in container["command"])
    (job_volume,) = [v for v in pod["volumes"] if v["name"] == "job"]
    assert {"key": "runner-token", "path": "runner-token"} in job_volume["secret"]["items"]
    assert not any(v["secret"].get("optional") for v in pod["volumes"] if "secret" in v), \
        "a secret the run needs is never optional: a missing one stops the pod (FailedMount)"
    assert not [r for r in kmock if r.method == "GET" and "/secrets" in r.url.path]


async def test_cancel_deletes_the_job_in_the_foreground(kmock: Any, tmp_path: Path) -> None:
    driver = driver_for(kmock)
    await driver.create(spec_of(plan_of(tmp_path)))
    await driver.cancel("job_01abc")
    (delete,) = [r for r in kmock if r.method == "DELETE"]
    assert delete.url.path == f"{JOBS}/svc-v01-job-01abc"
    assert "propagationPolicy=Foreground" in str(delete.url)


POD = f"/api/v1/namespaces/{NS}/pods"


def pod_with(state: dict[str, Any]) -> dict[str, Any]:
    """A pod list: another job's refused pod first (a server may ignore the selector), then
    the job's own pod with a container in ``state``."""
    def pod(job: str, state: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": f"p-{job}", "labels": {"svc/runner-job-id": job}},
                "status": {"phase": "Failed", "containerStatuses": [{
                    "name": "backend", "image": IMAGE, "imageID": "", "ready": False,
                    "restartCount": 0, "state": state}]}}

    other = pod("job_other", {"waiting": {"reason": "CreateContainerConfigError"}})
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {},
            "items": [other, pod("job_01abc", state)]}


@pytest.mark.parametrize(("state", "expected"), [
    ({"waiting": {"reason": "CreateContainerConfigError",
                  "message": "couldn't find key OPENAI_KEY in Secret svc/tool-creds"}},
     ("blocked", "secret-unavailable", None)),
    ({"waiting": {"reason": "CreateContainerConfigError",
                  "message": 'secret "tool-creds" not found'}},
     ("blocked", "secret-unavailable", None)),
    ({"waiting": {"reason": "CreateContainerConfigError", "message":
                  "failed to sync secret cache: timed out waiting for the condition"}},
     ("running", None, None)),
    ({"waiting": {"reason": "CreateContainerConfigError", "message":
                  "container has runAsNonRoot and image will run as root"}},
     ("running", None, None)),
    ({"terminated": {"exitCode": 3, "message": json.dumps(
        {"failureKind": "prompt-unavailable", "failureMessage": "no prompt"})}},
     ("blocked", "prompt-unavailable", 3)),
    ({"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
     ("failed", "runner-lost", 137)),
    ({"terminated": {"exitCode": 0}}, ("running", None, None)),
])
async def test_pod_status_is_the_fallback_when_the_runner_could_not_report(
    kmock: Any, tmp_path: Path, state: dict[str, Any], expected: tuple[Any, ...]
) -> None:
    driver = driver_for(kmock)
    await driver.create(spec_of(plan_of(tmp_path)))
    kmock[f"get {POD}"] << pod_with(state)
    seen = await driver.status("job_01abc")
    assert (seen.state, seen.failure_kind, seen.exit_code) == expected
    if seen.failure_kind == "runner-lost":
        assert "OOMKilled" in (seen.failure_message or "")


async def test_the_statuses_of_many_jobs_cost_two_calls_and_match_each_status(
    kmock: Any, tmp_path: Path
) -> None:
    driver = driver_for(kmock)
    await driver.create(spec_of(plan_of(tmp_path)))
    jobs = ["job_01abc", *(f"job_gone{n}" for n in range(20))]
    asked = len(list(kmock))
    seen = await driver.statuses(jobs)
    calls = list(kmock)[asked:]
    assert sorted(call.url.path for call in calls) == [POD, JOBS]  # not two per job
    selectors = [unquote(call.url.query_string) for call in calls]
    assert all("svc-runner" in query and "svc/runner-job-id in (job_01abc,job_gone0," in query
               for query in selectors), selectors  # these jobs' objects, not every runner's
    assert seen == {job: await driver.status(job) for job in jobs}
    assert seen["job_01abc"].state == "running"
    assert {seen[job].failure_kind for job in jobs[1:]} == {"infra-failed"}  # vanished
    kmock[f"get {POD}"] << pod_with({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    lost = (await driver.statuses(["job_01abc"]))["job_01abc"]
    assert (lost.state, lost.failure_kind, lost.exit_code) == ("failed", "runner-lost", 137)
    assert await driver.statuses([]) == {}


async def test_one_list_of_pods_serves_each_job_of_the_page(kmock: Any, tmp_path: Path) -> None:
    driver = driver_for(kmock)
    active = {"active": 1, "startTime": "2026-01-02T03:04:05Z"}
    kmock[f"get {JOBS}"] << {"apiVersion": "batch/v1", "kind": "JobList", "metadata": {},
                             "items": [{"metadata": {"name": job_name(job)}, "status": active}
                                       for job in ("job_01abc", "job_other")]}
    kmock[f"get {POD}"] << pod_with({"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    seen = await driver.statuses(["job_01abc", "job_other", "job_gone"])
    assert (seen["job_01abc"].state, seen["job_01abc"].exit_code) == ("failed", 137)
    assert seen["job_other"].state == "running"  # its own pod, not job_01abc's
    assert seen["job_gone"].failure_kind == "infra-failed"
    assert len([call for call in kmock if call.url.path == POD]) == 1


async def test_statuses_are_unknown_while_the_api_does_not_answer(
    kmock: Any, tmp_path: Path
) -> None:
    driver = driver_for(kmock)
    await driver.create(spec_of(plan_of(tmp_path)))
    kmock[f"get {JOBS}"] << 503 << {"message": f"busy {SECRET_CANARY}"}
    seen = await driver.statuses(["job_01abc", "job_gone"])
    assert {status.state for status in seen.values()} == {"running"}  # ask again later
    assert not any(status.failure_message for status in seen.values())


@pytest.mark.parametrize("mode", ["bwrap", "off"])
def test_the_pod_sandbox_setting_reaches_every_job_and_the_banner(
    tmp_path: Path, mode: str
) -> None:
    settings = RunnerSettings(data_dir=tmp_path, driver="kubernetes",
                              kubernetes_api="http://127.0.0.1:9", pod_sandbox=mode)
    driver = make_driver(settings)
    assert isinstance(driver, KubernetesDriver)
    assert driver.runner_env["SVC_POD_SANDBOX"] == mode
    assert settings.sandbox == mode
    assert ("OFF" in SANDBOX_BANNER["kubernetes", settings.sandbox]) == (mode == "off")


def test_an_unknown_pod_sandbox_mode_is_refused(tmp_path: Path) -> None:
    settings = RunnerSettings(data_dir=tmp_path, driver="kubernetes",
                              kubernetes_api="http://127.0.0.1:9", pod_sandbox="chroot")
    with pytest.raises(DriverError, match="SVC_POD_SANDBOX is bwrap or off, not 'chroot'"):
        make_driver(settings)


def _pod(phase: str, *states: dict[str, Any]) -> Any:
    """A pod as the client reads it: its phase and its containers' states."""
    client = k8s.ApiClient()
    statuses = [{"name": f"c{n}", "image": IMAGE, "imageID": "", "ready": False,
                 "restartCount": 0, "state": state} for n, state in enumerate(states)]
    body = {"metadata": {"name": "p"}, "status": {"phase": phase,
                                                  "containerStatuses": statuses}}
    return client.deserialize(json.dumps(body), "V1Pod", "application/json")


def test_a_pod_shows_itself_alive_only_while_a_container_is_being_started() -> None:
    before, moment = datetime.now(UTC), "2026-01-02T03:04:05Z"
    pulling = _pod("Pending", {"terminated": {"exitCode": 0, "reason": "Completed"}},
                   {"waiting": {"reason": "ImagePullBackOff"}})
    alive = pods_alive_at([pulling])
    assert alive is not None and alive >= before, "between containers: alive now"
    assert pods_alive_at([]) is not None, "no pod yet: being created"
    started = pods_alive_at([_pod("Running", {"running": {"startedAt": moment}})])
    assert started == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "when its container started"
    crashing = _pod("Running", {"waiting": {"reason": "CrashLoopBackOff"}})
    assert pods_alive_at([crashing]) is None, "a crash loop is no start"
    refused = _pod("Pending", {"waiting": {"reason": "CreateContainerConfigError"}})
    assert pods_alive_at([refused]) is None
    assert pods_alive_at(None) is None, "no answer from the API: no sign of life"
