"""Bundle materialisation: the workspace checkout, the managed overlay, tools and skills.

SPEC 9: the commit comes from the bundle ``ref``, else ``workspaceRef.branch``, else HEAD;
bundle items are copied from their checkout's ``subpath`` to ``target_path`` in the managed
overlay ``~/.gitbundle/svc/<workspace-key>/`` (never inside the workspace's ``.git/``).
Tools with an interpreter line are made executable and exposed on PATH; skills are found
under ``.agents/skills/<name>/SKILL.md``.
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ledger.states import FailureKind
from runner_assembly.assembly.failures import AssemblyFailure
from runner_assembly.contract.jobfile import FetchAllow
from runner_assembly.contract.plan import BundleItem, BundleSummary
from runner_assembly.runner import git
from runner_assembly.runner.layout import Layout

DEFAULT_BUNDLES = (BundleItem(name="tools", subpath="tools", target_path="tools"),
                   BundleItem(name="skills", subpath="skills", target_path=".agents/skills"))
"""The default canary mapping, applied when ``bundles[]`` is empty."""
SKILLS_TARGET = ".agents/skills"
TOOLS_TARGET = "tools"
MAX_LISTED = 200
SUMMARY_CHARS = 160


@dataclass
class Materialized:
    """What materialisation produced: all names, paths and hashes, no content."""

    commit: str
    tree: str
    bundles: list[dict[str, object]] = field(default_factory=list)
    tools: list[dict[str, object]] = field(default_factory=list)
    skills: list[dict[str, object]] = field(default_factory=list)
    tool_dir: Path | None = None
    skill_dirs: list[Path] = field(default_factory=list)


def sha256_file(path: Path) -> tuple[str, int]:
    """sha256 and size of a file."""
    digest, size = hashlib.sha256(), 0
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


def materialize(summary: BundleSummary, layout: Layout, credential_dir: Path | None,
                allow: FetchAllow | None = None) -> Materialized:
    """Fetch, verify, check out and copy the bundle into the overlay; ``allow``: the
    operator's fetch allow-list (every clone checks it)."""
    fetch_of = {f.repo_url: f.fetch_repo_url for f in summary.fetches}
    top_url = summary.repo_url
    git.clone(fetch_of[top_url], layout.workspace, credential_dir, allow)
    explicit = summary.ref
    resolved = git.resolve_commit(layout.workspace, explicit, summary.branch)
    commit = git.pinned(layout.workspace, resolved, summary.commit_id, bool(explicit))
    tree = git.checkout(layout.workspace, commit)
    result = Materialized(commit=commit, tree=tree)
    items = summary.bundles or [b for b in DEFAULT_BUNDLES
                                if (layout.workspace / b.subpath).is_dir()]
    layout.overlay.mkdir(parents=True, exist_ok=True)
    for item in items:
        source, item_commit = _source_of(item, summary, layout, fetch_of, credential_dir,
                                         (top_url, commit), allow)
        origin = git.inside(source, item.subpath)
        if not origin.exists():
            raise AssemblyFailure(FailureKind.BUNDLE_UNAVAILABLE,
                                  f"bundle subpath {item.subpath} does not exist")
        target = git.inside(layout.overlay, item.target_path)
        _copy(origin, target)
        result.bundles.append({"name": item.name, "repoUrl": item.repo_url or top_url,
                               "commit": item_commit, "subpath": item.subpath,
                               "target_path": item.target_path, **_tally(target)})
    _prepare_tools(result, layout.overlay / TOOLS_TARGET)
    _discover_skills(result, layout.overlay / SKILLS_TARGET, items)
    return result


def _source_of(item: BundleItem, summary: BundleSummary, layout: Layout,
               fetch_of: dict[str, str], credential_dir: Path | None,
               top: tuple[str, str], allow: FetchAllow | None) -> tuple[Path, str]:
    """The checkout an item copies from: the workspace, or its own pinned clone."""
    url = item.repo_url or top[0]
    if url == top[0] and not item.ref and not item.commit_id:
        return layout.workspace, top[1]
    key = hashlib.sha256(f"{url}\n{item.ref}\n{item.commit_id}".encode())
    dest = layout.sources / key.hexdigest()[:16]
    if not dest.exists():
        git.clone(fetch_of.get(url, url), dest, credential_dir if url == top[0] else None,
                  allow)
        explicit = item.ref or summary.ref
        resolved = git.resolve_commit(dest, explicit, summary.branch)
        commit = git.pinned(dest, resolved, item.commit_id, bool(item.ref))
        git.checkout(dest, commit)
    return dest, git.git("rev-parse", "HEAD", cwd=dest).strip()


def _copy(origin: Path, target: Path) -> None:
    if origin.is_dir():
        shutil.copytree(origin, target, symlinks=False, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns(".git"))
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(origin, target)


def _tally(target: Path) -> dict[str, int]:
    files = [p for p in target.rglob("*") if p.is_file()] if target.is_dir() else [target]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def _prepare_tools(result: Materialized, tool_dir: Path) -> None:
    """Make interpreter scripts executable; list tools by name, hash and size."""
    if not tool_dir.is_dir():
        return
    result.tool_dir = tool_dir
    for path in sorted(p for p in tool_dir.iterdir() if p.is_file()):
        with path.open("rb") as handle:
            interpreted = handle.read(2) == b"#!"
        if interpreted:
            path.chmod(path.stat().st_mode | 0o755)
        digest, size = sha256_file(path)
        if len(result.tools) < MAX_LISTED:
            result.tools.append({"name": path.name, "sha256": digest, "bytes": size,
                                 "executable": bool(path.stat().st_mode & 0o111)})


def _discover_skills(result: Materialized, skills_dir: Path,
                     items: Sequence[BundleItem]) -> None:
    """List ``<name>/SKILL.md`` manifests: path, hash, size, a one-line summary, no body."""
    if not skills_dir.is_dir():
        return
    result.skill_dirs.append(skills_dir)
    source = next((i.name or i.subpath for i in items
                   if i.target_path.rstrip("/") == SKILLS_TARGET), None)
    for manifest in sorted(skills_dir.glob("*/SKILL.md")):
        digest, size = sha256_file(manifest)
        if len(result.skills) < MAX_LISTED:
            result.skills.append({
                "name": manifest.parent.name, "manifestPath": f"{SKILLS_TARGET}/"
                f"{manifest.parent.name}/SKILL.md", "sha256": digest, "bytes": size,
                "summary": _summary(manifest), "sourceBundle": source})


def _summary(manifest: Path) -> str | None:
    """The ``description:`` line of the manifest's front matter, shortened."""
    for line in manifest.read_text(errors="replace").splitlines()[:40]:
        if line.lower().startswith("description:"):
            text = line.split(":", 1)[1].strip()
            return text[:SUMMARY_CHARS]
    return None


def check_required_skills(result: Materialized, required: list[str]) -> None:
    """SPEC 7 ``required-skill-unavailable``, with required, missing and available."""
    available = sorted(str(s["name"]) for s in result.skills)
    missing = [name for name in required if name not in available]
    if missing:
        raise AssemblyFailure(FailureKind.REQUIRED_SKILL_UNAVAILABLE,
                              f"required skills missing: {', '.join(missing)}",
                              details={"required": required, "missing": missing,
                                       "available": available})
