"""A job's secret files leave the disk when the job ends (DESIGN 13).

What a local job directory holds of secret values: the profile secret copied into the
backend home, volume tool credentials below the home, the per-job secret (``job-secret/``)
and the runner token (``runner.token``). The runner removes them once it has sent its exit
(whatever the outcome) or when it is stopped; the local driver removes them again when it
finds the runner gone (a runner killed with SIGKILL). Logs, the workspace and the rest of
the home stay. Paths in backend-writable places are removed without following a link
(:mod:`.beneath`); only names are ever returned, never content.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from runner_assembly.assembly.names import JOB_FILE, JOB_SECRET_DIR, TOKEN_FILE
from runner_assembly.contract import jobfile
from runner_assembly.contract.jobfile import JobFile
from runner_assembly.runner import beneath
from runner_assembly.runner.layout import Layout, local_layout


def layout_of(folder: Path, job: JobFile) -> Layout:
    """The directories of the local job ``job`` in its job directory ``folder``."""
    volume = job.plan.session_volume
    return local_layout(folder, job.plan.workspace_key,
                        volume.rollout_subdir if volume else "sessions", job.workspace_root,
                        Path(job.volume_dir) if job.volume_dir else None)


def projected(job: JobFile, layout: Layout) -> tuple[list[Path], list[Path]]:
    """Where ``job``'s secret values were copied: the files, and the volume credentials'
    folders (removed when left empty)."""
    files: list[Path] = []
    folders: list[Path] = []
    for use in job.plan.secrets:
        if use.role == "provider":
            files += [layout.backend_home / key for key in use.keys]
        elif use.role == "tool" and use.projection == "volume":
            folder = layout.home_path(str(use.mount_path))
            files += [folder / key for key in use.keys]
            folders.append(folder)
    return files, folders


def remove_secrets(folder: Path, job: JobFile | None = None) -> list[str]:
    """Remove the secret files of the local job directory ``folder`` (``job``: its job
    file, read from the folder when not given); the paths removed, relative to it."""
    removed = [name for name in (JOB_SECRET_DIR, TOKEN_FILE) if _removed(folder, name)]
    if job is None:
        try:
            job = jobfile.decode((folder / JOB_FILE).read_bytes())
        except (OSError, jobfile.JobFileRefused, ValueError):
            return removed  # no job file: nothing was projected from one
    layout = layout_of(folder, job)
    files, folders = projected(job, layout)
    for path in files:
        if _removed(*layout.anchored(path)):
            removed.append(str(path.relative_to(folder)) if path.is_relative_to(folder)
                           else str(path))
    for path in folders:
        root, relative = layout.anchored(path)
        beneath.remove_empty_directory(root, relative)
    return removed


def _removed(root: Path, relative: PurePosixPath | str) -> bool:
    """Remove ``root/relative`` without following a link; whether it was there. A link the
    backend planted on the way is not followed (nothing is removed there)."""
    try:
        return beneath.remove(root, relative)
    except (beneath.Refused, OSError):
        return False
