"""One driver conformance suite, run against ``local`` and ``kubernetes`` (issue 15 item 6).

With ``kubernetes``, kmock's emulator plays the API server and :class:`Kubelet` plays the
node: for every Job the driver creates it runs the pod's containers (the init container,
then the main one) as local processes under bubblewrap with exactly what the rendered Job
gives them -- the env of the Job spec (``secretKeyRef`` resolved from the stored Secrets), the
Secrets' data as their mounted files, emptyDirs and the session PVC as temp directories at
the pod's paths -- and kills them when the Job is deleted. The runner talks to the real app
over loopback. Both drivers pass the same assertions.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client as k8s

from runner_assembly.assembly.defaults import BuiltImage, RuntimeDefaults
from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.assembly.names import (
    JOB_SPEC_KEY,
    POD_JOB_SPEC_DIR,
    POD_STATE_DIR,
    RUNNER_TOKEN_KEY,
    TERMINATION_LOG,
    TOKEN_FILE,
)
from runner_assembly.drivers.k8s import api_client
from runner_assembly.runner.sandbox import _system_args, find_bwrap, python_paths
from runner_assembly.settings import RunnerSettings
from tests.conftest import app_client
from tests.grants_support import granting, with_grants
from tests.support import SECRET_CANARY
from tests.test_dispatch import TASKS, dispatch, process_alive, settle, submit
from tests.test_k8s_dispatch import kube  # noqa: F401  (the emulator fixture)
from tests.test_k8s_driver import IMAGE, NS, SOURCE, objects_of

SESSIONS = "/api/v1/sessions"
JOBS = "/api/v1/runner/jobs"
DRIVERS = ("local", "kubernetes")
LEASE_S, START_S = 5.0, 10.0


class MountFailed(Exception):
    """kubelet cannot mount a pod's volume (a non-optional secret that is missing)."""


