"""The ``kubernetes`` runner driver: PVC, Job and per-job Secret through the ``kubernetes``
client.

Object names derive from the reserved ids, so creation is idempotent: ``409 AlreadyExists``
adopts the existing object. The session PVC is resolved or created before the Job; the
per-job Secret is created after it, owned by it (collected with it), so a failed Job
creation never leaves a Secret behind; an existing Secret is adopted without being read (the
manager reads no secret value: its Role has no ``get`` on secrets). The Secret carries the
job's runner-protocol token; the Job's env names the manager's Service. Transient API
failures (5xx, 429, timeouts) are retried with backoff; no API response body ever reaches a
caller, only the status code.

The runner reports its outcome through the runner protocol; :meth:`KubernetesDriver.status`
is the fallback for a runner that could not: the pod's status (kubelet's
``CreateContainerConfigError`` for a missing secret or key, or a ``FailedMount`` event for a
missing secret volume: ``secret-unavailable``) and the runner's termination message (its
failure kind). While no runner can beat (the pod between containers: an image pull) it also
tells when it last saw the job alive, which the lease honours (``SVC_RUNNER_START_S``).
Cancel deletes the Job in the foreground.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json
import logging
import re
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from functools import cache, partial
from typing import Any

import msgspec
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from ledger.states import FailureKind, JobState, job_state_of_failure
from runner_assembly.assembly import k8s_objects
from runner_assembly.assembly.names import JOB_SPEC_KEY, RUNNER_TOKEN_KEY, job_name
from runner_assembly.contract import jobfile
from runner_assembly.contract.plan import SessionVolume
from runner_assembly.drivers.protocol import (
    DriverError,
    JobHandle,
    JobSpec,
    JobStatus,
)

REST_LOGGER = logging.getLogger("kubernetes.client.rest")
log = logging.getLogger(__name__)


def drop_bodies(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("response body")


RETRYABLE = frozenset({429, 500, 502, 503, 504})
VANISHED = JobStatus(JobState.FAILED, failure_kind=FailureKind.INFRA_FAILED,
                     failure_message="the runner job vanished")
REQUEST_TIMEOUT = (5.0, 15.0)


def runners_among(runner_job_ids: Sequence[str]) -> str:
    """The label selector of these jobs' Jobs and pods only (finished Jobs stay listed for a
    day: the namespace may hold thousands)."""
    shared = ",".join(f"{name}={value}" for name, value in k8s_objects.RUNNER_LABELS.items())
    return f"{shared},{k8s_objects.RUNNER_JOB_LABEL} in ({','.join(runner_job_ids)})"


class KubernetesDriver:
    """Runner jobs as Kubernetes Jobs in one namespace."""

    name = "kubernetes"

    def __init__(self, api: k8s.ApiClient, namespace: str, *, attempts: int = 4,
                 backoff_s: float = 0.2,
                 request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
                 runner_env: dict[str, str] | None = None) -> None:
        """``runner_env``: what the Job's runner needs to reach the runner protocol
        (``SVC_RUNNER_API_URL``, ``SVC_RUNNER_HEARTBEAT_S``); never a secret."""
        self.runner_env = dict(runner_env or {})
        api.configuration.debug = False  # http.client would print bodies (secret data)
        REST_LOGGER.addFilter(drop_bodies)
        self.request_timeout = request_timeout
        self.core = k8s.CoreV1Api(api)
        self.batch = k8s.BatchV1Api(api)
        self.namespace = namespace
        self.attempts = attempts
        self.backoff_s = backoff_s

    async def create(self, spec: JobSpec) -> JobHandle:
        """Resolve or create the session PVC, then the Job, then its Secret; adopt any."""
        return await asyncio.to_thread(self._create, spec)

    def _create(self, spec: JobSpec) -> JobHandle:
        plan = spec.job.plan
        pvc = k8s_objects.session_pvc(plan)
        if pvc is not None:
            self._ensure("PersistentVolumeClaim", pvc,
                         self.core.create_namespaced_persistent_volume_claim,
                         self.core.read_namespaced_persistent_volume_claim)
        try:
            body = k8s_objects.job(plan, spec.job.workspace_root, self.runner_env)
        except ValueError as error:
            raise DriverError(FailureKind.BUILD_REQUIRED, str(error)) from None
        created, adopted = self._ensure("Job", body, self.batch.create_namespaced_job,
                                        self.batch.read_namespaced_job)
        secret = k8s_objects.per_job_secret(plan, created.metadata.uid, secret_data(spec))
        self._ensure("Secret", secret, self.core.create_namespaced_secret, None)
        return JobHandle(self.name, plan.job_name, f"job:{self.namespace}/{plan.job_name}",
                         adopted)

    def _ensure(self, kind: str, body: k8s_objects.K8sObject, create: Callable[..., Any],
                read: Callable[..., Any] | None) -> tuple[Any, bool]:
        """Create ``body``; on AlreadyExists read and adopt it (``read`` None: adopt unread)."""
        metadata, timeout = body["metadata"], self.request_timeout
        assert isinstance(metadata, dict)
        name = metadata["name"]
        try:
            return self._retrying(kind, partial(create, self.namespace, body,
                                                _request_timeout=timeout)), False
        except ApiException as error:
            if error.status != 409:
                raise DriverError(FailureKind.INFRA_FAILED, f"kubernetes refused the {kind} "
                                  f"(HTTP {error.status})") from None
        if read is None:
            return None, True
        try:
            return self._retrying(kind, partial(read, name, self.namespace,
                                                _request_timeout=timeout)), True
        except ApiException as error:
            raise DriverError(FailureKind.INFRA_FAILED, f"kubernetes could not read the {kind} "
                              f"(HTTP {error.status})") from None

    def _retrying(self, kind: str, call: Callable[[], Any]) -> Any:
        """``call``, retried with backoff on 5xx, 429 and timeouts; other API errors are
        raised as they are (their bodies never leave this module)."""
        for attempt in range(self.attempts):
            try:
                return call()
            except ApiException as error:
                if error.status not in RETRYABLE:
                    raise
            except urllib3.exceptions.HTTPError:
                pass
            time.sleep(self.backoff_s * 2 ** attempt)
        raise DriverError(FailureKind.INFRA_FAILED, f"kubernetes did not answer for the {kind} "
                          f"after {self.attempts} attempts")

    async def status(self, runner_job_id: str) -> JobStatus:
        """The Job's state: succeeded → completed, failed → failed, else running."""
        return await asyncio.to_thread(self._status, runner_job_id)

    async def statuses(self, runner_job_ids: Sequence[str]) -> dict[str, JobStatus]:
        """:meth:`status` of each job from one list of their Jobs and one of their pods (two
        API calls, however many jobs, not two a job; a pending pod still costs a list of its
        events, as in :meth:`status`)."""
        return await asyncio.to_thread(self._statuses, list(runner_job_ids))

    def _status(self, runner_job_id: str) -> JobStatus:
        name = job_name(runner_job_id)
        try:
            found = self.batch.read_namespaced_job(name, self.namespace,
                                                   _request_timeout=self.request_timeout)
        except ApiException as error:
            if error.status == 404:
                return VANISHED
            return JobStatus(JobState.RUNNING)  # unknown for now: ask again later
        except urllib3.exceptions.HTTPError:
            return JobStatus(JobState.RUNNING)
        return self._status_of(found, partial(self._pods, runner_job_id))

    def _statuses(self, runner_job_ids: list[str]) -> dict[str, JobStatus]:
        if not runner_job_ids:
            return {}
        selector = runners_among(runner_job_ids)
        try:
            jobs = self.batch.list_namespaced_job(self.namespace, label_selector=selector,
                                                  _request_timeout=self.request_timeout)
        except (ApiException, urllib3.exceptions.HTTPError):
            return dict.fromkeys(runner_job_ids, JobStatus(JobState.RUNNING))  # ask later
        by_name = {getattr(job.metadata, "name", None): job for job in jobs.items or []}
        pods = cache(partial(self._runner_pods, selector))  # listed once, if needed
        seen = {}
        for job in runner_job_ids:
            found = by_name.get(job_name(job))
            try:
                seen[job] = VANISHED if found is None else self._status_of(
                    found, partial(_pods_of, pods, job))
            except Exception as error:  # one job's odd object must not hide the others'
                log.error("the status of runner job %s could not be read (%s): unknown",
                          job, type(error).__name__)  # its kind only: never an API body
        return seen

    def _runner_pods(self, selector: str) -> dict[str, list[Any]] | None:
        """The runner pods of ``selector`` by their job (None: the API did not answer)."""
        try:
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector,
                                                 _request_timeout=self.request_timeout)
        except (ApiException, urllib3.exceptions.HTTPError):
            return None
        by_job: dict[str, list[Any]] = {}
        for pod in pods.items or []:
            job = (getattr(pod.metadata, "labels", None) or {}).get(
                k8s_objects.RUNNER_JOB_LABEL)
            by_job.setdefault(str(job), []).append(pod)
        return by_job

    def _status_of(self, found: Any, pods: Callable[[], list[Any] | None]) -> JobStatus:
        """The state of the Job ``found``; ``pods`` gives its pods (None: the API did not
        answer), asked for only when the Job's own status does not decide."""
        status = found.status
        if status is None:
            return self._pod_view(pods())
        started = _moment(status.start_time)
        if status.succeeded:
            return JobStatus(JobState.COMPLETED, exit_code=0, started_at=started,
                             finished_at=_moment(status.completion_time)
                             or _ended(status, "Complete"))
        if status.failed:
            fallback = _pod_fallback(pods()) or JobStatus(
                JobState.FAILED, failure_kind=FailureKind.RUNNER_LOST,
                failure_message="the runner job's pod failed without reporting its exit")
            return dataclasses.replace(fallback, started_at=started,
                                       finished_at=_ended(status, "Failed"))
        return self._pod_view(pods())

    def _pod_view(self, pods: list[Any] | None) -> JobStatus:
        """A Job still on: its pods' fallback outcome (kubelet's refusal to mount a secret
        included), else running, with the sign of life its pods show."""
        return _pod_fallback(pods) or self._mount_refusal(pods) \
            or JobStatus(JobState.RUNNING, alive_at=pods_alive_at(pods))

    def _mount_refusal(self, pods: list[Any] | None) -> JobStatus | None:
        """``secret-unavailable`` when kubelet reports (a ``FailedMount`` event on a pending
        pod) that a secret volume the job needs, or one of its keys, is missing: credential
        volumes are never ``optional`` (DESIGN 12)."""
        for pod in pods or []:
            if getattr(pod.status, "phase", None) not in (None, "Pending"):
                continue
            name = pod.metadata.name
            try:
                events = self.core.list_namespaced_event(
                    self.namespace, field_selector=f"involvedObject.name={name}",
                    _request_timeout=self.request_timeout)
            except (ApiException, urllib3.exceptions.HTTPError):
                return None
            for event in events.items or []:
                involved = getattr(event, "involved_object", None)
                if getattr(involved, "name", None) == name and event.reason == "FailedMount" \
                        and MISSING_MOUNT.search(event.message or ""):
                    return JobStatus(JobState.BLOCKED,
                                     failure_kind=FailureKind.SECRET_UNAVAILABLE,
                                     failure_message="kubelet could not mount a secret the "
                                     "runner job needs: a referenced secret or key is missing")
        return None

    def _pods(self, runner_job_id: str) -> list[Any] | None:
        """The job's pods (None: the API did not answer)."""
        try:
            pods = self.core.list_namespaced_pod(
                self.namespace, label_selector=f"{k8s_objects.RUNNER_JOB_LABEL}={runner_job_id}",
                _request_timeout=self.request_timeout)
        except (ApiException, urllib3.exceptions.HTTPError) :
            return None
        return [pod for pod in pods.items or []  # the selector, checked again: a server
                if (getattr(pod.metadata, "labels", None) or {}).get(  # may not apply it
                    k8s_objects.RUNNER_JOB_LABEL) == runner_job_id]

    async def ensure_volume(self, volume: dict[str, object]) -> str:
        """Resolve or create the session's PVC; its phase (``Pending`` until bound)."""
        body = k8s_objects.session_pvc_of(msgspec.convert(volume, SessionVolume))
        claim, _ = await asyncio.to_thread(
            self._ensure, "PersistentVolumeClaim", body,
            self.core.create_namespaced_persistent_volume_claim,
            self.core.read_namespaced_persistent_volume_claim)
        phase = getattr(getattr(claim, "status", None), "phase", None)
        return phase if isinstance(phase, str) else "Pending"

    async def delete_volume(self, volume: dict[str, object]) -> None:
        """Delete the session's PVC (gone already is fine)."""
        await asyncio.to_thread(self._delete_pvc, str(volume["pvcName"]))

    def _delete_pvc(self, name: str) -> None:
        try:
            self._retrying("PersistentVolumeClaim", partial(
                self.core.delete_namespaced_persistent_volume_claim, name, self.namespace,
                _request_timeout=self.request_timeout))
        except ApiException as error:
            if error.status != 404:
                raise DriverError(FailureKind.INFRA_FAILED, f"kubernetes could not delete the "
                                  f"PersistentVolumeClaim (HTTP {error.status})") from None

    async def cancel(self, runner_job_id: str) -> None:
        """Delete the Job in the foreground: it goes once its pods (and its owned Secret)
        are gone, so no pod of a cancelled job outlives it."""
        await asyncio.to_thread(self._cancel, runner_job_id)

    def _cancel(self, runner_job_id: str) -> None:
        try:
            self.batch.delete_namespaced_job(job_name(runner_job_id), self.namespace,
                                             propagation_policy="Foreground",
                                             _request_timeout=self.request_timeout)
        except ApiException as error:
            if error.status != 404:
                raise DriverError(FailureKind.INFRA_FAILED, f"kubernetes could not delete the Job "
                                  f"(HTTP {error.status})") from None


