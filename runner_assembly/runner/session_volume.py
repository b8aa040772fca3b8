"""The runner's side of the session volume: mount it (locally, a link) and summarise it.

The summary (size, file count, content hash) is what the runner writes back through the
storage-refresh API; the manager never looks inside a volume.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

from runner_assembly.contract.messages import StorageSummaryBody
from runner_assembly.runner.layout import Layout


def link_volume(layout: Layout, volume_dir: Path) -> None:
    """Make ``${BACKEND_HOME}/<rollout_subdir>`` the session volume (a local "mount")."""
    layout.backend_home.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not layout.session_dir.is_symlink():
        layout.session_dir.symlink_to(volume_dir, target_is_directory=True)


def summarize(root: Path, pvc_name: str | None) -> StorageSummaryBody:
    """Size, file count and a hash over the sorted relative paths and contents of a volume."""
    digest = hashlib.sha256()
    size = count = 0
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = Path(folder) / name
            if path.is_symlink() or not path.is_file():
                continue
            content = path.read_bytes()
            digest.update(str(path.relative_to(root)).encode() + b"\0")
            digest.update(hashlib.sha256(content).digest())
            size += len(content)
            count += 1
    return StorageSummaryBody(
        storage_size_bytes=size, storage_files_count=count, storage_sha256=digest.hexdigest(),
        pvc_name=pvc_name, pvc_phase="Bound", storage_updated_at=datetime.now(UTC))
