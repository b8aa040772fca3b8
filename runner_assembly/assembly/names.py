"""Every name a runner job's objects and files are known by: Kubernetes object names derived
from reserved ids, paths inside a pod, and the files of a local job directory.

Names derive from reserved ids only, so a second create finds the first (SPEC 2.2, DESIGN 4).
"""

from __future__ import annotations

from pathlib import PurePosixPath

PREFIX = "svc-v01"
"""The prefix of every object name (and the default namespace)."""

# Inside a pod (a local job maps the same layout below its job directory).
POD_HOME = PurePosixPath("/home/svc")
POD_WORKSPACE_ROOT = PurePosixPath("/workspace")
POD_BACKEND_HOME = f"{POD_HOME}/.backend"
POD_SECRETS_ROOT = "/var/run/svc/secrets"
POD_JOB_SPEC_DIR = "/var/run/svc/job"
JOB_SPEC_KEY = "job-spec.json"
RUNNER_TOKEN_KEY = "runner-token"
"""The per-job Secret's key (and mounted file) holding the job's runner-protocol token."""
POD_STATE_DIR = f"{POD_HOME}/.svc"
"""The pod runner's own scratch (emptyDir): line files it ships, the claim's outcome."""
TERMINATION_LOG = "/dev/termination-log"
"""Where a pod's runner leaves its failure kind for the pod status (the manager's fallback)."""
MANAGER_SERVICE = "svc-manager"
"""The manager's Service: pods reach the runner protocol through it."""
RUNNER_ENTRY = ["python", "-m", "runner_assembly.runner.pod"]

# Environment variables the runner itself sets for the backend (never from transientEnv).
STATIC_ENV = ("HOME", "BACKEND_HOME", "SVC_WORKSPACE_PATH", "SVC_RUN_ID", "SVC_SESSION_ID",
              "SVC_BACKEND_PROFILE", "SVC_SKILLS_DIRS", "PATH", "LANG")
SESSION_ENV = ("SVC_SESSION_PVC_NAME", "SVC_SESSION_PVC_NAMESPACE", "SVC_SESSION_PVC_MOUNT_PATH",
               "SVC_BACKEND_ROLLOUT_SUBDIR")

# Files of a local job directory ``${SVC_DATA_DIR}/jobs/<runnerJobId>/``.
JOB_FILE = "spec.json"
"""The job file (:mod:`runner_assembly.contract.jobfile`), written by the driver."""
JOB_SECRET_DIR = "job-secret"
"""The local analogue of the per-job Kubernetes Secret: one 0600 file per key."""
TOKEN_FILE = "runner.token"
"""The job's runner-protocol bearer token (0600), written by the driver with the job."""
CHANNEL_FILES = {"output": "stdout.log", "trace": "trace.jsonl"}
"""The runner's own scratch files for each session channel (it ships them; nobody else reads
them)."""
STDERR_FILE = "stderr.log"
"""The runner's scratch file of the backend's standard error, masked: shipped to the session's
output channel as the ``stderr`` stream."""


def kube_name(identifier: str) -> str:
    """A reserved id (``job_01j…``) as a Kubernetes name (``job-01j…``)."""
    return identifier.replace("_", "-")


def job_name(runner_job_id: str) -> str:
    """The Job's name for a reserved runner-job id."""
    return f"{PREFIX}-{kube_name(runner_job_id)}"


def per_job_secret_name(runner_job_id: str) -> str:
    """The per-job secret holding the transient environment and endpoint defaults."""
    return f"{job_name(runner_job_id)}-env"


def manager_url(namespace: str) -> str:
    """The runner protocol's base URL inside the cluster: the manager's Service (port 80)."""
    return f"http://{MANAGER_SERVICE}.{namespace}.svc"


def session_pvc_name(session_id: str) -> str:
    """The persistent volume claim of a session (one-to-one with the session id)."""
    return f"{PREFIX}-session-{kube_name(session_id)}"
