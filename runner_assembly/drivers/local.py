"""The ``local`` driver (embedded default): a runner job is a detached child process.

Each job has a directory ``<data>/jobs/<runnerJobId>/`` created with an exclusive ``mkdir``,
so a second create finds the first and adopts it. The child runs ``local_runner`` with an
explicit minimal environment: nothing is inherited from the server. The secret root is an
argument of the runner, not part of ``spec.json``; unless ``SVC_LOCAL_SANDBOX=off`` the
runner starts the backend under bubblewrap (:mod:`runner_assembly.runner.sandbox`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec
import re2

import runner_assembly
from ledger.states import FailureKind, JobState
from runner_assembly.assembly.failures import MINIMAL_PATH
from runner_assembly.assembly.names import (
    ASSEMBLY_FILE,
    CHANNEL_FILES,
    JOB_SECRET_DIR,
    STARTUP_FILE,
    STORAGE_FILE,
)
from runner_assembly.drivers.protocol import (
    DriverError,
    JobHandle,
    JobSpec,
    JobStatus,
)
from runner_assembly.runner.jobfiles import read_json, write_json_atomically
from runner_assembly.runner.sandbox import BWRAP, MODES, SandboxUnavailable, find_bwrap

RUNNER_IMPORT_ROOTS = tuple(dict.fromkeys(
    str(Path(module.__file__ or "").resolve().parents[1])
    for module in (runner_assembly, msgspec, re2)))
"""Where the runner's packages live: the runner starts with ``-I -S`` (no ``site``, no
``.pth`` import hooks, nothing from the environment), so it is told these paths instead."""
RUNNER_BOOT = ("import sys; sys.path[:0] = {roots!r}; "
               "from runner_assembly.runner.local import main; sys.exit(main())")


def runner_command(folder: Path, secret_root: str, bwrap: str | None) -> list[str]:
    """The runner's command line: an isolated interpreter without ``site`` (about half of a
    bare interpreter's start-up) that imports the runner from the known roots."""
    sandbox = ["--bwrap", bwrap] if bwrap else []
    return [sys.executable, "-I", "-S", "-c",
            RUNNER_BOOT.format(roots=list(RUNNER_IMPORT_ROOTS)),
            str(folder), "--secret-root", secret_root, *sandbox]


def write_job_secret(folder: Path, values: dict[str, str]) -> None:
    """Store the per-job secret's values, readable by the job's owner only."""
    folder.mkdir(mode=0o700, exist_ok=True)
    for name, value in values.items():
        descriptor = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w") as handle:
            handle.write(value)


