"""Run totals for the sandbox: the memory and the process count of a whole run, and the size of its workspace.

Per-process rlimits do not bound a run: four processes of 900 MB each pass ``RLIMIT_AS=1024 MB``, and
``RLIMIT_FSIZE`` caps one file, not how much a command writes. A ``RunMonitor`` watches each run:

- **cgroups, where they can be had** (``cgroup_support()`` says which, and why not): every run gets its
  own cgroup (v2, or v1 memory and pids hierarchies) with ``memory_mb`` and ``max_procs`` as hard kernel
  limits; the helper process joins it before it starts the command, so everything the run starts is in it.
  The monitor polls the cgroup's event counters and stops the run at the first OOM kill or refused fork.
- **otherwise a watchdog**: the run's processes (descendants of its helper; in rlimits mode also its
  session) are read from ``/proc`` every ``SCAN_S``; the run is stopped when their resident anonymous
  memory passes ``memory_mb`` or their tasks reach ``max_procs``.
- **the workspace, always by the monitor**: it is a host directory the environment reads back, so no
  filesystem of its own bounds it. The monitor measures it at the start (``du``), then reads ``statvfs``
  of its filesystem every ``FS_POLL_S`` (a microsecond); when the filesystem grew by the workspace's
  remaining headroom it measures again and stops the run past ``workspace_mb``. One file is capped by the
  kernel (``RLIMIT_FSIZE <= workspace_mb``); many files may overshoot by what is written in one poll.

``OPENCLAW_SANDBOX_CGROUPS=0`` turns cgroups off (the watchdog then bounds the run). See docs/sandbox.md.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import functools
import itertools
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable

log = logging.getLogger(__name__)

CGROUPS_ENV = "OPENCLAW_SANDBOX_CGROUPS"  # "0": do not use cgroups
CGROUP_MOUNTS = "/sys/fs/cgroup"
CONTROLLERS = ("memory", "pids")
PARENT_PREFIX = "openclaw-sandbox-"  # <base>/openclaw-sandbox-<pid>/run-<n>: one parent per host process
FS_POLL_S = 0.01  # statvfs of the workspace's filesystem
EVENTS_POLL_S = 0.05  # the cgroup's event counters
SCAN_S = 0.1  # the watchdog's /proc scan
DU_EVERY_S = 1.0  # the workspace is measured at least this often while a run lasts (statvfs can miss a deletion race)
MIB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class Stop:
    """Why the monitor stopped a run: the SandboxLimits field, and a sentence for people."""

    limit: str
    reason: str


# ----------------------------------------------------------------------------- pure parsing
def parse_proc_cgroup(text: str) -> dict[str, str]:
    """/proc/self/cgroup as {controller: path}; the cgroup v2 entry ("0::/path") is under the key ""."""
    paths: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for name in parts[1].split(",") if parts[1] else [""]:
            paths[name] = parts[2]
    return paths


def parse_cgroup_mounts(mountinfo: str) -> list[tuple[str, frozenset[str], str, str]]:
    """(version "1" or "2", v1 controllers, mount point, root inside the hierarchy) of each cgroup mount."""
    mounts = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if tail[0] == "cgroup2":
            mounts.append(("2", frozenset(), point, root))
        else:
            mounts.append(("1", frozenset(tail[2].split(",")) & set(CONTROLLERS), point, root))
    return mounts


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    return field.encode().decode("unicode_escape") if "\\" in field else field


def cgroup_dir(point: str, root: str, path: str) -> str | None:
    """The directory of cgroup `path` (as /proc/self/cgroup names it) under a hierarchy mounted at `point`
    whose mount shows `root`; None when the mount does not show it."""
    if root != "/" and path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    rel = path[len(root):] if root != "/" else path
    return os.path.join(point, rel.lstrip("/")).rstrip("/") or "/"


def delegating_ancestor(point: str, top: str, subtree_control: Callable[[str], str]) -> str | None:
    """cgroup v2: the nearest of `top` and its ancestors, up to the mount point `point`, whose subtree_control
    (read by `subtree_control(dir)`) gives memory and pids to its children; None if there is none."""
    here = top
    while not set(CONTROLLERS) <= set(subtree_control(here).split()):
        if here == point or not here.startswith(point.rstrip("/") + "/"):
            return None
        here = os.path.dirname(here)
    return here


def parse_counters(text: str) -> dict[str, int]:
    """A flat keyed file (memory.events, pids.events, memory.oom_control) as {key: value}."""
    counters = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            counters[parts[0]] = int(parts[1])
    return counters


def parse_stat(text: str) -> tuple[int, int, int, int]:
    """(pid, ppid, session, threads) from a /proc/<pid>/stat line (the command name may hold spaces and ')')."""
    pid = int(text.split(None, 1)[0])
    rest = text.rsplit(")", 1)[1].split()  # fields 3.. : state ppid pgrp session ... num_threads (field 20)
    return pid, int(rest[1]), int(rest[3]), int(rest[17])


def run_members(stats: Iterable[tuple[int, int, int, int]], leader: int, by_session: bool) -> dict[int, int]:
    """{pid: threads} of a run: `leader` and its descendants, plus (`by_session`) every process of its session."""
    children: dict[int, list[int]] = {}
    threads: dict[int, int] = {}
    members: set[int] = set()
    for pid, ppid, session, nthreads in stats:
        children.setdefault(ppid, []).append(pid)
        threads[pid] = nthreads
        if by_session and session == leader:
            members.add(pid)
    todo = [leader] if leader in threads else []
    while todo:
        pid = todo.pop()
        members.add(pid)
        todo.extend(c for c in children.get(pid, ()) if c not in members)
    return {pid: threads[pid] for pid in members if pid in threads}


# ----------------------------------------------------------------------------- cgroups
@dataclasses.dataclass(frozen=True)
class CgroupSupport:
    """Where run cgroups are made: {controller: (version, parent directory)}; `why` says how it was found or
    why there is none (then `dirs` is empty)."""

    dirs: dict[str, tuple[str, str]]
    why: str

    @property
    def available(self) -> bool:
        return set(self.dirs) == set(CONTROLLERS)

    def describe(self) -> str:
        if not self.available:
            return f"not enforced by cgroups ({self.why}); a watchdog polls /proc every {SCAN_S:g} s instead"
        versions = sorted({v for v, _ in self.dirs.values()})
        return f"cgroup v{'+v'.join(versions)} per run ({self.why})"


@functools.lru_cache(maxsize=1)
def cgroup_support() -> CgroupSupport:
    """Probed once per process: can this process make a cgroup per run with memory and pids limits, and move a
    process into it? Logs a WARNING when it cannot."""
    support = _probe_cgroups()
    if support.available:
        log.info("sandbox run totals: %s", support.describe())
    else:
        log.warning("sandbox: a run's total memory and process count are NOT bounded by cgroups (%s); a watchdog "
                    "polling /proc every %g s bounds them instead (a quick burst can overshoot between polls)",
                    support.why, SCAN_S)
    return support


def _probe_cgroups() -> CgroupSupport:
    if os.environ.get(CGROUPS_ENV, "").strip().lower() in ("0", "no", "off", "false"):
        return CgroupSupport({}, f"disabled by {CGROUPS_ENV}={os.environ[CGROUPS_ENV]}")
    try:
        own = parse_proc_cgroup(_read("/proc/self/cgroup"))
        mounts = parse_cgroup_mounts(_read("/proc/self/mountinfo"))
    except OSError as exc:
        return CgroupSupport({}, f"cannot read /proc/self/cgroup or mountinfo: {exc}")
    problems: list[str] = []
    dirs = _probe_v2(own, mounts, problems)
    if not dirs:
        dirs = _probe_v1(own, mounts, problems)
    if set(dirs) != set(CONTROLLERS):
        return CgroupSupport({}, "; ".join(problems) or "no cgroup mount with the memory and pids controllers")
    for _, base in set(dirs.values()):
        _sweep_stale(os.path.dirname(base))
    how = ", ".join(f"{c} v{v} under {os.path.dirname(d)}" for c, (v, d) in sorted(dirs.items()))
    return CgroupSupport(dirs, how)


def _probe_v2(own: dict[str, str], mounts: list, problems: list[str]) -> dict[str, tuple[str, str]]:
    """cgroup v2: the nearest ancestor of our cgroup whose children get memory and pids (our own cgroup holds
    processes, so it cannot); a parent of our own is made under it with both controllers enabled."""
    if "" not in own:
        return {}
    for version, _, point, root in mounts:
        top = cgroup_dir(point, root, own[""]) if version == "2" else None
        if top is None:
            continue
        if not set(CONTROLLERS) <= set(_read_or_empty(os.path.join(point, "cgroup.controllers")).split()):
            problems.append(f"cgroup v2 at {point} lacks the memory or pids controller (they may be bound to v1)")
            continue
        ancestor = delegating_ancestor(point, top, lambda d: _read_or_empty(os.path.join(d, "cgroup.subtree_control")))
        if ancestor is None:
            problems.append(f"cgroup v2: no ancestor of {top} delegates memory and pids to its children")
            continue
        dirs = {c: ("2", os.path.join(ancestor, f"{PARENT_PREFIX}{os.getpid()}")) for c in CONTROLLERS}
        if _try_parents(dirs, problems):
            return dirs
    return {}


def _probe_v1(own: dict[str, str], mounts: list, problems: list[str]) -> dict[str, tuple[str, str]]:
    """cgroup v1: a parent of our own under our cgroup of each of the memory and pids hierarchies."""
    dirs = {}
    for controller in CONTROLLERS:
        for version, controllers, point, root in mounts:
            top = cgroup_dir(point, root, own[controller]) if (
                version == "1" and controller in controllers and controller in own) else None
            if top is not None:
                dirs[controller] = ("1", os.path.join(top, f"{PARENT_PREFIX}{os.getpid()}"))
                break
        else:
            problems.append(f"no cgroup v1 hierarchy with the {controller} controller")
            return {}
    return dirs if _try_parents(dirs, problems) else {}


def _try_parents(dirs: dict[str, tuple[str, str]], problems: list[str]) -> bool:
    """Make the parents in `dirs` and check that a run cgroup under them takes limits and a process."""
    try:
        for version, base in set(dirs.values()):
            _make_parent(base, version)
        probe = RunCgroup.create(dirs, memory_bytes=64 * MIB, pids=8)
        try:
            sleeper = subprocess.Popen(["sleep", "5"], stdin=subprocess.DEVNULL)
            try:
                probe.join(sleeper.pid)
            finally:
                sleeper.kill()
                sleeper.wait()
        finally:
            probe.remove()
    except OSError as exc:
        version = next(iter(dirs.values()))[0]
        problems.append(f"cgroup v{version}: cannot make a run cgroup under "
                        f"{', '.join(sorted({b for _, b in dirs.values()}))}: {exc.strerror or exc}")
        for _, base in set(dirs.values()):
            _remove_dir(base)
        return False
    for _, base in set(dirs.values()):
        atexit.register(_remove_dir, base)
    return True


def _make_parent(base: str, version: str) -> None:
    os.makedirs(base, exist_ok=True)
    if version == "2":
        _write(os.path.join(base, "cgroup.subtree_control"), " ".join(f"+{c}" for c in CONTROLLERS))


def _sweep_stale(parent: str) -> None:
    """Remove the empty run parents of host processes that are gone (a crashed process could not)."""
    with contextlib.suppress(OSError):
        for name in os.listdir(parent):
            pid = name[len(PARENT_PREFIX):]
            if name.startswith(PARENT_PREFIX) and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                stale = os.path.join(parent, name)
                for child in os.listdir(stale):
                    if os.path.isdir(os.path.join(stale, child)):
                        _remove_dir(os.path.join(stale, child))
                _remove_dir(stale)


class RunCgroup:
    """The cgroup(s) of one run: one directory per hierarchy (one in v2; memory and pids apart in v1)."""

    _counter = itertools.count()

    def __init__(self, dirs: dict[str, tuple[str, str]]) -> None:
        self.dirs = dirs  # controller -> (version, this run's directory)

    @classmethod
    def create(cls, parents: dict[str, tuple[str, str]], memory_bytes: int, pids: int) -> RunCgroup:
        """A new run cgroup under `parents` with the memory limit (swap included, where accounted) and pids.max."""
        name = f"run-{next(cls._counter)}"
        made: dict[str, tuple[str, str]] = {}
        group = cls(made)
        try:
            for controller, (version, parent) in parents.items():
                path = os.path.join(parent, name)
                if not any(d == path for _, d in made.values()):
                    if not os.path.isdir(parent):  # removed by a stale sweep or by hand: make it again
                        _make_parent(parent, version)
                    os.mkdir(path)
                made[controller] = (version, path)
            group._set_limits(memory_bytes, pids)
        except BaseException:
            group.remove()
            raise
        return group

    def _set_limits(self, memory_bytes: int, pids: int) -> None:
        version, path = self.dirs["memory"]
        if version == "2":
            _write(os.path.join(path, "memory.max"), str(memory_bytes))
            _write_if_exists(os.path.join(path, "memory.swap.max"), "0")
            _write_if_exists(os.path.join(path, "memory.oom.group"), "1")  # an OOM kill takes the whole run
        else:
            _write(os.path.join(path, "memory.limit_in_bytes"), str(memory_bytes))
            _write_if_exists(os.path.join(path, "memory.memsw.limit_in_bytes"), str(memory_bytes))
        _write(os.path.join(self.dirs["pids"][1], "pids.max"), str(pids))

    def paths(self) -> list[str]:
        return sorted({d for _, d in self.dirs.values()})

    def join(self, pid: int) -> None:
        """Move process `pid` (before it starts anything) into every directory of the run."""
        for path in self.paths():
            _write(os.path.join(path, "cgroup.procs"), str(pid))

    def stop(self) -> Stop | None:
        """A Stop when the kernel enforced a limit: an OOM kill (memory), or a refused fork (pids)."""
        version, path = self.dirs["memory"]
        memory = parse_counters(_read_or_empty(os.path.join(path, "memory.events" if version == "2"
                                                            else "memory.oom_control")))
        if memory.get("oom_kill", 0) > 0:
            return Stop("memory_mb", "the run's processes together went past memory_mb and the kernel killed one "
                                     "(cgroup memory limit)")
        if parse_counters(_read_or_empty(os.path.join(self.dirs["pids"][1], "pids.events"))).get("max", 0) > 0:
            return Stop("max_procs", "the run tried to have more than max_procs processes and threads at once "
                                     "(cgroup pids limit)")
        return None

    def kill(self) -> None:
        """SIGKILL everything in the run's cgroups, including processes that left its session."""
        for path in self.paths():
            if os.path.exists(os.path.join(path, "cgroup.kill")):
                with contextlib.suppress(OSError):
                    _write(os.path.join(path, "cgroup.kill"), "1")
                continue
            for _ in range(20):  # a process forking while we kill: read again until empty
                pids = [int(p) for p in _read_or_empty(os.path.join(path, "cgroup.procs")).split()]
                if not pids:
                    break
                for pid in pids:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the run's directories once their processes are gone (a killed process leaves in a moment)."""
        for path in self.paths():
            _remove_dir(path, wait_s)


