"""Where things live inside a runner job.

In a Kubernetes pod the home is ``/home/svc`` and workspaces are under ``/workspace``; a
local job maps the same layout below its job directory, so the code is the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from runner_assembly.assembly.names import POD_HOME


@dataclass(frozen=True)
class Layout:
    """The directories of one runner job."""

    home: Path
    workspace_root: Path
    workspace_key: str
    rollout_subdir: str = "sessions"
    volume_dir: Path | None = None
    """A local job's session volume, which the runner links at :attr:`session_dir`."""

    @property
    def backend_home(self) -> Path:
        """The per-run writable backend home (``BACKEND_HOME``)."""
        return self.home / ".backend"

    @property
    def workspace(self) -> Path:
        """The primary workspace: the checkout of the bundle repository."""
        return self.workspace_root / self.workspace_key

    @property
    def overlay(self) -> Path:
        """The managed capability root (``~/.gitbundle/svc/<workspace-key>/``)."""
        return self.home / ".gitbundle" / "svc" / self.workspace_key

    @property
    def sources(self) -> Path:
        """Checkouts of bundle repositories other than the workspace's."""
        return self.home / ".gitbundle" / "sources"

    @property
    def session_dir(self) -> Path:
        """Where the session volume is mounted (``${BACKEND_HOME}/<rollout_subdir>``)."""
        return self.backend_home / self.rollout_subdir

    def anchored(self, path: Path) -> tuple[Path, PurePosixPath]:
        """``path`` (below the home or the workspaces, both backend-writable) as a root the
        backend cannot write and the path below it, for :mod:`.beneath`: the session
        volume's own directory for a path in a local job's session directory (the runner's
        link), else the directory holding the home or the workspaces."""
        if self.volume_dir is not None and path.is_relative_to(self.session_dir):
            return self.volume_dir, PurePosixPath(path.relative_to(self.session_dir))
        for root in (self.home, self.workspace_root):
            if path.is_relative_to(root):
                return root.parent, PurePosixPath(path.relative_to(root.parent))
        raise ValueError(f"{path} is neither in the home nor in the workspaces")

    def home_path(self, pod_path: str) -> Path:
        """A pod path below ``/home/svc/`` mapped into this layout's home."""
        relative = PurePosixPath(pod_path).relative_to(POD_HOME)
        return self.home / relative


def local_layout(job_dir: Path, workspace_key: str, rollout_subdir: str,
                 workspace_root: str | None = None, volume_dir: Path | None = None) -> Layout:
    """The layout of a local job: ``<job>/home``, and ``<job>/workspaces`` or, with a
    workspace root, ``<root>/<runnerJobId>`` (jobs never share a checkout)."""
    root = Path(workspace_root) / job_dir.name if workspace_root else job_dir / "workspaces"
    return Layout(home=job_dir / "home", workspace_root=root,
                  workspace_key=workspace_key, rollout_subdir=rollout_subdir,
                  volume_dir=volume_dir)