class LocalDriver:
    """Runner jobs as local processes under ``jobs_dir``."""

    name = "local"

    def __init__(self, jobs_dir: Path, sessions_dir: Path, sandbox: str = BWRAP) -> None:
        """``sandbox``: ``bwrap`` (refused with ``infra-failed`` when bwrap cannot run here)
        or ``off``."""
        self.jobs_dir = jobs_dir
        self.sessions_dir = sessions_dir
        if sandbox not in MODES:
            raise DriverError(FailureKind.SCHEMA_INVALID,
                              f"SVC_LOCAL_SANDBOX is {' or '.join(MODES)}, not {sandbox!r}")
        self.sandbox = sandbox
        self.bwrap: str | None = None
        if sandbox == BWRAP:
            try:
                self.bwrap = find_bwrap()
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

    async def read_channel(self, runner_job_id: str, channel: str,
                           offset: int) -> tuple[bytes, bool]:
        """Bytes of the job's channel file from ``offset``; final once the job reported."""
        folder = self.job_dir(runner_job_id)
        final = (folder / "status.json").exists()  # checked first: the file is then whole
        try:
            with (folder / CHANNEL_FILES[channel]).open("rb") as handle:
                handle.seek(offset)
                return handle.read(), final
        except FileNotFoundError:
            return b"", final

    async def storage_summary(self, runner_job_id: str) -> dict[str, Any] | None:
        """The runner's ``storage.json``."""
        return read_json(self.job_dir(runner_job_id) / STORAGE_FILE)

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
        if not (folder / "spec.json").exists():
            write_job_secret(folder / JOB_SECRET_DIR, spec.job_secret)
            public = spec.public()
            public.pop("secret_root")  # the runner gets it as an argument: see _spawn
            if spec.resource_bin_path:  # jobs share a machine: shims of one job per folder
                public["resource_bin_path"] = str(Path(spec.resource_bin_path,
                                                       spec.runner_job_id))
            volume = spec.plan.get("sessionVolume")
            if isinstance(volume, dict) and volume:
                public["volume_dir"] = str(self.volume_dir(volume))
            write_json_atomically(folder / "spec.json", public)
        pid = self._pid(folder)
        if pid is None:  # a create that crashed before starting the runner: start it now
            pid = self._spawn(folder, spec.secret_root)
        return JobHandle(self.name, spec.runner_job_id, f"pid:{pid}", adopted)

    def _spawn(self, folder: Path, secret_root: str) -> int:
        env = {"PATH": MINIMAL_PATH, "LANG": "C.UTF-8", "HOME": str(folder)}
        with (folder / "runner.log").open("ab") as log:
            try:
                process = subprocess.Popen(
                    runner_command(folder, secret_root, self.bwrap), env=env, cwd=folder,
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                    start_new_session=True, close_fds=True,
                )
            except OSError as error:
                raise DriverError(FailureKind.INFRA_FAILED,
                                  f"cannot start the runner: {error}") from None
        (folder / "pid").write_text(str(process.pid))
        return process.pid

    @staticmethod
    def _pid(folder: Path) -> int | None:
        try:
            return int((folder / "pid").read_text())
        except (FileNotFoundError, ValueError):
            return None

    async def status(self, runner_job_id: str) -> JobStatus:
        """Terminal status from the runner's ``status.json``, else whether it still runs."""
        folder = self.job_dir(runner_job_id)
        report = read_json(folder / "status.json")
        if report is not None:
            return _status_from(report, folder)
        pid = self._pid(folder)
        if pid is not None and _alive(pid):
            return JobStatus(JobState.RUNNING)
        report = read_json(folder / "status.json")  # it may have finished meanwhile
        if report is not None:
            return _status_from(report, folder)
        if pid is None and folder.exists():
            return JobStatus(JobState.RUNNING)  # being created
        return JobStatus(JobState.FAILED, failure_kind=FailureKind.INFRA_FAILED,
                         failure_message="the runner process ended without reporting a status")

    async def cancel(self, runner_job_id: str) -> None:
        """Stop the job's process group and record it as cancelled."""
        folder = self.job_dir(runner_job_id)
        pid = self._pid(folder)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGTERM)
            _alive(pid)
        if folder.exists() and not (folder / "status.json").exists():
            write_json_atomically(folder / "status.json", {"state": JobState.CANCELLED})


def _status_from(report: dict[str, object], folder: Path) -> JobStatus:
    """The terminal status with the runner's assembly and startup events."""
    exit_code = report.get("exitCode")
    assembly = read_json(folder / ASSEMBLY_FILE)
    return JobStatus(
        state=_job_state(report.get("state")),
        exit_code=exit_code if isinstance(exit_code, int) else None,
        failure_kind=_text(report.get("failureKind")),
        failure_message=_text(report.get("failureMessage")),
        assembly=assembly if isinstance(assembly, dict) else None,
        thread_id=_text(report.get("threadId")),
        startup=read_json(folder / STARTUP_FILE),
        started_at=_moment(report.get("startedAt")),
        finished_at=_moment(report.get("finishedAt")),
    )


def _moment(value: object) -> datetime | None:
    """A timestamp the runner reported (ISO 8601 with a zone), else None."""
    try:
        moment = datetime.fromisoformat(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return moment if moment is not None and moment.tzinfo is not None else None


def _job_state(value: object) -> JobState:
    """The state a runner reported; anything unreadable counts as failed."""
    try:
        return JobState(str(value))
    except ValueError:
        return JobState.FAILED


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _alive(pid: int) -> bool:
    """Whether a process runs (reaping it first if it is our finished child)."""
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