def _pods_of(listed: Callable[[], dict[str, list[Any]] | None], runner_job_id: str
             ) -> list[Any] | None:
    """The job's pods in ``listed()`` (None: the API did not answer)."""
    by_job = listed()
    return None if by_job is None else by_job.get(runner_job_id, [])


def _containers(pod: Any) -> list[Any]:
    status = pod.status
    return [*(getattr(status, "init_container_statuses", None) or []),
            *(getattr(status, "container_statuses", None) or [])]


def _pod_fallback(pods: list[Any] | None) -> JobStatus | None:
    """What the job's pods say when the runner could not report: kubelet's refusal to
    configure a container, or a container's end with the runner's termination message."""
    for pod in pods or []:
        for container in _containers(pod):
            seen = pod_container_status(container)
            if seen is not None:
                return seen
    return None


STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing", "ErrImagePull",
                              "ImagePullBackOff"})
"""kubelet's reasons for a container that is being started: its image pulled, its sandbox
or volumes set up."""


def pods_alive_at(pods: list[Any] | None) -> datetime | None:
    """The sign of life a job's pods show while its runner cannot beat: now when it is
    between containers (no pod yet, or a pending pod with no container running and one
    waiting to be started: ``STARTING_REASONS``), else the newest start of a running
    container (the runner in it beats once it is up). The runner heartbeats from inside a
    container, so nothing else renews the lease meanwhile."""
    if pods is None:
        return None  # the API did not answer: no sign of life
    if not pods:
        return datetime.now(UTC)  # the Job controller has not created its pod yet
    started: list[datetime] = []
    for pod in pods:
        states = [getattr(c, "state", None) for c in _containers(pod)]
        running = [getattr(state, "running", None) for state in states]
        started += [moment for r in running if r is not None
                    and (moment := _moment(getattr(r, "started_at", None))) is not None]
        waiting = [getattr(state, "waiting", None) for state in states]
        if getattr(pod.status, "phase", None) == "Pending" and all(r is None for r in running) \
                and all(w is None or w.reason in STARTING_REASONS for w in waiting):
            return datetime.now(UTC)
    return max(started, default=None)


