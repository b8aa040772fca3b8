"""Where a bundle's symbolic links lead, worked out on the commit's tree before anything is
checked out (DESIGN 13: copying a bundle never reads outside the checkout).

A link is followed the way the kernel would follow it, through every other link of the tree
at any depth, so ``x -> .`` followed by ``tools/leak -> ../x/x/../../etc/shadow`` is seen
for what it is; a link that leaves the tree, is absolute, loops, or names a directory that
holds it (which a copy would follow forever) is refused."""

from __future__ import annotations

from pathlib import PurePosixPath

MAX_HOPS = 40
"""Links followed for one path at the most (the kernel's own limit)."""


def resolve(path: str, links: dict[str, str]) -> tuple[str, ...] | None:
    """The tree path ``path`` names once every link on the way is followed (its
    components), or None when it leaves the tree, is absolute or loops."""
    done: list[str] = []
    pending = list(PurePosixPath(path).parts)
    hops = 0
    while pending:
        part = pending.pop(0)
        if part == ".":
            continue
        if part == "..":
            if not done:
                return None
            done.pop()
            continue
        target = links.get("/".join([*done, part]))
        if target is None:
            done.append(part)
            continue
        hops += 1
        if hops > MAX_HOPS or not target or target.startswith("/") or "\0" in target:
            return None
        pending = list(PurePosixPath(target).parts) + pending
    return tuple(done)


def refused_link(links: dict[str, str]) -> str | None:
    """The first link (by path) that leaves the tree, loops or leads to a directory that
    holds it; None when every link stays inside."""
    for path in sorted(links):
        resolved = resolve(path, links)
        holder = PurePosixPath(path).parts[:-1]
        if resolved is None or holder[:len(resolved)] == resolved:
            return path
    return None
