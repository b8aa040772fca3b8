"""The ``local`` driver (embedded default): a runner job is a detached child process.

Each job has a directory ``<data>/jobs/<runnerJobId>/`` created with an exclusive ``mkdir``,
so a second create finds the first and adopts it. The child runs ``local_runner`` with an
explicit minimal environment: nothing is inherited from the server but the runner protocol's
address (``SVC_RUNNER_API_URL``) and heartbeat interval; the job's token is in
``runner.token`` (0600). The runner reports everything through the runner protocol; this
driver reads none of its files, only whether its process still runs (when it no longer does,
what is left of its process group is killed: a killed runner's backend does not run on
unsandboxed; under bwrap, ``--die-with-parent`` ends it already). A create that finds
no ``pid`` starts the runner again: if the first one did start (a crash before its ``pid``
was written), one of them loses the claim and exits without starting the backend; the
winner writes its own ``pid``, so the driver follows the runner that runs the backend. The secret
root is an argument of the runner, not part of ``spec.json``; unless ``SVC_LOCAL_SANDBOX=off``
the runner starts the backend under bubblewrap (:mod:`runner_assembly.runner.sandbox`), in its
own network namespace connected by pasta (:mod:`runner_assembly.runner.netns`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import msgspec
import re2

import runner_assembly
from ledger.states import FailureKind, JobState
from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.assembly.names import JOB_FILE, JOB_SECRET_DIR, TOKEN_FILE
from runner_assembly.contract import jobfile
from runner_assembly.contract.jobfile import JobFile
from runner_assembly.drivers.faults import crash_at, runner_faults
from runner_assembly.drivers.forkserver import Forkserver
from runner_assembly.drivers.protocol import (
    DriverError,
    JobHandle,
    JobSpec,
    JobStatus,
    StatusEach,
)
from runner_assembly.processes import process_exists
from runner_assembly.runner.jobfiles import write_atomically, write_private
from runner_assembly.runner.launch import isolated_python
from runner_assembly.runner.leftovers import remove_secrets
from runner_assembly.runner.network import Network
from runner_assembly.runner.sandbox import (
    BWRAP,
    SandboxUnavailable,
    find_bwrap,
    find_network,
    mode_error,
)

RUNNER_IMPORT_ROOTS = tuple(dict.fromkeys(
    str(Path(module.__file__ or "").resolve().parents[1])
    for module in (runner_assembly, msgspec, re2)))
"""Where the runner's packages live: the runner starts with ``-I -S`` (no ``site``, no
``.pth`` import hooks, nothing from the environment), so it is told these paths instead."""


def boot_command(module: str = "local") -> list[str]:
    """``runner_assembly.runner.<module>`` in an isolated interpreter without ``site`` (about
    half of a bare interpreter's start-up), importing from the known roots."""
    return isolated_python(RUNNER_IMPORT_ROOTS, module)


def runner_args(folder: Path, secret_root: str, bwrap: str | None,
                network: Network | None = None) -> list[str]:
    """The runner's arguments."""
    sandbox = ["--bwrap", bwrap] if bwrap else []
    return [str(folder), "--secret-root", secret_root, *sandbox,
            *(network.args() if network else [])]


def runner_command(folder: Path, secret_root: str, bwrap: str | None,
                   network: Network | None = None) -> list[str]:
    """The command line of a runner started on its own (without the forkserver)."""
    return boot_command() + runner_args(folder, secret_root, bwrap, network)


def write_job_secret(folder: Path, values: dict[str, str]) -> None:
    """Store the per-job secret's values, readable by the job's owner only."""
    folder.mkdir(mode=0o700, exist_ok=True)
    for name, value in values.items():
        descriptor = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(value)


CANCELLED_MARK = "cancelled"
"""The driver's own note that it stopped the job (its runner reports nothing then)."""
PID_FILE_MAX = 64
"""More than any pid file holds (a number and a newline)."""


class LocalDriver(StatusEach):
    """Runner jobs as local processes under ``jobs_dir``."""

    name = "local"

    def __init__(self, jobs_dir: Path, sessions_dir: Path, sandbox: str = BWRAP,
                 api_url: str | None = None, heartbeat_s: float = 10.0,
                 faults: frozenset[str] = frozenset(),
                 loopback_ports: tuple[int, ...] = (), api_socket: str | None = None) -> None:
        """``sandbox``: ``bwrap`` (refused with ``infra-failed`` when bwrap or pasta cannot
        run here) or ``off``; ``api_url``: where runners reach the runner protocol;
        ``loopback_ports``: the host loopback ports backends may reach
        (``SVC_BACKEND_LOOPBACK_PORTS``); ``api_socket``: the Unix socket of ``svc serve``'s
        runner listener, which runners try before ``api_url``."""
        self.api_url = api_url
        self.api_socket = api_socket
        self.faults = faults
        self._runner_faulted: set[str] = set()
        self.heartbeat_s = heartbeat_s
        self.jobs_dir = jobs_dir
        self.sessions_dir = sessions_dir
        if (refused := mode_error("SVC_LOCAL_SANDBOX", sandbox)) is not None:
            raise DriverError(FailureKind.SCHEMA_INVALID, refused)
        self.sandbox = sandbox
        self.forkserver = Forkserver(boot_command("forkserver"), jobs_dir,
                                     jobs_dir.parent / "runner-forkserver.log")
        self.bwrap: str | None = None
        self.network: Network | None = None
        if sandbox == BWRAP:
            try:
                self.bwrap = find_bwrap()
                self.network = find_network(self.bwrap, loopback_ports)
            except SandboxUnavailable as error:
                raise DriverError(FailureKind.INFRA_FAILED, str(error)) from None

    def volume_dir(self, volume: dict[str, object]) -> Path:
        """The directory standing in for a session's persistent volume."""
        session_id = str(volume["sessionId"])
        if "/" in session_id or session_id.startswith("."):
            raise DriverError(FailureKind.SCHEMA_INVALID, "invalid session id")
        return self.sessions_dir / session_id

    async def ensure_volume(self, volume: dict[str, object]) -> str:
        """Create the session's directory (0700) if it does not exist yet."""
        folder = self.volume_dir(volume)
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        return "Bound"

    async def delete_volume(self, volume: dict[str, object]) -> None:
        """Remove the session's directory and everything in it."""
        await asyncio.to_thread(shutil.rmtree, self.volume_dir(volume), True)

    def job_dir(self, runner_job_id: str) -> Path:
        """The directory of one job."""
        if "/" in runner_job_id or runner_job_id.startswith("."):
            raise DriverError(FailureKind.SCHEMA_INVALID, "invalid runner job id")
        return self.jobs_dir / runner_job_id

    async def create(self, spec: JobSpec) -> JobHandle:
        """Create the job directory exclusively and start the runner; adopt an existing one."""
        return await asyncio.to_thread(self._create, spec)

    def _create(self, spec: JobSpec) -> JobHandle:
        folder = self.job_dir(spec.runner_job_id)
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        try:
            folder.mkdir()
            adopted = False
        except FileExistsError:
            adopted = True
        if not (folder / JOB_FILE).exists():
            write_job_secret(folder / JOB_SECRET_DIR, spec.job_secret)
            write_atomically(folder / JOB_FILE, jobfile.encode(self._local_job(spec)))
        if spec.runner_token:  # every token issued for the job stays valid: the newest here
            write_private(folder / TOKEN_FILE, spec.runner_token)
        pid = self._pid(folder)
        if pid is None:  # a create that crashed before starting the runner: start it now
            pid = self._spawn(folder, spec.secret_root)
        return JobHandle(self.name, spec.runner_job_id, f"pid:{pid}", adopted)

    def _local_job(self, spec: JobSpec) -> JobFile:
        """The job file with this machine's paths: the job's own shims folder, its session
        volume directory, and the test-only crash points."""
        job = spec.job
        bin_path = job.resource_bin_path  # jobs share a machine: shims of one job per folder
        volume = job.plan.session_volume
        return msgspec.structs.replace(
            job, resource_bin_path=str(Path(bin_path, job.runner_job_id)) if bin_path else None,
            volume_dir=str(self.volume_dir(msgspec.to_builtins(volume))) if volume else None,
            faults=self._runner_faults(job))

    def _runner_faults(self, job: JobFile) -> list[str]:
        """Test-only: the runner crash points of ``SVC_FAULTS``, for the first job of each
        task (or session) only, so that its retry runs through."""
        points = runner_faults(self.faults)
        owner = job.task_id or job.session_id
        if not points or owner in self._runner_faulted:
            return []
        self._runner_faulted.add(owner)
        return list(points)

    def _spawn(self, folder: Path, secret_root: str) -> int:
        if self.api_url is None:
            raise DriverError(FailureKind.INFRA_FAILED, "no runner protocol address: set "
                              "SVC_RUNNER_API_URL (svc serve sets its own)")
        env = {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8", "HOME": str(folder),
               "SVC_RUNNER_API_URL": self.api_url,
               "SVC_RUNNER_HEARTBEAT_S": str(self.heartbeat_s)}
        if self.api_socket is not None:
            env["SVC_RUNNER_API_SOCKET"] = self.api_socket
        started = self.forkserver.spawn(
            folder, runner_args(folder, secret_root, self.bwrap, self.network), env)
        if started is None:  # no forkserver here: start the runner on its own
            started = self._popen(folder, secret_root, env)
        crash_at(self.faults, "crash-after-spawn")
        try:  # a runner that already won the claim wrote its own pid: keep that one
            descriptor = os.open(folder / "pid", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return self._pid(folder) or started
        with os.fdopen(descriptor, "w") as handle:
            handle.write(str(started))
        return started

    def _popen(self, folder: Path, secret_root: str, env: dict[str, str]) -> int:
        with (folder / "runner.log").open("ab") as log:
            try:
                process = subprocess.Popen(
                    runner_command(folder, secret_root, self.bwrap, self.network), env=env,
                    cwd=folder,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, close_fds=True,
                )
            except OSError as error:
                raise DriverError(FailureKind.INFRA_FAILED,
                                  f"cannot start the runner: {error}") from None
        return process.pid

    @staticmethod
    def _pid(folder: Path) -> int | None:
        """The runner's pid as its pid file says (None: no file yet, or not a number). Read
        with the OS's calls: the session loop reads every job's each second, and
        ``Path.read_text`` costs six times as much."""
        try:
            descriptor = os.open(f"{folder}/pid", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        try:
            text = os.read(descriptor, PID_FILE_MAX)
        finally:
            os.close(descriptor)
        try:
            return int(text)
        except ValueError:
            return None

    async def status(self, runner_job_id: str) -> JobStatus:
        """Whether the job's runner still runs (its outcome comes through the protocol); the
        process group of a runner found gone is killed, so its backend does not run on."""
        folder = self.job_dir(runner_job_id)
        pid = self._pid(folder)
        if pid is not None and _alive(pid):
            return JobStatus(JobState.RUNNING)
        if pid is None and folder.exists():
            return JobStatus(JobState.RUNNING)  # being created
        cancelled = (folder / CANCELLED_MARK).exists()
        if pid is not None and not cancelled:  # a lost runner's backend must not outlive
            with contextlib.suppress(ProcessLookupError, PermissionError):  # it: end its group
                os.killpg(pid, signal.SIGKILL)
        if folder.exists():  # a runner killed (SIGKILL) removed nothing itself
            await asyncio.to_thread(remove_secrets, folder)
        if cancelled:
            return JobStatus(JobState.CANCELLED)
        return JobStatus(JobState.FAILED, failure_kind=FailureKind.RUNNER_LOST,
                         failure_message="the runner process ended without reporting its exit")

    async def cancel(self, runner_job_id: str) -> None:
        """Stop the job's process group."""
        folder = self.job_dir(runner_job_id)
        pid = self._pid(folder)
        if folder.exists():
            (folder / CANCELLED_MARK).touch()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
                os.killpg(pid, signal.SIGCONT)  # a stopped runner (a lost lease) ends too
            _alive(pid)
        if folder.exists():  # the runner removes them too when it gets the signal
            await asyncio.to_thread(remove_secrets, folder)


def _alive(pid: int) -> bool:
    """Whether a process runs (reaping it first if it is our finished child)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    return process_exists(pid)