MISSING_MOUNT = re.compile(r'secret "[^"]*" not found|non-existent secret key|'
                           r'couldn\'t find key \S+ in Secret')
"""kubelet's words (``FailedMount`` events) for a secret volume, or an item's key, that is
missing."""
MISSING_SECRET = re.compile(r'secret "[^"]*" not found|couldn\'t find key \S+ in Secret')
"""kubelet's words for a missing secret or key; its other configuration errors (a secret
cache that timed out, ``runAsNonRoot`` against a root image) are not a missing secret, and
the job stays as it is until the runner reports or its lease ends."""


def pod_container_status(container: Any) -> JobStatus | None:
    """A failed container's state as the job's outcome, or None while it is fine.

    A container kubelet would not configure because a secret or key behind a
    ``secretKeyRef`` is missing is ``secret-unavailable``; a container that ended with a
    non-zero code carries the runner's termination message (``{"failureKind",
    "failureMessage"}``), else the runner was lost before it could say more."""
    state = getattr(container, "state", None)
    waiting = getattr(state, "waiting", None)
    if waiting is not None and waiting.reason == "CreateContainerConfigError" \
            and MISSING_SECRET.search(waiting.message or ""):
        return JobStatus(JobState.BLOCKED, failure_kind=FailureKind.SECRET_UNAVAILABLE,
                         failure_message=f"kubelet could not configure the runner's container "
                                         f"{container.name}: a referenced secret or key is "
                                         f"missing")
    ended = getattr(state, "terminated", None)
    if ended is None or not ended.exit_code:
        return None
    told = termination_message(ended.message)
    kind = told.get("failureKind") or FailureKind.RUNNER_LOST
    message = told.get("failureMessage") or (
        f"the runner's container {container.name} ended with {ended.exit_code} "
        f"({ended.reason or 'no reason'}) without reporting its exit")
    return JobStatus(job_state_of_failure(kind), exit_code=ended.exit_code, failure_kind=kind,
                     failure_message=message[:500], finished_at=_moment(ended.finished_at))


