"""An OS-isolated sandbox for the commands of agent environments (terminal, tool-call, SWE).

Two modes (``isolation_status()`` says which one works here, and why):

- ``"namespaces"``: every run gets new user, mount, pid, network, IPC and UTS namespaces. The
  command sees a read-only root holding only ``/usr``, ``/bin``, ``/lib*``, a minimal ``/etc``, the
  Python installation (``sys.base_prefix``) and ``extra_ro_paths``; the workspace read-write at
  ``/workspace`` (its cwd and $HOME); a private ``/tmp`` (tmpfs); a ``/proc`` of its own pid
  namespace; ``/dev`` with null, zero, full, random and urandom. The only network interface is a
  down loopback. It runs with no capabilities. When the command exits, everything it started is
  killed (its pid namespace ends).
- ``"rlimits"``: the fallback when namespaces do not work: the same limits and scrubbed environment,
  cwd = workspace, the process group killed at the end; no filesystem or network isolation (commands can
  read host files and reach the host's loopback listeners). It is logged as a WARNING, and a caller (or
  ``OPENCLAW_REQUIRE_ISOLATION=1``) can refuse it: ``Sandbox(require_isolation=True)``.

A run's totals (memory and processes of all its processes together, the workspace's size) are bounded by
``sandbox_totals.RunMonitor``: a cgroup per run where one can be had, a watchdog otherwise.

In both modes a parent that is the host's root runs the sandbox as uid/gid 65534, because the kernel
does not enforce RLIMIT_NPROC for root; the workspace is handed to that uid (``Sandbox.adopt``).
See docs/sandbox.md.

Each run starts a helper process (``sandbox_child.py``, run as a script with few imports to keep
its start-up short). It builds the namespaces and the new root, applies the limits and execs the
command; a set-up failure is reported on a pipe that closes when the command is exec'd (as
subprocess does), so ``run`` raises ``SandboxError`` for a broken sandbox and returns a
``RunResult`` for anything the command did.
"""


from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import marshal
import math
import os
import resource
import select
import selectors
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from slime_ext.envs import sandbox_child
from slime_ext.envs.sandbox_totals import (
    FS_POLL_S,
    RunCgroup,
    RunMonitor,
    Stop,
    WorkspaceWatch,
    cgroup_support,
)

log = logging.getLogger(__name__)

MODES = ("namespaces", "rlimits")
SANDBOX_ID = 65534  # uid and gid a host-root parent runs sandboxes as (nobody / nogroup)
INSIDE_WORKSPACE = "/workspace"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "nsswitch.conf", "localtime",
               "os-release", "protocols", "services")
DEV_NODES = ("null", "zero", "full", "random", "urandom")
RESERVED_INSIDE = ("/proc", "/dev", INSIDE_WORKSPACE)  # extra_ro_paths may not go there
OUTPUT_KILL_FACTOR = 4  # a stream past 4x the output cap: stop reading and kill the run
REQUIRE_ENV = "OPENCLAW_REQUIRE_ISOLATION"  # "1": a Sandbox refuses rlimits mode
NAMESPACES_ENV = "OPENCLAW_SANDBOX_NAMESPACES"  # "0": do not use namespaces (rlimits mode; for tests and debugging)
OFF_VALUES = ("0", "no", "off", "false")
FALLBACK_LOSSES = ("commands can read every host file its uid can (the repository, /tmp, other users' "
                   "world-readable files) and connect to the host's loopback listeners and the network; a process "
                   "that calls setsid can outlive the run")