def _remove_dir(path: str, wait_s: float = 0.0) -> None:
    deadline = time.monotonic() + wait_s
    pause = 0.001
    while True:
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                log.debug("sandbox: cannot remove cgroup %s yet: %s", path, exc)
                return
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def _read_or_empty(path: str) -> str:
    try:
        return _read(path)
    except OSError:
        return ""


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def _write_if_exists(path: str, text: str) -> None:
    if os.path.exists(path):
        _write(path, text)


# ----------------------------------------------------------------------------- the watchdog's /proc reading
def proc_stats() -> list[tuple[int, int, int, int]]:
    """parse_stat of every process of this pid namespace (those that vanish meanwhile are skipped)."""
    stats = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stats.append(parse_stat(_read(f"/proc/{name}/stat")))
            except (OSError, ValueError, IndexError):
                pass
    return stats


def anon_rss_bytes(pid: int) -> int:
    """RssAnon of `pid` (its private resident memory; shared libraries and files are not counted), 0 if gone."""
    for line in _read_or_empty(f"/proc/{pid}/status").splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


# ----------------------------------------------------------------------------- the workspace's size
def disk_usage(root: str) -> tuple[int, bool]:
    """(bytes allocated under `root`, like du: blocks, hard links once, symlinks not followed; whether every
    directory could be read)."""
    total, complete = 0, True
    seen: set[tuple[int, int]] = set()
    todo = [root]
    while todo:
        path = todo.pop()
        try:
            with os.scandir(path) as it:
                entries = list(it)
        except OSError:
            complete = False
            continue
        for entry in entries:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if st.st_nlink > 1 and not entry.is_dir(follow_symlinks=False):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
            if entry.is_dir(follow_symlinks=False):
                todo.append(entry.path)
    return total, complete


