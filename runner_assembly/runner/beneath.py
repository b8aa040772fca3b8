"""Files in places the backend can write, touched without following its links (DESIGN 13).

The runner runs with more rights than the backend, so a path below the backend home, the
workspace or the session volume is hostile input: the backend may have planted a symbolic
link (or a hard link, a FIFO) anywhere on it. Every such path is walked from a root the
backend cannot write, one component at a time, each directory opened with ``O_NOFOLLOW |
O_DIRECTORY`` relative to the one before (``openat2``'s ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS``, which Python's ``os`` does not offer): a link, a ``..`` or a
component that is not a directory is :class:`Refused`, never followed. Messages name the
relative path, never a file's content.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
"""A FIFO never blocks the runner; a link is never followed."""


class Refused(Exception):
    """A path crosses a link, leaves its root or is not the kind of file expected."""


def parts_of(relative: PurePosixPath | str) -> list[str]:
    """The components of a relative path; :class:`Refused` for ``..``, ``.`` or absolute."""
    path = PurePosixPath(relative)
    if path.is_absolute() or any(part in ("..", ".") for part in path.parts):
        raise Refused(f"{relative} leaves its root")
    if not path.parts:
        raise Refused("an empty path")
    return list(path.parts)


@contextlib.contextmanager
def directory(root: Path, relative: PurePosixPath | str, *, create: bool = False,
              mode: int = 0o700) -> Iterator[int]:
    """A descriptor of the directory ``root/relative`` reached without following a link
    (``root`` itself is the runner's own); with ``create`` missing directories are made
    with ``mode``. ``FileNotFoundError`` when one is missing without ``create``."""
    parts = [] if str(relative) in ("", ".") else parts_of(relative)
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            shown = PurePosixPath(*parts[:index + 1])
            following = _step(descriptor, part, shown, create, mode)
            os.close(descriptor)
            descriptor = following
        yield descriptor
    finally:
        os.close(descriptor)


def _step(parent: int, name: str, shown: PurePosixPath, create: bool, mode: int) -> int:
    try:
        return os.open(name, DIRECTORY, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
    except OSError as error:  # ELOOP (a link), ENOTDIR
        raise Refused(f"{shown} is a link or not a directory") from error
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, mode, dir_fd=parent)
    return _step(parent, name, shown, False, mode)


def read_report(root: Path, relative: PurePosixPath | str, limit: int) -> str | None:
    """At most ``limit`` bytes of the regular file ``root/relative`` (a report the backend
    left), None when there is none; :class:`Refused` for a link (symbolic or hard) or a file
    of another kind."""
    *folder, name = parts_of(relative)
    try:
        with directory(root, PurePosixPath(*folder)) as parent:
            descriptor = os.open(name, os.O_RDONLY | FILE, dir_fd=parent)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise Refused(f"{relative} is a link") from error
    with os.fdopen(descriptor, "rb") as handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode) or found.st_nlink != 1:
            raise Refused(f"{relative} is not a regular file of its own")
        return handle.read(limit).decode(errors="replace")


def write_file(root: Path, relative: PurePosixPath | str, data: bytes, mode: int) -> None:
    """Create (or replace the content of) the regular file ``root/relative`` with ``mode``,
    making its missing directories (0700); :class:`Refused` if a link is on the way."""
    *folder, name = parts_of(relative)
    with directory(root, PurePosixPath(*folder), create=True) as parent:
        try:
            descriptor = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | FILE, mode,
                                 dir_fd=parent)
        except OSError as error:
            raise Refused(f"{relative} is a link or not a regular file") from error
        with os.fdopen(descriptor, "wb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise Refused(f"{relative} is not a regular file")
            os.fchmod(handle.fileno(), mode)
            handle.write(data)


def chmod_directory(root: Path, relative: PurePosixPath | str, mode: int) -> None:
    """Set the mode of the directory ``root/relative`` reached without following a link."""
    with directory(root, relative) as descriptor:
        os.fchmod(descriptor, mode)


def remove(root: Path, relative: PurePosixPath | str) -> bool:
    """Remove the file or directory tree ``root/relative`` without following a link on the
    way or inside it (a link at the end is removed as a link); whether something was."""
    *folder, name = parts_of(relative)
    try:
        with directory(root, PurePosixPath(*folder)) as parent:
            found = os.lstat(name, dir_fd=parent)
            if stat.S_ISDIR(found.st_mode):
                _writable(parent, name)  # a volume credential's folder is 0500
                shutil.rmtree(name, dir_fd=parent)
            else:
                os.unlink(name, dir_fd=parent)
    except FileNotFoundError:
        return False
    return True


def _writable(parent: int, name: str) -> None:
    """Make the directory ``name`` (opened without following a link) writable by its owner."""
    descriptor = os.open(name, DIRECTORY, dir_fd=parent)
    try:
        os.fchmod(descriptor, 0o700)
    finally:
        os.close(descriptor)


def remove_empty_directory(root: Path, relative: PurePosixPath | str) -> None:
    """Remove the directory ``root/relative`` if it is empty (reached without a link)."""
    *folder, name = parts_of(relative)
    with contextlib.suppress(OSError, Refused), directory(root, PurePosixPath(*folder)) as parent:
        os.rmdir(name, dir_fd=parent)
