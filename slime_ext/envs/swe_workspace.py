"""The files of an SWE episode's workspace, read, written and listed by the parent without following symlinks.

Code run by ``test`` could plant a symlink anywhere in the workspace, so every access here walks the path one
component at a time with ``O_NOFOLLOW`` (reads use ``terminal.read_workspace_file``): a symlink is refused
(OSError) or, in listings, shown with a trailing ``@`` and not followed. ``write_workspace_file`` only
overwrites an existing regular file. ``write_files`` is for fresh workspaces the parent made itself.
"""

from __future__ import annotations

import errno
import os
import posixpath
import stat
from pathlib import Path

from slime_ext.envs.terminal import read_workspace_file

HIDDEN_DIRS = {"__pycache__", ".tmp", ".git"}


def _open_dir(root: Path, rel: str) -> int:
    """An fd of directory `rel` under `root` (""-> root), opened one component at a time with O_NOFOLLOW."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in rel.split("/") if p]:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_workspace_file(root: Path, rel: str, text: str) -> None:
    """Overwrite the existing regular file `rel` under `root`; OSError for a symlink (anywhere on the path), a
    missing file or anything else that is not a regular file."""
    head, _, name = rel.rpartition("/")
    dfd = _open_dir(root, head)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", rel)
        os.ftruncate(fd, 0)
        with open(fd, "wb", closefd=False) as f:
            f.write(text.encode())
    finally:
        os.close(fd)


def list_workspace(root: Path, rel: str = "") -> list[str]:
    """Paths (relative to `root`) of the files under directory `rel`, sorted; symlinks end with '@' and are not
    followed; __pycache__, .tmp and .git are skipped."""
    fd = _open_dir(root, rel)
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
    """The text of each path under `root` (None when it is missing or not a regular file)."""
    out: dict[str, str | None] = {}
    for rel in paths:
        try:
            out[rel] = read_workspace_file(root, rel)
        except OSError:
            out[rel] = None
    return out


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)