def fs_used(path: str) -> int:
    """Bytes in use on the filesystem holding `path`."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class WorkspaceWatch:
    """Keeps a workspace at most `limit_mb` (or at most its size at the start, if it was already bigger)."""

    def __init__(self, workspace: str, limit_mb: int) -> None:
        self.workspace = workspace
        self.limit_mb = limit_mb
        size, complete = disk_usage(workspace)
        self.limit = max(limit_mb * MIB, size)
        self._measured(size if complete else self.limit)

    def _measured(self, size: int) -> None:
        self.size = size
        self.fs_mark = fs_used(self.workspace)  # the filesystem's use when the workspace was `size`
        self.next_du = time.monotonic() + DU_EVERY_S

    def check(self) -> Stop | None:
        """Measure again when the filesystem grew by the workspace's headroom (or every DU_EVERY_S)."""
        grown = fs_used(self.workspace) - self.fs_mark
        if grown <= self.limit - self.size and time.monotonic() < self.next_du:
            return None
        size, complete = disk_usage(self.workspace)
        if not complete:  # a directory the command made unreadable: the filesystem's growth is an upper bound
            size = max(size, self.size + grown)
        self._measured(size)
        if size > self.limit:
            return Stop("workspace_mb", f"the workspace grew to {size / MIB:.0f} MB, past workspace_mb="
                                        f"{self.limit_mb} MB")
        return None