class Kubelet:
    """Runs the pods of the Jobs stored in the emulator as local processes."""

    def __init__(self, server: Any, root: Path) -> None:
        self.server = server
        self.root = root
        self.groups: dict[str, int] = {}
        """The running container's process group, by Job name."""
        self.seen: set[str] = set()
        self.states: dict[str, dict[str, dict[str, Any]]] = {}
        """Each pod's container states (init containers first), as its status shows them."""
        self.start_delay = 0.0
        """Seconds between the init containers and the main one (a slow image pull)."""
        self.tasks: list[asyncio.Task[None]] = []
        self.image_paths: list[Path] = []
        """Host paths the image holds (read-only at their own names): a backend installed
        in the image, e.g. Codex's npm install."""
        self.image_env: dict[str, str] = {}
        """Variables the image sets beyond ``PATH`` and ``LANG`` (or instead of them)."""
        self.bwrap = find_bwrap()
        api = api_client(str(server.url).rstrip("/"))
        self.core, self.batch = k8s.CoreV1Api(api), k8s.BatchV1Api(api)

    def secret(self, name: str) -> dict[str, str] | None:
        """A stored Secret's data, decoded (None when there is none)."""
        found = objects_of(self.server).get(f"secrets/{name}")
        if found is None:
            return None
        return {key: base64.b64decode(value).decode()
                for key, value in (found.get("data") or {}).items()}

    async def watch(self) -> None:
        """Start a pod for each new Job; kill the pod of each deleted one."""
        while True:
            jobs = {key.split("/", 1)[1]: obj for key, obj in objects_of(self.server).items()
                    if key.startswith("jobs/")}
            for name, job in jobs.items():
                if name not in self.seen:
                    self.seen.add(name)
                    self.tasks.append(asyncio.create_task(self.run_pod(name, job)))
            for name, group in list(self.groups.items()):
                if name not in jobs:  # deleted: the pod goes with it
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(group, signal.SIGKILL)
                        os.killpg(group, signal.SIGCONT)
            await asyncio.sleep(0.1)

    async def run_pod(self, name: str, job: dict[str, Any]) -> None:
        """The init containers, then the main container, as the Job renders them; the pod's
        status and the Job's are written back as kubelet and the Job controller would."""
        for _ in range(100):  # the Secret follows the Job: wait for it, as kubelet does
            if self.secret(f"{name}-env") is not None:
                break
            await asyncio.sleep(0.05)
        template = job["spec"]["template"]
        pod = template["spec"]
        await asyncio.to_thread(self.core.create_namespaced_pod, NS, {
            "apiVersion": "v1", "kind": "Pod", "status": {"phase": "Pending"},
            "metadata": {"name": f"{name}-pod", "namespace": NS,
                         "labels": template["metadata"]["labels"]}})
        folder = self.root / name
        inits = pod.get("initContainers", [])
        self.states[name] = {c["name"]: {"waiting": {"reason": "PodInitializing"}}
                             for c in [*inits, *pod["containers"]]}
        try:
            volumes = {volume["name"]: self.volume(folder, volume)
                       for volume in pod["volumes"]}
        except MountFailed as failed:  # the pod stays pending; kubelet says why in an event
            await self.failed_mount(name, str(failed))
            return
        code = 0
        for container in [*inits, *pod["containers"]]:
            if container is pod["containers"][0] and self.start_delay:
                await self.pod_status(name, container["name"], {"waiting": {
                    "reason": "ContainerCreating"}})
                await asyncio.sleep(self.start_delay)  # the image is pulled
            try:
                argv, env = self.container(folder, container, volumes)
            except LookupError as error:
                await self.pod_status(name, container["name"], {"waiting": {
                    "reason": "CreateContainerConfigError",
                    "message": f"couldn't find key {error.args[0]} in Secret {NS}/{name}"}})
                return
            await self.pod_status(name, container["name"], {"running": {
                "startedAt": datetime.now(UTC).isoformat(timespec="seconds")}})
            process = await asyncio.create_subprocess_exec(
                *argv, env=env, stdin=subprocess.DEVNULL, start_new_session=True,
                stdout=(folder / f"{container['name']}.log").open("wb"),
                stderr=subprocess.STDOUT)
            self.groups[name] = process.pid
            code = await process.wait()
            code = code if code >= 0 else 128 - code
            if code != 0:
                message = (folder / f"{container['name']}.termination").read_text()
                await self.pod_status(name, container["name"], {"terminated": {
                    "exitCode": code, "reason": "Error", "message": message}})
                break
            await self.pod_status(name, container["name"], {"terminated": {
                "exitCode": 0, "reason": "Completed"}})
        self.groups.pop(name, None)
        with contextlib.suppress(k8s.ApiException):  # a deleted Job has no status to write
            await asyncio.to_thread(self.batch.patch_namespaced_job, name, NS, {
                "status": {"failed": 1} if code else {"succeeded": 1}})

    async def pod_status(self, name: str, container: str, state: dict[str, Any]) -> None:
        """Record a container's state on the job's pod, with the pod's phase as kubelet
        derives it (pending until the main container runs)."""
        states = self.states[name]
        states[container] = state
        statuses = [{"name": each, "image": IMAGE, "imageID": "", "ready": False,
                     "restartCount": 0, "state": seen} for each, seen in states.items()]
        *inits, main = statuses
        failed = any(s.get("terminated", {}).get("exitCode") for s in states.values())
        done = "terminated" in main["state"]
        phase = "Failed" if failed else "Succeeded" if done \
            else "Running" if "running" in main["state"] else "Pending"
        await asyncio.to_thread(self.core.patch_namespaced_pod, f"{name}-pod", NS, {"status": {
            "phase": phase, "initContainerStatuses": inits, "containerStatuses": [main]}})

    async def failed_mount(self, name: str, message: str) -> None:
        """What kubelet shows for a volume it cannot mount: the pod pending, its containers
        waiting, and a ``FailedMount`` event on the pod."""
        await self.pod_status(name, next(iter(self.states[name])), {"waiting": {
            "reason": "PodInitializing"}})
        await asyncio.to_thread(self.core.create_namespaced_event, NS, {
            "apiVersion": "v1", "kind": "Event", "type": "Warning", "reason": "FailedMount",
            "message": message,
            "metadata": {"name": f"{name}-pod.failedmount", "namespace": NS},
            "involvedObject": {"kind": "Pod", "name": f"{name}-pod", "namespace": NS}})

    def volume(self, folder: Path, volume: dict[str, Any]) -> Path:
        """A pod volume as a directory: emptyDir, Secret items, or the claim's directory."""
        if "persistentVolumeClaim" in volume:
            path = self.root / "pvc" / volume["persistentVolumeClaim"]["claimName"]
        else:
            path = folder / "volumes" / volume["name"]
        path.mkdir(parents=True, exist_ok=True)
        source = volume.get("secret")
        if source is not None:
            data = self.secret(source["secretName"])
            if data is None and not source.get("optional"):
                raise MountFailed(f'MountVolume.SetUp failed for volume "{volume["name"]}" : '
                                  f'secret "{source["secretName"]}" not found')
            for item in source.get("items", []):
                if item["key"] in (data or {}):
                    file = path / item["path"]
                    file.write_text((data or {})[item["key"]])
                    file.chmod(source.get("defaultMode", 0o644))
        return path

    def container(self, folder: Path, container: dict[str, Any],
                  volumes: dict[str, Path]) -> tuple[list[str], dict[str, str]]:
        """The container's command under bubblewrap, and its environment."""
        env = {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8", **self.image_env}  # the image's
        for entry in container.get("env", []):
            if "value" in entry:
                env[entry["name"]] = entry["value"]
                continue
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = (self.secret(ref["name"]) or {})[ref["key"]]  # LookupError:
            # kubelet's CreateContainerConfigError
        termination = folder / f"{container['name']}.termination"
        termination.touch()
        args = [self.bwrap, "--die-with-parent", "--unshare-pid", *_system_args(),
                "--proc", "/proc", "--dev", "/dev",
                "--bind", str(termination), TERMINATION_LOG]
        for mount in sorted(container["volumeMounts"], key=lambda m: len(m["mountPath"])):
            option = "--ro-bind" if mount.get("readOnly") else "--bind"
            args += [option, str(volumes[mount["name"]]), mount["mountPath"]]
        for path in [*python_paths(), *self.image_paths]:  # the image's Python (and
            args += ["--ro-bind", str(path), str(path)]  # programs): after the pod's ``/tmp``
            # (a checkout under /tmp stays visible)
        program, *rest = container["command"]
        assert program == "python"
        return [*args, "--chdir", container["workingDir"], "--", sys.executable, *rest], env

    def pause(self, name: str) -> int:
        """Stop the job's running container (a hung runner); its process group."""
        group = self.groups[name]
        os.killpg(group, signal.SIGSTOP)
        return group

    async def close(self) -> None:
        """Kill every pod left."""
        for group in self.groups.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
                os.killpg(group, signal.SIGCONT)
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@dataclasses.dataclass
class Harness:
    """One driver under test: its settings, the app's client, and how to reach its jobs."""

    driver: str
    settings: RunnerSettings
    client: httpx.AsyncClient
    kubelet: Kubelet | None

    tokens: dict[str, str] = dataclasses.field(default_factory=dict)
    """Local jobs' tokens as seen while they ran (an ended job's token file is removed)."""

    async def collect_tokens(self) -> None:
        """Note each local job's runner token while its file exists."""
        while True:
            for path in self.settings.jobs_dir.glob(f"*/{TOKEN_FILE}"):
                with contextlib.suppress(OSError):
                    self.tokens.setdefault(path.parent.name, path.read_text().strip())
            await asyncio.sleep(0.02)

    def token(self, runner_job_id: str) -> str:
        """The job's runner token, where the driver delivered it."""
        if self.kubelet is None:
            path = self.settings.jobs_dir / runner_job_id / TOKEN_FILE
            with contextlib.suppress(OSError):
                return self.tokens.setdefault(runner_job_id, path.read_text().strip())
            return self.tokens[runner_job_id]
        data = self.kubelet.secret(f"svc-v01-{runner_job_id.replace('_', '-')}-env")
        assert data is not None
        return data[RUNNER_TOKEN_KEY]

    async def pause(self, runner_job_id: str, session_id: str) -> int:
        """Once the job's backend runs, stop its runner (it stays, silent); the stopped
        process group."""
        deadline = time.monotonic() + 60
        while not any('"backend-start"' in line
                      for line in await lines(self.client, session_id, "trace")):
            assert time.monotonic() < deadline, "the backend started"
            await asyncio.sleep(0.1)
        if self.kubelet is None:
            group = int((self.settings.jobs_dir / runner_job_id / "pid").read_text())
            os.killpg(group, signal.SIGSTOP)
            return group
        return self.kubelet.pause(f"svc-v01-{runner_job_id.replace('_', '-')}")

    def remove_profile_secret(self) -> None:
        """Take the profile-1 secret away from the driver's secret store."""
        folder = self.settings.secrets_dir / NS / "svc-v01-provider-profile-1"
        for key in folder.iterdir():
            key.unlink()
        if self.kubelet is not None:
            core = k8s.CoreV1Api(api_client(str(self.kubelet.server.url).rstrip("/")))
            core.delete_namespaced_secret("svc-v01-provider-profile-1", NS)


def store_secrets(server: Any, secrets_dir: Path) -> None:
    """The file store's secrets as cluster Secrets (the kubernetes driver's secret store)."""
    core = k8s.CoreV1Api(api_client(str(server.url).rstrip("/")))
    for folder in (secrets_dir / NS).iterdir():
        data = {key.name: base64.b64encode(key.read_bytes()).decode()
                for key in folder.iterdir()}
        core.create_namespaced_secret(NS, {"apiVersion": "v1", "kind": "Secret",
                                           "metadata": {"name": folder.name, "namespace": NS},
                                           "data": data})


@pytest.fixture(params=DRIVERS)
async def harness(request: pytest.FixtureRequest, database_url: str,
                  runner_settings: RunnerSettings, tmp_path: Path) -> AsyncIterator[Harness]:
    """The app on loopback with the driver under test (and its kubelet for kubernetes)."""
    sandbox = "off" if request.node.get_closest_marker("unsandboxed") else "bwrap"
    server = request.getfixturevalue("kube") if request.param == "kubernetes" else None
    async with running(request.param, database_url, runner_settings, tmp_path, server,
                       sandbox) as harness:
        yield harness


@contextlib.asynccontextmanager
async def running(driver: str, database_url: str, runner_settings: RunnerSettings,
                  tmp_path: Path, server: Any = None, sandbox: str = "bwrap",
                  ) -> AsyncIterator[Harness]:
    """The app on loopback with ``driver`` (its kubelet on the emulator ``server`` for
    kubernetes) and the suite's settings over ``runner_settings``."""
    granted = with_grants(runner_settings,
                          granting(*ENV_CREDENTIAL["secretScope"]["toolCredentials"]))
    settings = dataclasses.replace(granted, runner_heartbeat_s=0.3,
                                   runner_lease_s=LEASE_S, runner_start_s=START_S,
                                   local_sandbox=sandbox,
                                   pod_sandbox=sandbox)
    kubelet = None
    if driver == "kubernetes":
        store_secrets(server, settings.secrets_dir)
        settings = dataclasses.replace(
            settings, driver="kubernetes", kubernetes_api=str(server.url).rstrip("/"),
            defaults=RuntimeDefaults(imageSource=SOURCE, smokeTools=["git"],
                                     images=[BuiltImage(source=SOURCE, image=IMAGE)],
                                     tenantPolicies=settings.defaults.tenantPolicies))
        kubelet = Kubelet(server, tmp_path / "node")
    async with app_client(database_url, settings) as client:
        harness = Harness(driver, settings, client, kubelet)
        watcher = asyncio.create_task(kubelet.watch() if kubelet else harness.collect_tokens())
        try:
            yield harness
        finally:
            watcher.cancel()
            if kubelet is not None:
                await kubelet.close()


def ref(name: str) -> dict[str, str]:
    return {"sessionId": name, "conversationId": f"cnv_{name}"}


async def lines(client: httpx.AsyncClient, session_id: str, channel: str = "output",
                ) -> list[str]:
    answer = await client.get(f"{SESSIONS}/{session_id}/{channel}", params={"limit": 1000})
    return [item["line"] for item in answer.json()["items"]]


async def runner_job_of(client: httpx.AsyncClient, task: dict[str, Any]) -> dict[str, Any]:
    run_id = task["latestAttempt"]["runId"]
    return dict((await client.get(f"/api/v1/runs/{run_id}/runner-job")).json())


async def test_output_trace_assembly_storage_and_a_thread_resumed_across_two_turns(
    harness: Harness
) -> None:
    client = harness.client
    first = await submit(client, "first turn\nlines: 2", sessionRef=ref("ses_c1"))
    await dispatch(client, first)
    done = await settle(client, first, timeout=60)
    assert done["state"] == "completed", done
    output = await lines(client, "ses_c1")
    started = [line for line in output if line.startswith("thread started: ")]
    assert len(started) == 1, output
    thread = started[0].split(": ")[1]
    assert "> first turn" in output
    job = await runner_job_of(client, done)
    assert "project-profile-secret" in job["assembly"]["steps"], job
    assert job["assembly"]["valuesPrinted"] is False

    second = await submit(client, "second turn", sessionRef=ref("ses_c1"))
    await dispatch(client, second)
    assert (await settle(client, second, timeout=60))["state"] == "completed"
    output = await lines(client, "ses_c1")
    assert f"thread resumed: {thread} (turn 2)" in output
    assert output.count("> first turn") == 1 and output.count("> second turn") == 1
    trace = await lines(client, "ses_c1", "trace")
    kinds = [line.split('"kind": "')[1].split('"')[0] for line in trace]
    assert kinds.count("runner-started") == 2 and kinds.count("backend-exit") == 2, kinds
    assert '"thread": "resume"' in trace[kinds.index("backend-start", 3)]
    session = (await client.get(f"{SESSIONS}/ses_c1")).json()
    assert session["threadId"] == thread and session["turns"] == 2
    storage = session["storage"]
    assert storage["pvcName"] == "svc-v01-session-ses-c1" and storage["storageFilesCount"] == 1
    assert storage["storageSizeBytes"] > 0
    token = harness.token(job["runnerJobId"])
    shown = "\n".join([*output, *trace])
    if harness.kubelet is not None:  # the pod's own logs too
        shown += "".join(log.read_text() for log in harness.kubelet.root.glob("*/*.log"))
    assert SECRET_CANARY not in shown and token not in shown, "no value is printed"


def token_paths(harness: Harness) -> list[str]:
    """Where a job's runner token and spec lie, as its backend would look for them."""
    if harness.kubelet is None:
        hidden = [f"{harness.settings.jobs_dir}/*/{TOKEN_FILE}",
                  f"{harness.settings.jobs_dir}/*/spec.json"]
    else:
        hidden = [f"{POD_JOB_SPEC_DIR}/{RUNNER_TOKEN_KEY}", f"{POD_JOB_SPEC_DIR}/{JOB_SPEC_KEY}",
                  POD_JOB_SPEC_DIR, f"{POD_STATE_DIR}/launch.json"]
    return hidden


async def test_the_backend_cannot_read_its_runner_token(harness: Harness) -> None:
    """The backend runs with its runner's UID: the token (and the job spec next to it, and
    the runner's scratch) must be out of its reach, or it could pose as its runner. The job
    still reports normally."""
    hidden = token_paths(harness)
    client = harness.client
    task_id = await submit(client, f"read: {' '.join(hidden)}\nlines: 1",
                           sessionRef=ref("ses_tok"))
    await dispatch(client, task_id)
    done = await settle(client, task_id, timeout=60)
    assert done["state"] == "completed", done
    output = await lines(client, "ses_tok")
    reads = [line for line in output if line.startswith("read ")]
    assert len(reads) == len(hidden), output
    assert all(line.startswith("read failed (") for line in reads), reads
    assert "line 1" in output
    trace = await lines(client, "ses_tok", "trace")
    assert any('"backend-exit"' in line for line in trace), trace


@pytest.mark.unsandboxed
async def test_with_the_sandbox_off_the_backend_reads_the_token_and_the_trace_says_so(
    harness: Harness
) -> None:
    """``SVC_LOCAL_SANDBOX=off`` / ``SVC_POD_SANDBOX=off``: the operator's knowing way out
    (nodes without user namespaces); the backend then reads what the sandbox hides."""
    paths = [path for path in token_paths(harness) if "*" not in path][:1] or \
        token_paths(harness)[:1]
    task_id = await submit(harness.client, f"read: {paths[0]}\nlines: 1",
                           sessionRef=ref("ses_off"))
    await dispatch(harness.client, task_id)
    done = await settle(harness.client, task_id, timeout=60)
    assert done["state"] == "completed", done
    output = await lines(harness.client, "ses_off")
    assert any(line.startswith("read succeeded: ") for line in output), output
    trace = await lines(harness.client, "ses_off", "trace")
    assert any('"backend-start"' in line and '"sandbox": "off"' in line for line in trace), \
        trace


ENV_CREDENTIAL = {"secretScope": {"toolCredentials": [
    {"tool": "ext-ssh", "purpose": "terminal",
     "secretRef": {"name": "absent-ext-token", "keys": ["EXT_SSH_CLIENT_TOKEN"]},
     "projection": {"kind": "env", "envName": "EXT_SSH_CLIENT_TOKEN"}}]}}
"""A tool credential projected as env whose secret does not exist (kubelet refuses it)."""


@pytest.mark.parametrize("case", ["backend-blocker", "missing-profile-secret",
                                  "missing-env-credential"])
async def test_blockers_end_blocked_with_their_kind(harness: Harness, case: str) -> None:
    client = harness.client
    extra: dict[str, Any] = {}
    body: dict[str, Any] = {}
    prompt, kind = "say hello", "secret-unavailable"
    if case == "missing-profile-secret":
        harness.remove_profile_secret()
    elif case == "missing-env-credential":
        extra = {"executionPolicy": ENV_CREDENTIAL}
        body = {"transientEnv": {"EXT_MAIN_SERVER_HOST": "lab.example"}}
    else:
        prompt, kind = "blocker: required-skill-unavailable", "required-skill-unavailable"
    task_id = await submit(client, prompt, **extra)
    await dispatch(client, task_id, body)
    # Refreshes side by side, as workers and pollers make them: the one that stops a job
    # kubelet cannot configure must not leave the others reading a vanished job.
    settled = await asyncio.gather(*(settle(client, task_id, timeout=60) for _ in range(4)))
    task = (await client.get(f"{TASKS}/{task_id}")).json()
    assert task["state"] == "blocked", (task["latestAttempt"]["failureKind"],
                                        task["latestAttempt"]["failureMessage"])
    assert task["latestAttempt"]["failureKind"] == kind
    assert {seen["state"] for seen in settled} == {"blocked"}


async def paused_sleeper(harness: Harness, session_id: str) -> tuple[str, int]:
    """A dispatched task whose backend sleeps, its runner stopped: the task's id and the
    runner's process group."""
    task_id = await submit(harness.client, "sleep: 60", sessionRef=ref(session_id))
    task = await dispatch(harness.client, task_id)
    runner_job = (await runner_job_of(harness.client, task))["runnerJobId"]
    return task_id, await harness.pause(runner_job, session_id)


async def gone(group: int) -> bool:
    """Whether the process group's leader ended (waiting up to 15 s)."""
    deadline = time.monotonic() + 15
    while process_alive(group) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return not process_alive(group)


async def test_cancel_stops_the_runner_job(harness: Harness) -> None:
    task_id, group = await paused_sleeper(harness, "ses_cancel")
    os.killpg(group, signal.SIGCONT)  # it was only to wait for the backend to run
    answer = await harness.client.post(f"{TASKS}/{task_id}/cancel", json={"reason": "stop"})
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    assert await gone(group), "the runner was stopped"
    if harness.kubelet is not None:
        (delete,) = [r for r in harness.kubelet.server if r.method == "DELETE"]
        assert "propagationPolicy=Foreground" in str(delete.url)
        assert not any(k.startswith("jobs/") for k in objects_of(harness.kubelet.server))


async def test_a_lost_lease_ends_the_attempt_runner_lost(harness: Harness) -> None:
    task_id, group = await paused_sleeper(harness, "ses_lease")
    await asyncio.sleep(6)
    lost = (await harness.client.post(f"{TASKS}/{task_id}/refresh")).json()
    assert lost["state"] == "failed", lost
    assert lost["latestAttempt"]["failureKind"] == "runner-lost"
    assert await gone(group), "what was left of the job was stopped"


async def test_a_slow_start_of_the_backend_container_is_not_a_lost_runner(
    harness: Harness
) -> None:
    """Between the ``assemble`` and ``backend`` containers (an image pull) no runner beats:
    the lease waits while the pod shows the container being started."""
    if harness.kubelet is None:
        pytest.skip("a local runner is one process: it beats from its claim to its exit")
    harness.kubelet.start_delay = LEASE_S + 2
    began = time.monotonic()
    task_id = await submit(harness.client, "say hello", sessionRef=ref("ses_pull"))
    await dispatch(harness.client, task_id)
    task = await settle(harness.client, task_id, timeout=60)  # refreshed all along
    assert task["state"] == "completed", (task["latestAttempt"]["failureKind"],
                                          task["latestAttempt"]["failureMessage"])
    assert time.monotonic() - began > LEASE_S + 2, "the backend container started late"


async def test_a_backend_container_that_never_starts_ends_runner_lost(
    harness: Harness
) -> None:
    if harness.kubelet is None:
        pytest.skip("a local runner is one process: it beats from its claim to its exit")
    harness.kubelet.start_delay = 3600  # its image is never pulled
    began = time.monotonic()
    task_id = await submit(harness.client, "say hello", sessionRef=ref("ses_nopull"))
    await dispatch(harness.client, task_id)
    task = await settle(harness.client, task_id, timeout=60)
    assert task["state"] == "failed", task
    assert task["latestAttempt"]["failureKind"] == "runner-lost"
    assert time.monotonic() - began > LEASE_S + START_S - 1, "not before the start allowance"
    assert not any(k.startswith("jobs/") for k in objects_of(harness.kubelet.server)), \
        "what was left of the job was stopped"


async def test_a_runner_killed_before_it_reports_ends_failed_not_stuck(
    harness: Harness
) -> None:
    task_id, group = await paused_sleeper(harness, "ses_kill")
    os.killpg(group, signal.SIGKILL)
    os.killpg(group, signal.SIGCONT)
    ended = await settle(harness.client, task_id, timeout=30)
    assert ended["state"] == "failed", ended
    assert ended["latestAttempt"]["failureKind"] == "runner-lost"
    assert "without reporting its exit" in ended["latestAttempt"]["failureMessage"]


async def test_a_token_speaks_for_its_own_job_and_not_after_it_ended(
    harness: Harness
) -> None:
    client = harness.client
    tasks = [await submit(client, "sleep: 60", sessionRef=ref(f"ses_t{n}")) for n in (1, 2)]
    jobs = [(await runner_job_of(client, await dispatch(client, t)))["runnerJobId"]
            for t in tasks]
    tokens = [harness.token(job) for job in jobs]
    assert tokens[0] != tokens[1]
    auth = {"Authorization": f"Bearer {tokens[0]}"}
    refused = await client.post(f"{JOBS}/{jobs[1]}/heartbeat", json={}, headers=auth)
    assert refused.status_code == 401, refused.text
    assert (await client.post(f"{JOBS}/{jobs[0]}/heartbeat", json={},
                              headers=auth)).status_code in (200, 409)
    await client.post(f"{TASKS}/{tasks[0]}/cancel", json={"reason": "stop"})
    ended = await client.post(f"{JOBS}/{jobs[0]}/heartbeat", json={}, headers=auth)
    assert ended.status_code == 401, "the token of an ended job is refused"
    await client.post(f"{TASKS}/{tasks[1]}/cancel", json={"reason": "stop"})
