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

    def home_path(self, pod_path: str) -> Path:
        """A pod path below ``/home/svc/`` mapped into this layout's home."""
        relative = PurePosixPath(pod_path).relative_to(POD_HOME)
        return self.home / relative


def local_layout(job_dir: Path, workspace_key: str, rollout_subdir: str,
                 workspace_root: str | None = None) -> Layout:
    """The layout of a local job: ``<job>/home``, and ``<job>/workspaces`` or, with a
    workspace root, ``<root>/<runnerJobId>`` (jobs never share a checkout)."""
    root = Path(workspace_root) / job_dir.name if workspace_root else job_dir / "workspaces"
    return Layout(home=job_dir / "home", workspace_root=root,
                  workspace_key=workspace_key, rollout_subdir=rollout_subdir)