def termination_message(text: str | None) -> dict[str, str]:
    """The runner's termination message: a small JSON object of strings (else nothing)."""
    try:
        value = json.loads(text or "")
    except ValueError:
        return {}
    if not isinstance(value, dict):
        return {}
    return {key: str(value[key])[:500] for key in ("failureKind", "failureMessage")
            if isinstance(value.get(key), str)}


def secret_data(spec: JobSpec) -> dict[str, str]:
    """The per-job Secret's data: the job file (no secret value), the transient env and the
    runner's token."""
    encoded = {JOB_SPEC_KEY: jobfile.encode(spec.job).decode(),
               RUNNER_TOKEN_KEY: spec.runner_token}
    encoded.update(spec.job_secret)
    return {key: base64.b64encode(value.encode()).decode() for key, value in encoded.items()}


def api_client(host: str | None = None) -> k8s.ApiClient:
    """A client for the cluster: in-cluster config, else the kubeconfig, else ``host``."""
    from kubernetes import config

    if host is not None:
        configuration = k8s.Configuration()
        configuration.host = host
        return k8s.ApiClient(configuration)
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
    except config.ConfigException:
        try:
            config.load_kube_config()  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError):
            raise DriverError(FailureKind.INFRA_FAILED, "no Kubernetes configuration: set "
                              "SVC_KUBERNETES_API, run in a cluster or provide a "
                              "kubeconfig") from None
    return k8s.ApiClient()


def _ended(status: Any, condition: str) -> datetime | None:
    """When the Job reached its terminal condition, as Kubernetes recorded it."""
    for found in getattr(status, "conditions", None) or []:
        if found.type == condition and found.status == "True":
            return _moment(found.last_transition_time)
    return None


def _moment(value: object) -> datetime | None:
    return value if isinstance(value, datetime) else None
