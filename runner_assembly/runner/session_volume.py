"""The runner's side of the session volume: mount it (locally, a link) and summarise it.

The summary (size, file count, content hash) is what the runner writes back through the
storage-refresh API; the manager never looks inside a volume.
"""

from __future__ import annotations

import hashlib
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

from runner_assembly.contract.messages import StorageSummaryBody
from runner_assembly.runner import beneath
from runner_assembly.runner.layout import Layout


def link_volume(layout: Layout, volume_dir: Path) -> None:
    """Make ``${BACKEND_HOME}/<rollout_subdir>`` the session volume (a local "mount")."""
    layout.backend_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not layout.session_dir.is_symlink():
        layout.session_dir.symlink_to(volume_dir, target_is_directory=True)


def _regular(name: str, folder: int) -> bytes | None:
    """The content of ``name`` in ``folder`` if it is a regular file, opened without
    following a link (the backend writes the volume: DESIGN 13); None otherwise."""
    try:
        descriptor = os.open(name, os.O_RDONLY | beneath.FILE, dir_fd=folder)
    except OSError:
        return None
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        return handle.read()


def summarize(root: Path, pvc_name: str | None) -> StorageSummaryBody:
    """Size, file count and a hash over the sorted relative paths and contents of a volume."""
    digest = hashlib.sha256()
    size = count = 0
    for folder, dirs, files, descriptor in os.fwalk(root):  # never into a linked directory
        dirs.sort()
        for name in sorted(files):
            content = _regular(name, descriptor)
            if content is None:
                continue
            digest.update(str((Path(folder) / name).relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(content).digest())
            size += len(content)
            count += 1
    return StorageSummaryBody(
        storage_size_bytes=size, storage_files_count=count, storage_sha256=digest.hexdigest(),
        pvc_name=pvc_name, pvc_phase="Bound", storage_updated_at=datetime.now(UTC))