class SandboxError(RuntimeError):
    """The sandbox could not be set up; not an error of the command run inside it."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Per-run limits; every value must be > 0 (address_space_mb may be None).

    Totals of the whole run (all its processes together; see sandbox_totals): memory_mb: resident memory;
    max_procs: processes and threads (also RLIMIT_NPROC); workspace_mb: the workspace's size on disk; wall_s:
    wall clock, set-up included. Per process: cpu_s: RLIMIT_CPU (SIGXCPU, then SIGKILL a second later);
    address_space_mb: RLIMIT_AS (None: memory_mb); file_size_mb: RLIMIT_FSIZE (at most workspace_mb);
    open_files: RLIMIT_NOFILE. output_bytes: kept of stdout and of stderr, each; tmp_mb: size of the
    private /tmp (namespace mode; a tmpfs, so it is memory too).
    """

    cpu_s: int = 10
    memory_mb: int = 1024
    max_procs: int = 64
    file_size_mb: int = 64
    open_files: int = 256
    wall_s: float = 30
    output_bytes: int = 64 * 1024
    tmp_mb: int = 256
    workspace_mb: int = 512
    address_space_mb: int | None = None

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is None and field.name == "address_space_mb":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"SandboxLimits.{field.name} must be a number > 0, got {value!r}")


DEFAULT_LIMITS = SandboxLimits()


@dataclasses.dataclass
class RunResult:
    """What a command did. exit_code is None when a signal killed it (then `signal` is set);
    timed_out: the wall-clock limit killed it; truncated: stdout or stderr went past the cap (the first
    output_bytes of each are kept; far past it, the run is killed). stopped_by: the SandboxLimits field
    the run went past when the sandbox stopped it or the kernel enforced it on the run as a whole
    ("wall_s", "output_bytes", "memory_mb", "max_procs", "workspace_mb"; None otherwise), stop_reason the
    sentence saying so."""

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    truncated: bool
    signal: int | None
    wall_s: float
    stopped_by: str | None = None
    stop_reason: str = ""


# ----------------------------------------------------------------------------- pure helpers
def command_argv(command: str | Sequence[str]) -> list[str]:
    """A str runs through ``/bin/sh -c``; a sequence is the argv itself."""
    if isinstance(command, str):
        return ["/bin/sh", "-c", command]
    argv = [str(a) for a in command]
    if not argv:
        raise ValueError("empty command")
    return argv


