"""An episode's workspace files, read, written and listed by the parent without following symlinks.

Code the agent runs can plant a symlink anywhere in the workspace (to a host file outside it), so every
access here walks the path one component at a time, relative to the workspace's directory fd, with
``O_NOFOLLOW``: a symlink on the way is refused (OSError: ELOOP, ENOTDIR) or, in listings, shown with a
trailing ``@`` and not followed. Paths are relative, without ``.``, ``..`` or empty parts (ValueError).
Reads are of regular files only (a FIFO cannot block the reader) and bounded; ``write_workspace_file``
only overwrites an existing regular file. ``write_files`` is for fresh workspaces the parent made itself.
Every setting that touches a workspace uses these (terminal checks, SWE's read / edit / ls).
"""

from __future__ import annotations

import contextlib
import errno
import os
import posixpath
import stat
from pathlib import Path
from typing import Iterator

READ_LIMIT = 1024 * 1024
HIDDEN_DIRS = {"__pycache__", ".tmp", ".git"}  # not listed


def rel_parts(rel: str) -> list[str]:
    """The components of workspace path ``rel``; ValueError unless it is relative and plain."""
    parts = rel.split("/")
    if rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"workspace path must be relative, without '.', '..' or empty parts: {rel!r}")
    return parts


def _open_dir(root: Path, parts: list[str]) -> int:
    """An fd of the directory ``parts`` under ``root`` ([] -> root), opened one component at a time."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextlib.contextmanager
def _parent_dir_fd(root: Path, rel: str) -> Iterator[tuple[int, str]]:
    """(fd of the directory holding ``rel``'s last part, that part)."""
    parts = rel_parts(rel)
    fd = _open_dir(root, parts[:-1])
    try:
        yield fd, parts[-1]
    finally:
        os.close(fd)


def lstat_in_workspace(root: Path, rel: str) -> os.stat_result | None:
    """lstat of ``rel`` under ``root`` (None if absent); ELOOP / ENOTDIR when a directory on the way is a
    symlink or a file."""
    try:
        with _parent_dir_fd(root, rel) as (fd, name):
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _open_regular(dfd: int, name: str, flags: int, rel: str) -> int:
    """An fd of the regular file ``name`` in directory ``dfd``; OSError for anything else (closed then)."""
    fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", rel)
        raise OSError(errno.EINVAL, "not a regular file", rel)
    return fd


def read_workspace_file(root: Path, rel: str, limit: int = READ_LIMIT) -> str:
    """The first ``limit`` bytes of the regular file ``rel`` under ``root``, decoded (errors replaced).
    OSError (ELOOP, ENOTDIR) for a symlink, FileNotFoundError when absent, IsADirectoryError / OSError for
    what is not a regular file."""
    with _parent_dir_fd(root, rel) as (dfd, name):
        fd = _open_regular(dfd, name, os.O_RDONLY, rel)
    with os.fdopen(fd, "rb") as f:
        return f.read(limit).decode(errors="replace")


def write_workspace_file(root: Path, rel: str, text: str) -> None:
    """Overwrite the existing regular file ``rel`` under ``root``; OSError for a symlink (anywhere on the
    path), a missing file or anything else that is not a regular file."""
    with _parent_dir_fd(root, rel) as (dfd, name):
        fd = _open_regular(dfd, name, os.O_WRONLY, rel)
    with os.fdopen(fd, "wb") as f:
        f.truncate(0)
        f.write(text.encode())


def readlink_in_workspace(root: Path, rel: str) -> str:
    """The target of the symlink ``rel`` under ``root`` (no symlink followed on the way)."""
    with _parent_dir_fd(root, rel) as (fd, name):
        return os.readlink(name, dir_fd=fd)


def list_workspace(root: Path, rel: str = "") -> list[str]:
    """Paths (relative to ``root``) of the files under directory ``rel`` ("": the root), sorted; symlinks end
    with '@' and are not followed; __pycache__, .tmp and .git are skipped."""
    fd = _open_dir(root, rel_parts(rel) if rel else [])
    found = []
    try:
        for top, dirs, files, top_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            dirs[:] = [d for d in dirs if d not in HIDDEN_DIRS]
            for name in dirs + files:
                link = stat.S_ISLNK(os.stat(name, dir_fd=top_fd, follow_symlinks=False).st_mode)
                if link or name in files:
                    found.append(posixpath.normpath(posixpath.join(rel or ".", top, name)) + ("@" if link else ""))
    finally:
        os.close(fd)
    return sorted(found)


def read_files(root: Path, paths: list[str]) -> dict[str, str | None]:
    """The text of each path under ``root`` (None when it is missing or not a regular file)."""
    out: dict[str, str | None] = {}
    for rel in paths:
        try:
            out[rel] = read_workspace_file(root, rel)
        except OSError:
            out[rel] = None
    return out


def write_files(root: Path, files: dict[str, str]) -> None:
    """Write ``files`` (path -> UTF-8 text) into a workspace the parent made itself, directories included."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
