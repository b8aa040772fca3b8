"""Kubernetes objects of a runner job, rendered from its value-free plan.

- the session PVC ``svc-v01-session-<sessionId>`` (1Gi, ``SVC_SESSION_STORAGE_CLASS``),
- the per-job Secret (the job spec and the transient environment), owned by its Job,
- the Job: an ``assemble`` init container (the runner's assembly steps) and a ``backend``
  container, under Pod Security "restricted" plus our policy: no service-account token,
  read-only root file system, secrets mounted read-only, tool env credentials and the
  per-job secret only through ``secretKeyRef``. Both run the runner, which speaks the runner
  protocol to the manager's Service (``SVC_RUNNER_API_URL`` in the Job's env) with the job's
  token, mounted from the per-job Secret as a file; the ``backend`` container's runner starts
  the backend under bwrap without that mount (:func:`runner_assembly.runner.pod.sandboxed`),
  so the backend cannot read the token. Only secrets the plan names are mounted, and only
  after the tenant's grants passed (:mod:`runner_assembly.assembly.grants`); none is
  ``optional``: a missing one stops the pod (kubelet's ``FailedMount``, or
  ``CreateContainerConfigError`` for an env reference), which the driver maps to
  ``secret-unavailable``.

The Job object carries no secret value: only names, keys, paths, ids and the manager's URL.
"""

from __future__ import annotations

from runner_assembly.assembly.names import (
    JOB_SPEC_KEY,
    POD_BACKEND_HOME,
    POD_HOME,
    POD_JOB_SPEC_DIR,
    POD_SECRETS_ROOT,
    POD_WORKSPACE_ROOT,
    RUNNER_ENTRY,
    RUNNER_TOKEN_KEY,
)
from runner_assembly.contract.plan import RunnerJobPlan, SessionVolume

K8sObject = dict[str, object]
"""A Kubernetes object (or part of one) as the API client takes it."""

RUN_AS = 10001
SAFE_CONTAINER = {
    "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
}
RESOURCES = {"requests": {"cpu": "500m", "memory": "1Gi"},
             "limits": {"cpu": "2", "memory": "4Gi", "ephemeral-storage": "8Gi"}}


RUNNER_LABELS = {"app.kubernetes.io/name": "svc-runner", "app.kubernetes.io/managed-by": "svc"}
"""The labels every runner job's objects share (the driver lists its Jobs by them)."""
RUNNER_JOB_LABEL = "svc/runner-job-id"
"""The label naming an object's runner job."""


def labels(plan: RunnerJobPlan) -> dict[str, str]:
    """Labels every object of one runner job carries."""
    return {**RUNNER_LABELS, "svc/run-id": plan.ids.run_id,
            RUNNER_JOB_LABEL: plan.ids.runner_job_id}


def session_pvc(plan: RunnerJobPlan) -> K8sObject | None:
    """The session's single-writer persistent volume claim, or None without a session."""
    volume = plan.session_volume
    return None if volume is None else session_pvc_of(volume)


def session_pvc_of(volume: SessionVolume) -> K8sObject:
    """The persistent volume claim of one session volume."""
    return {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": volume.pvc_name, "namespace": volume.namespace,
                     "labels": {"app.kubernetes.io/name": "svc-session",
                                "app.kubernetes.io/managed-by": "svc",
                                "svc/session-id": volume.session_id}},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": volume.storage_class,
                 "resources": {"requests": {"storage": volume.size}}},
    }


def per_job_secret(plan: RunnerJobPlan, job_uid: str | None,
                   data: dict[str, str] | None) -> K8sObject:
    """The per-job Secret; ``data`` (base64 values) is None when rendering for display."""
    metadata: K8sObject = {"name": _secret_name(plan), "namespace": plan.namespace,
                           "labels": labels(plan)}
    secret: K8sObject = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                         "metadata": metadata, "immutable": True}
    if job_uid is not None:
        metadata["ownerReferences"] = [{
            "apiVersion": "batch/v1", "kind": "Job", "name": plan.job_name, "uid": job_uid,
            "controller": True, "blockOwnerDeletion": True}]
    if data is not None:
        secret["data"] = data
    return secret


def _secret_name(plan: RunnerJobPlan) -> str:
    return plan.per_job_secret.name