def sandbox_env(home: str, tmpdir: str, path: str = DEFAULT_PATH, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The command's whole environment: PATH, HOME, LANG, TMPDIR and the explicit `extra`; nothing inherited."""
    env = {"PATH": path, "HOME": home, "LANG": "C.UTF-8", "TMPDIR": tmpdir}
    for key, value in (extra or {}).items():
        if not isinstance(key, str) or not isinstance(value, str) or not key or "=" in key or "\0" in key + value:
            raise ValueError(f"bad environment entry {key!r}={value!r}")
        env[key] = value
    return env


def rlimit_table(limits: SandboxLimits, nproc: int) -> list[tuple[int, int, int]]:
    """(resource, soft, hard) for setrlimit; the CPU hard limit is one second past the soft one. One file may not
    be larger than the whole workspace."""
    mib = 1024 * 1024
    cpu = math.ceil(limits.cpu_s)
    space = (limits.address_space_mb or limits.memory_mb) * mib
    fsize = min(limits.file_size_mb, limits.workspace_mb) * mib
    return [
        (resource.RLIMIT_CPU, cpu, cpu + 1),
        (resource.RLIMIT_AS, space, space),
        (resource.RLIMIT_NPROC, nproc, nproc),
        (resource.RLIMIT_FSIZE, fsize, fsize),
        (resource.RLIMIT_NOFILE, limits.open_files, limits.open_files),
        (resource.RLIMIT_CORE, 0, 0),
    ]


def python_ro_paths() -> list[str]:
    """This Python's installation, exposed read-only so that ``python3`` works inside (none if under /usr)."""
    prefix = os.path.realpath(sys.base_prefix)
    return [] if _under_any(prefix, SYSTEM_DIRS) else [prefix]


def inside_path(ro_paths: Sequence[str]) -> str:
    """PATH inside: an exposed Python's bin first (``python3`` is this interpreter), then the system's."""
    bins = [p + "/bin" for p in python_ro_paths() if _under_any(p, ro_paths)]
    return ":".join([*bins, DEFAULT_PATH])


def mount_plan(workspace: str, ro_paths: Sequence[str] = (), tmp_mb: int = 256) -> list[tuple[str, str, str]]:
    """The new root as (kind, argument, path inside) steps, applied in order on an empty tmpfs.

    Kinds: dir, file (argument: content), symlink (argument: target), tmpfs (argument: options),
    ro / rw / dev (argument: the host path bind-mounted), remount-ro. The host paths are the system dirs
    that exist here, a few /etc entries, the /dev nodes, `ro_paths` (each at its own path) and the
    workspace (at /workspace); nothing else of the host is in the tree.
    """
    plan = [("dir", "", "/proc"), ("tmpfs", f"size={tmp_mb}m,mode=1777", "/tmp"),
            ("tmpfs", "size=64k,mode=0755", "/dev")]
    plan += [("dev", f"/dev/{n}", f"/dev/{n}") for n in DEV_NODES if os.path.exists(f"/dev/{n}")]
    plan += [("symlink", "/proc/self/fd", "/dev/fd"), ("symlink", "/tmp", "/dev/shm")]
    plan += [("symlink", f"/proc/self/fd/{i}", f"/dev/{n}") for i, n in enumerate(("stdin", "stdout", "stderr"))]
    plan += [("remount-ro", "", "/dev")]
    plan += [("file", text, f"/etc/{name}") for name, text in _etc_files().items()]
    plan += [_expose(f"/etc/{n}") for n in ETC_ENTRIES if os.path.lexists(f"/etc/{n}")]
    plan += [_expose(d) for d in SYSTEM_DIRS if os.path.lexists(d)]
    plan += [("ro", os.path.realpath(p), p) for p in _outermost(ro_paths) if not _under_any(p, SYSTEM_DIRS)]
    plan += [("rw", workspace, INSIDE_WORKSPACE), ("remount-ro", "", "/")]
    return plan


def _expose(path: str) -> tuple[str, str, str]:
    """A host entry at its own path: a symlink stays a symlink (/bin -> usr/bin), anything else is bound read-only."""
    return ("symlink", os.readlink(path), path) if os.path.islink(path) else ("ro", path, path)


def _etc_files() -> dict[str, str]:
    return {"passwd": f"root:x:0:0:sandbox:{INSIDE_WORKSPACE}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
            "group": "root:x:0:\nnogroup:x:65534:\n", "hostname": "sandbox\n",
            "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n"}


def _under_any(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def _outermost(paths: Sequence[str]) -> list[str]:
    """Sorted unique paths, without those inside another one."""
    kept: list[str] = []
    for p in sorted(set(paths)):
        if not _under_any(p, kept):
            kept.append(p)
    return kept


def is_host_root(uid_map: str | None = None) -> bool:
    """Whether this process is the host's root (euid 0 mapped to uid 0 of the initial user namespace), for which
    the kernel does not enforce RLIMIT_NPROC. Root inside a user namespace (a rootless container) is not."""
    if os.geteuid() != 0:
        return False
    if uid_map is None:
        try:
            uid_map = Path("/proc/self/uid_map").read_text()
        except OSError:
            return True
    return any(line.split()[:2] == ["0", "0"] for line in uid_map.splitlines())


# ----------------------------------------------------------------------------- isolation mode, workspaces
@functools.lru_cache(maxsize=1)
def isolation_status() -> tuple[str, str]:
    """(mode, why): "namespaces" if a user+mount+pid+net namespace sandbox runs a command here, else "rlimits".

    Probed once per process (a real sandboxed ``/bin/sh -c 'exit 0'``) and cached. The rlimits fallback is
    logged as a WARNING (once) naming what it does not isolate.
    """
    mode, why = _probe_isolation()
    if mode == "rlimits":
        log.warning("%s", fallback_warning(why))
    return mode, why


def fallback_warning(why: str) -> str:
    """The loud sentence for the rlimits fallback: why, what is lost, how to refuse it."""
    return (f"SANDBOX NOT ISOLATED: namespaces are unavailable ({why}), so agent commands run in the rlimits "
            f"fallback: {FALLBACK_LOSSES}. Set {REQUIRE_ENV}=1 (or pass --require-isolation) to refuse to run "
            f"instead; see docs/sandbox.md")


def refusal_message(why: str) -> str:
    """The error when isolation is required and only the rlimits fallback is available (`why`)."""
    return (f"namespace isolation is required ({REQUIRE_ENV}=1, --require-isolation or require_isolation) but the "
            f"sandbox would run in rlimits mode ({why}), where {FALLBACK_LOSSES}; refusing to run. See "
            f"docs/sandbox.md, 'When namespaces are unavailable'")


def isolation_required() -> bool:
    """Whether ``OPENCLAW_REQUIRE_ISOLATION`` asks every Sandbox to refuse rlimits mode."""
    value = os.environ.get(REQUIRE_ENV, "").strip().lower()
    return bool(value) and value not in OFF_VALUES


def isolation_report() -> dict:
    """What this machine's sandbox enforces, as plain data: mode and why, whether it isolates, how a run's
    totals are bounded (cgroup or watchdog) and why, whether isolation is required, and the warnings."""
    mode, why = isolation_status()
    totals = cgroup_support()
    warnings = [fallback_warning(why)] if mode == "rlimits" else []
    if not totals.available:
        warnings.append(f"run totals (memory_mb, max_procs) {totals.describe()}")
    return {"mode": mode, "why": why, "isolated": mode == "namespaces",
            "totals": "cgroup" if totals.available else "watchdog", "totals_why": totals.why,
            "required": isolation_required(), "warnings": warnings}


def describe_isolation(report: dict | None = None) -> list[str]:
    """Lines for people (``openclaw-rl env`` prints them on stderr): the mode, the totals, then any WARNING
    (of ``report``, an ``isolation_report()``: made here when not given)."""
    report = report or isolation_report()
    totals = cgroup_support().describe()
    return [f"sandbox: {report['mode']} mode ({report['why']})", f"sandbox run totals: {totals}",
            *(f"WARNING: {w}" for w in report["warnings"])]


def _probe_isolation() -> tuple[str, str]:
    value = os.environ.get(NAMESPACES_ENV, "").strip().lower()
    if value in OFF_VALUES and value:
        return "rlimits", f"namespaces disabled by {NAMESPACES_ENV}={os.environ[NAMESPACES_ENV]}"
    if not sys.platform.startswith("linux"):
        return "rlimits", f"namespaces need Linux; this is {sys.platform}"
    try:
        with fresh_workspace("sandbox-probe-") as ws:
            res = Sandbox(ws, SandboxLimits(wall_s=20), mode="namespaces").run(["/bin/sh", "-c", "exit 0"])
    except (SandboxError, OSError) as exc:
        hint = " (user namespaces disabled? see docs/sandbox.md)" if "unshare" in str(exc) else ""
        return "rlimits", f"{exc}{hint}"
    if res.exit_code != 0:
        return "rlimits", f"namespace probe failed (exit {res.exit_code}, signal {res.signal}): {res.stderr.strip()[:300]}"
    who = f"as uid {SANDBOX_ID} (the parent is root)" if is_host_root() else f"as uid {os.geteuid()}"
    return "namespaces", f"user, mount, pid, net, ipc and uts namespaces work {who}"


def isolation_mode() -> str:
    """"namespaces" or "rlimits"; isolation_status() says why."""
    return isolation_status()[0]


@contextlib.contextmanager
def fresh_workspace(prefix: str = "sandbox-") -> Iterator[Path]:
    """A new empty temporary directory, removed with everything in it on exit."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        _remove_tree(path)


def _remove_tree(path: Path) -> None:
    """rm -rf, also of directories a command made unreadable or read-only (root needs no help with those)."""
    if not path.exists():
        return
    if os.geteuid() != 0:
        os.chmod(path, 0o700)
        for _root, dirs, _files, root_fd in os.fwalk(path):  # top-down: fixed before it descends
            for name in dirs:  # `dirs` also lists symlinks to directories: never chmod through one
                if stat.S_ISDIR(os.stat(name, dir_fd=root_fd, follow_symlinks=False).st_mode):
                    os.chmod(name, 0o700, dir_fd=root_fd)
    shutil.rmtree(path)


# ----------------------------------------------------------------------------- the sandbox
class Sandbox:
    """Runs commands in `workspace` under OS isolation (see the module docstring).

    workspace: a host directory, read-write inside (at /workspace in namespace mode); mode: "namespaces",
    "rlimits" or None for isolation_mode(); extra_ro_paths: host paths made visible read-only at the same
    path inside (namespace mode; in rlimits mode everything readable by the sandbox's uid is visible);
    require_isolation: refuse rlimits mode with SandboxError (None: only if OPENCLAW_REQUIRE_ISOLATION is set).
    """

    def __init__(self, workspace: Path | str, limits: SandboxLimits = DEFAULT_LIMITS, mode: str | None = None,
                 extra_ro_paths: Sequence[Path | str] = (), require_isolation: bool | None = None) -> None:
        self.workspace = Path(workspace).resolve()
        if not self.workspace.is_dir():
            raise ValueError(f"workspace {self.workspace} is not a directory")
        self.limits = limits
        self.mode = mode or isolation_mode()
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if self.mode == "rlimits" and (isolation_required() if require_isolation is None else require_isolation):
            raise SandboxError(refusal_message(isolation_status()[1] if mode is None else "rlimits mode was asked for"))
        extra = [os.path.abspath(p) for p in extra_ro_paths]
        for p in extra:
            if not os.path.exists(p):
                raise ValueError(f"extra_ro_paths: {p} does not exist")
            if p == "/" or _under_any(p, RESERVED_INSIDE):
                raise ValueError(f"extra_ro_paths: {p} would cover / or one of {RESERVED_INSIDE}")
        self.ro_paths = _outermost([*python_ro_paths(), *extra])
        self.ids = (SANDBOX_ID, SANDBOX_ID) if is_host_root() else None
        self.plan = mount_plan(str(self.workspace), self.ro_paths, limits.tmp_mb) if self.mode == "namespaces" else []
        if self.mode == "rlimits":
            (self.workspace / ".tmp").mkdir(exist_ok=True)  # TMPDIR: there is no private /tmp in this mode
        self.adopt()

    def adopt(self, path: Path | str | None = None) -> None:
        """Make `path` (default: the whole workspace) the sandbox's: chown -R to 65534 when the parent is the
        host's root, nothing otherwise. Call it for files the parent puts in the workspace after creating the Sandbox."""
        if self.ids is None:
            return
        top = Path(path) if path is not None else self.workspace
        os.chown(top, *self.ids, follow_symlinks=False)
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                os.chown(os.path.join(root, name), *self.ids, follow_symlinks=False)

    def run(self, command: str | Sequence[str], *, stdin: str | None = None, env: dict[str, str] | None = None,
            timeout_s: float | None = None) -> RunResult:
        """Run `command` until it exits or a limit stops it; a str runs through ``/bin/sh -c``.

        The environment is PATH, HOME, LANG, TMPDIR and `env`; `timeout_s` overrides limits.wall_s. When the
        command exits, whatever it started is killed. Raises SandboxError only when the sandbox cannot be set up.
        """
        wall = self.limits.wall_s if timeout_s is None else timeout_s
        if not wall > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        argv = command_argv(command)
        start = time.monotonic()
        watch = WorkspaceWatch(str(self.workspace), self.limits.workspace_mb)
        cgroup = self._new_cgroup()
        try:
            proc, report_r = _start_helper(self._spec(argv, env, cgroup is not None), cgroup)
            monitor = RunMonitor(proc.pid, cgroup, watch, self.limits.memory_mb, self._procs_limit(),
                                 by_session=self.mode == "rlimits")
            with proc:
                try:
                    data = stdin.encode() if stdin is not None else None
                    out, err, truncated, stop = _collect(proc, report_r, data, self.limits.output_bytes,
                                                         start + wall, monitor, _wall_stop(wall))
                finally:
                    os.close(report_r)
                    _kill_group(proc.pid)  # what is left of the run (the leader is not reaped: the pgid is still ours)
                    if cgroup is not None:
                        cgroup.kill()  # and what left its process group
                    proc.wait()
            stop = stop or monitor.final()
        finally:
            if cgroup is not None:
                cgroup.remove()
        rc = proc.returncode
        return RunResult(exit_code=rc if rc >= 0 else None, stdout=out.decode(errors="replace"),
                         stderr=err.decode(errors="replace"), timed_out=stop is not None and stop.limit == "wall_s",
                         truncated=truncated, signal=-rc if rc < 0 else None, wall_s=time.monotonic() - start,
                         stopped_by=stop.limit if stop else None, stop_reason=stop.reason if stop else "")

    def _procs_limit(self) -> int:
        """Tasks the run may have: max_procs, plus the helper and init that namespace mode adds to every run."""
        return self.limits.max_procs + (2 if self.mode == "namespaces" else 0)

    def _new_cgroup(self) -> RunCgroup | None:
        """This run's cgroup with its memory and pids limits, or None (then the watchdog bounds the totals)."""
        support = cgroup_support()
        if not support.available:
            return None
        try:
            return RunCgroup.create(support.dirs, self.limits.memory_mb * 1024 * 1024, self._procs_limit())
        except OSError as exc:
            log.warning("sandbox: cannot make this run's cgroup (%s); a watchdog bounds its totals instead", exc)
            return None

    def _spec(self, argv: list[str], env: dict[str, str] | None, in_cgroup: bool) -> dict:
        """What the helper process needs, as plain data (sent with marshal). In a cgroup, RLIMIT_NPROC is one
        higher than pids.max, so that the cgroup is what refuses a fork and the run is stopped for it."""
        path = inside_path(self.ro_paths)
        table = rlimit_table(self.limits, self._procs_limit() + (1 if in_cgroup else 0))
        if self.mode == "rlimits":
            return {"mode": self.mode, "argv": argv, "ids": self.ids, "cwd": str(self.workspace), "limits": table,
                    "env": sandbox_env(str(self.workspace), str(self.workspace / ".tmp"), path, env)}
        return {"mode": self.mode, "argv": argv, "ids": self.ids, "cwd": INSIDE_WORKSPACE, "hostname": "sandbox",
                "limits": table, "plan": self.plan, "env": sandbox_env(INSIDE_WORKSPACE, "/tmp", path, env)}


# ----------------------------------------------------------------------------- the parent's side of a run
def _wall_stop(wall: float) -> Stop:
    return Stop("wall_s", f"the run took longer than its wall-clock limit of {wall:g} s")


def _start_helper(spec: dict, cgroup: RunCgroup | None = None) -> tuple[subprocess.Popen, int]:
    """Start the helper (sandbox_child.py as a script, in a new session), move it into `cgroup` while it waits for
    its spec (so everything it starts is in the cgroup), send it `spec`; return it and the report pipe."""
    if not sys.executable:
        raise SandboxError("sys.executable is unknown: cannot start the sandbox helper")
    spec_r, spec_w = os.pipe()
    report_r, report_w = os.pipe()
    try:
        proc = subprocess.Popen([sys.executable, "-I", "-S", sandbox_child.__file__, str(spec_r), str(report_w)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                pass_fds=(spec_r, report_w), env={}, cwd="/", start_new_session=True)
    except BaseException:
        os.close(spec_w)
        os.close(report_r)
        raise
    finally:
        os.close(spec_r)
        os.close(report_w)
    if cgroup is not None:
        try:
            cgroup.join(proc.pid)
        except OSError as exc:
            os.close(spec_w)
            os.close(report_r)
            proc.kill()
            proc.wait()
            raise SandboxError(f"cannot move the sandbox helper into its cgroup: {exc}") from exc
    with contextlib.suppress(BrokenPipeError), open(spec_w, "wb") as f:  # a helper that died says why on the report pipe
        f.write(marshal.dumps(spec))
    return proc, report_r


def _collect(proc: subprocess.Popen, report_r: int, stdin: bytes | None, cap: int, deadline: float,
             monitor: RunMonitor, timeout: Stop) -> tuple[bytes, bytes, bool, Stop | None]:
    """(stdout, stderr, truncated, why it was stopped) of a started run; raises SandboxError if its set-up failed.
    The caller then kills what is left of the run (at once after a Stop)."""
    problem, late = _await_exec(report_r, deadline)
    if problem:
        raise SandboxError(problem)
    if late:
        return b"", b"", False, timeout
    out, err, truncated, stop = _communicate(proc, stdin, cap, deadline, monitor, timeout)
    return out, err, truncated, stop or _wait_exited(proc.pid, deadline, monitor, timeout)


def _await_exec(report_r: int, deadline: float) -> tuple[str, bool]:
    """Wait until the command is exec'd (the report pipe closes). Returns (set-up failure or "", past deadline)."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "", True
        if select.select([report_r], [], [], left)[0]:
            data = os.read(report_r, 65536)
            if not data:
                return b"".join(chunks).decode(errors="replace"), False
            chunks.append(data)


def _communicate(proc: subprocess.Popen, stdin: bytes | None, cap: int, deadline: float, monitor: RunMonitor,
                 timeout: Stop) -> tuple[bytes, bytes, bool, Stop | None]:
    """Feed stdin and read stdout and stderr concurrently until both close, keeping `cap` bytes of each.

    Returns (stdout, stderr, truncated, stop): stop is output_bytes past OUTPUT_KILL_FACTOR x cap on either
    stream, `timeout` past the deadline, the monitor's Stop past a total, None when both streams closed. Once the
    helper has exited, the rest of its process group is killed, so that a background process holding a pipe
    cannot stall the run (rlimits mode).
    """
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    seen = dict.fromkeys(kept, 0)
    pending = memoryview(stdin or b"")
    stop = None
    with selectors.DefaultSelector() as sel:
        for stream in kept:
            sel.register(stream, selectors.EVENT_READ)
        if pending:
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
        while sel.get_map():
            left = deadline - time.monotonic()
            stop = timeout if left <= 0 else monitor.check()
            if stop is not None:
                _drain(sel, kept, seen, cap)  # what it wrote before it was stopped is part of its result
                break
            events = sel.select(min(left, FS_POLL_S))
            if not events and _exited(proc.pid):
                _kill_group(proc.pid)
            for key, _ in events:
                stream = key.fileobj
                if stream is proc.stdin:
                    try:
                        pending = pending[os.write(stream.fileno(), pending[:select.PIPE_BUF]):]
                    except BrokenPipeError:  # the command does not read its stdin
                        pending = pending[:0]
                    if not pending:
                        sel.unregister(stream)
                        stream.close()
                    continue
                _read(sel, stream, kept, seen, cap)
            if max(seen.values()) > OUTPUT_KILL_FACTOR * cap:
                stop = Stop("output_bytes", f"stdout or stderr went past {OUTPUT_KILL_FACTOR} x output_bytes "
                                            f"({OUTPUT_KILL_FACTOR * cap} bytes)")
                break
    truncated = max(seen.values()) > cap
    return bytes(kept[proc.stdout]), bytes(kept[proc.stderr]), truncated, stop


def _read(sel: selectors.BaseSelector, stream, kept: dict, seen: dict, cap: int) -> None:
    """One read of a readable output stream: `cap` bytes of it kept, every byte counted; at its end, unregistered."""
    data = os.read(stream.fileno(), 65536)
    if not data:
        sel.unregister(stream)
        return
    seen[stream] += len(data)
    kept[stream] += data[: max(0, cap - len(kept[stream]))]


def _drain(sel: selectors.BaseSelector, kept: dict, seen: dict, cap: int) -> None:
    """Before a stopped run is killed: one read of each output stream that already holds data (a pipe holds
    64 KiB), without waiting for more, so what the command printed before a total stopped it is not lost."""
    for key, _ in sel.select(0):
        if key.fileobj in kept:
            _read(sel, key.fileobj, kept, seen, cap)


def _exited(pid: int) -> bool:
    """Whether our child `pid` has exited, without reaping it."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _wait_exited(pid: int, deadline: float, monitor: RunMonitor, timeout: Stop) -> Stop | None:
    """Wait (without reaping) until `pid` exits (None), the deadline passes (`timeout`) or a total is passed."""
    pause = 0.001
    while not _exited(pid):
        if time.monotonic() >= deadline:
            return timeout
        stop = monitor.check()
        if stop is not None:
            return stop
        time.sleep(pause)
        pause = min(pause * 2, FS_POLL_S)
    return None


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
