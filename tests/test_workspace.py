"""Workspace file I/O (``envs/workspace.py``), the one implementation every setting uses: nothing here
follows a symlink the agent planted, blocks on a FIFO, or leaves the workspace."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from slime_ext.envs.workspace import (
    list_workspace,
    lstat_in_workspace,
    read_files,
    read_workspace_file,
    readlink_in_workspace,
    rel_parts,
    write_files,
    write_workspace_file,
)


@pytest.fixture
def ws(tmp_path):
    root = tmp_path / "ws"
    write_files(root, {"a.txt": "alpha\n", "pkg/mod.py": "x = 1\n", ".git/HEAD": "ref\n"})
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    os.symlink(secret, root / "link.txt")  # planted by the agent's code
    os.symlink(tmp_path, root / "pkg" / "up")  # a directory link
    os.mkfifo(root / "pipe")
    return root, secret


def test_reads_regular_files_and_refuses_links_fifos_and_directories(ws):
    root, _ = ws
    assert read_workspace_file(root, "pkg/mod.py") == "x = 1\n"
    assert read_workspace_file(root, "a.txt", limit=3) == "alp"
    with pytest.raises(OSError) as e:
        read_workspace_file(root, "link.txt")
    assert e.value.errno == errno.ELOOP
    with pytest.raises(OSError):
        read_workspace_file(root, "pkg/up/secret.txt")  # through a linked directory
    with pytest.raises(OSError) as e:
        read_workspace_file(root, "pipe")  # returns at once: O_NONBLOCK, then refused
    assert e.value.errno == errno.EINVAL
    with pytest.raises(IsADirectoryError):
        read_workspace_file(root, "pkg")
    assert read_files(root, ["a.txt", "link.txt", "missing"]) == {"a.txt": "alpha\n", "link.txt": None, "missing": None}


def test_writes_only_over_an_existing_regular_file(ws):
    root, secret = ws
    write_workspace_file(root, "a.txt", "b")
    assert (root / "a.txt").read_text() == "b"  # truncated, not appended
    with pytest.raises(OSError):
        write_workspace_file(root, "link.txt", "pwned")
    assert secret.read_text() == "host secret\n"
    with pytest.raises(FileNotFoundError):
        write_workspace_file(root, "new.txt", "x")


def test_lists_without_following_links_and_hides_tool_dirs(ws):
    root, _ = ws
    assert list_workspace(root) == ["a.txt", "link.txt@", "pipe", "pkg/mod.py", "pkg/up@"]
    assert list_workspace(root, "pkg") == ["pkg/mod.py", "pkg/up@"]
    with pytest.raises(OSError):
        list_workspace(root, "pkg/up")


def test_stat_and_readlink_do_not_follow(ws):
    root, secret = ws
    assert lstat_in_workspace(root, "missing") is None
    assert readlink_in_workspace(root, "link.txt") == str(secret)
    assert stat.S_ISLNK(lstat_in_workspace(root, "link.txt").st_mode)
    assert stat.S_ISDIR(lstat_in_workspace(root, "pkg").st_mode)


@pytest.mark.parametrize("rel", ["/etc/passwd", "../x", "a/../../x", "a//b", "./a", ""])
def test_paths_must_be_relative_and_plain(ws, rel):
    root, _ = ws
    with pytest.raises(ValueError, match="workspace path must be relative"):
        rel_parts(rel)
    with pytest.raises(ValueError):
        read_workspace_file(root, rel)