def job(plan: RunnerJobPlan, workspace_root: str | None = None,
        runner_env: dict[str, str] | None = None) -> K8sObject:
    """The Job: assembly in an init container, then the backend; ``runner_env`` (the
    runner protocol's address and heartbeat, no secret) goes to both."""
    if plan.image.image is None:
        raise ValueError("a Kubernetes runner job needs a digest-pinned image")
    root = workspace_root or str(POD_WORKSPACE_ROOT)
    mounts, volumes = _volumes(plan, root)
    protocol: list[K8sObject] = [{"name": name, "value": value}
                                 for name, value in (runner_env or {}).items()]
    pod_spec: K8sObject = {
        "restartPolicy": "Never", "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS,
                            "fsGroup": RUN_AS, "seccompProfile": {"type": "RuntimeDefault"}},
        "initContainers": [_container(plan, "assemble", mounts["assemble"], protocol, root)],
        "containers": [_container(plan, "backend", mounts["backend"],
                                  [*protocol, *_env(plan)], root)],
        "volumes": volumes,
    }
    spec: K8sObject = {"backoffLimit": 0, "ttlSecondsAfterFinished": 86400,
                       "template": {"metadata": {"labels": labels(plan)}, "spec": pod_spec}}
    if plan.active_deadline_seconds is not None:  # the queue's timeout budget plus a margin
        spec["activeDeadlineSeconds"] = plan.active_deadline_seconds
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": plan.job_name, "namespace": plan.namespace, "labels": labels(plan)},
        "spec": spec,
    }


def _container(plan: RunnerJobPlan, phase: str, mounts: list[K8sObject],
               env: list[K8sObject], root: str) -> K8sObject:
    return {"name": phase, "image": plan.image.image, "imagePullPolicy": "Always",
            "command": [*RUNNER_ENTRY, phase], "workingDir": root,
            "env": [{"name": "SVC_JOB_SPEC", "value": f"{POD_JOB_SPEC_DIR}/{JOB_SPEC_KEY}"},
                    *env],
            "resources": RESOURCES, "securityContext": SAFE_CONTAINER, "volumeMounts": mounts}


def _env(plan: RunnerJobPlan) -> list[K8sObject]:
    """Only secret references: static values are written by the assembly step."""
    return [{"name": e.name, "valueFrom": {"secretKeyRef": {"name": e.secret_name,
                                                            "key": e.key}}}
            for e in plan.env if e.source != "static"]


def _volumes(plan: RunnerJobPlan,
             root: str) -> tuple[dict[str, list[K8sObject]], list[K8sObject]]:
    """Volumes, and the mounts of each container."""
    volumes: list[K8sObject] = [
        {"name": "home", "emptyDir": {}}, {"name": "workspace", "emptyDir": {}},
        {"name": "tmp", "emptyDir": {}},
        {"name": "job", "secret": {"secretName": _secret_name(plan), "defaultMode": 0o400,
                                   "items": [{"key": JOB_SPEC_KEY, "path": JOB_SPEC_KEY},
                                             {"key": RUNNER_TOKEN_KEY,
                                              "path": RUNNER_TOKEN_KEY}]}},
    ]
    common: list[K8sObject] = [{"name": "home", "mountPath": str(POD_HOME)},
                                    {"name": "workspace", "mountPath": root},
                                    {"name": "tmp", "mountPath": "/tmp"},
                                    {"name": "job", "mountPath": POD_JOB_SPEC_DIR,
                                     "readOnly": True}]
    assemble, backend = list(common), list(common)
    for index, use in enumerate(plan.secrets):
        if use.projection == "env":
            continue
        name = f"secret-{index}"
        volumes.append({"name": name, "secret": {
            "secretName": use.name, "defaultMode": 0o400,
            "items": [{"key": key, "path": key} for key in use.keys]}})
        if use.projection == "volume":
            backend.append({"name": name, "mountPath": use.mount_path, "readOnly": True})
        else:  # the profile secret and the repository credential: the assembly step only
            assemble.append({"name": name, "mountPath": f"{POD_SECRETS_ROOT}/{use.namespace}/"
                             f"{use.name}", "readOnly": True})
    volume = plan.session_volume
    if volume is not None:
        volumes.append({"name": "session",
                        "persistentVolumeClaim": {"claimName": volume.pvc_name}})
        backend.append({"name": "session",
                        "mountPath": f"{POD_BACKEND_HOME}/{volume.rollout_subdir}"})
    return {"assemble": assemble, "backend": backend}, volumes