# ----------------------------------------------------------------------------- one run's monitor
class RunMonitor:
    """Checks one run's totals while it runs (``check``, called every FS_POLL_S or sooner) and once after it
    ended (``final``). With a RunCgroup the kernel enforces memory and processes and the monitor reads its
    events; without one it scans /proc (the run: `leader` and its descendants, and in rlimits mode its session)."""

    def __init__(self, leader: int, cgroup: RunCgroup | None, workspace: WorkspaceWatch, memory_mb: int,
                 procs_limit: int, by_session: bool) -> None:
        self.leader, self.cgroup, self.workspace = leader, cgroup, workspace
        self.memory_mb, self.procs_limit, self.by_session = memory_mb, procs_limit, by_session
        self._next_totals = 0.0
        self.stopped: Stop | None = None

    def check(self) -> Stop | None:
        """The first limit the run went past, or None; remembered once found."""
        if self.stopped is None:
            now = time.monotonic()
            if now >= self._next_totals:
                self._next_totals = now + (EVENTS_POLL_S if self.cgroup else SCAN_S)
                self.stopped = self.cgroup.stop() if self.cgroup else self._scan()
            self.stopped = self.stopped or self.workspace.check()
        return self.stopped

    def final(self) -> Stop | None:
        """After the run: a limit it went past at the very end (an OOM kill, the workspace's size)."""
        if self.stopped is None:
            self.stopped = (self.cgroup.stop() if self.cgroup else None) or self.workspace.check()
        return self.stopped

    def _scan(self) -> Stop | None:
        members = run_members(proc_stats(), self.leader, self.by_session)
        tasks = sum(members.values())
        if tasks >= self.procs_limit:
            return Stop("max_procs", f"the run reached {tasks} processes and threads, the max_procs limit "
                                     f"(watchdog)")
        used = sum(anon_rss_bytes(pid) for pid in members)
        if used > self.memory_mb * MIB:
            return Stop("memory_mb", f"the run's processes together held {used / MIB:.0f} MB, past memory_mb="
                                     f"{self.memory_mb} MB (watchdog)")
        return None
