"""The sandbox's helper process: run as a script (``python -I -S sandbox_child.py SPEC_FD REPORT_FD``) by
``sandbox.Sandbox.run``. It reads the run's spec (a marshalled dict) from SPEC_FD, builds the
namespaces and the new root, drops privileges, applies the limits and execs the command. A set-up
failure is written to REPORT_FD, which closes at the exec (as subprocess does), so the parent tells
a broken sandbox from anything the command itself did.

It imports only what it needs (no dataclasses, subprocess, pathlib): its start-up time is part of
every sandboxed step. See ``sandbox.py`` for the isolation it provides and docs/sandbox.md.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import resource
import signal
import stat
import sys

# Linux constants (include/uapi/linux/sched.h, mount.h, prctl.h).
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_PRIVATE = 1024, 2048, 4096, 16384, 1 << 18
MS_RELATIME, MS_STRICTATIME, MNT_DETACH = 1 << 21, 1 << 24, 2
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 47, 4
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "loongarch64": 41, "ppc64le": 203, "ppc64": 203,
                  "s390x": 217, "i686": 217, "i386": 217, "armv7l": 218}  # glibc has no pivot_root wrapper
STAGE = "/tmp"  # where the new root is assembled, in the helper's own mount namespace, before pivot_root
SETUP_FAILED = 125  # exit status of a helper that failed before exec (the reason is on the report pipe)

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    args = [s.encode() if s is not None else None for s in (source, target, fstype)]
    _check(_libc.mount(*args, ctypes.c_ulong(flags), data.encode() if data else None),
           f"mount {source or ''} on {target}")


def _prctl(option: int, arg: int, arg3: int = 0) -> None:
    _check(_libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0), ctypes.c_ulong(0)),
           f"prctl({option})")


def _helper_main(spec_fd: int, report_fd: int) -> None:
    """The helper: set up the sandbox the spec on `spec_fd` describes, then exec the command. Never returns.

    A set-up failure is written to `report_fd`; the parent sees EOF there once the command is exec'd.
    """
    try:
        os.set_inheritable(report_fd, False)  # pass_fds made it inheritable; it must close at the exec
        with open(spec_fd, "rb") as f:
            spec = marshal.loads(f.read())
        if spec["mode"] == "namespaces":
            _enter_namespaces(spec, report_fd)  # returns only in the process that becomes the command
        elif spec["ids"]:
            _drop_to(*spec["ids"])
        _exec_command(spec)
    except BaseException as exc:  # anything before the exec is a set-up failure
        try:
            os.write(report_fd, f"sandbox set-up failed: {exc}".encode())
        finally:
            os._exit(SETUP_FAILED)


def _exec_command(spec: dict) -> None:
    """In the process that becomes the command: cwd, limits, default signal dispositions, exec."""
    os.chdir(spec["cwd"])
    # rlimits mode: RLIMIT_NPROC counts every task of the uid on the machine, so allow for those already there
    others = _tasks_of(os.getuid()) - 1 if spec["mode"] == "rlimits" else 0  # - 1: this process is the run's
    for res, soft, hard in spec["limits"]:
        extra = others if res == resource.RLIMIT_NPROC else 0
        resource.setrlimit(res, (soft + extra, hard + extra))
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT):  # Python changed these; the command gets defaults
        signal.signal(sig, signal.SIG_DFL)
    argv = spec["argv"]
    try:
        _execvpe(argv, spec["env"])
    except OSError as exc:
        os.write(2, f"sandbox: cannot run {argv[0]}: {exc.strerror}\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def _execvpe(argv: list[str], env: dict[str, str]) -> None:
    """os.execvpe without its lazy `import warnings`: after the uid change the standard library may be unreadable."""
    dirs = [""] if "/" in argv[0] else env.get("PATH", "").split(":")
    found_but_failed = None
    for d in dirs:
        path = os.path.join(d, argv[0]) if d else argv[0]
        try:
            os.execve(path, argv, env)
        except OSError as exc:  # a PATH entry we cannot search is a miss, not a "permission denied"
            if found_but_failed is None and not isinstance(exc, FileNotFoundError) and os.path.lexists(path):
                found_but_failed = exc
    raise found_but_failed or FileNotFoundError(2, "No such file or directory")


def _tasks_of(uid: int) -> int:
    """Tasks (processes and threads) owned by `uid`, approximately as RLIMIT_NPROC counts them."""
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(os.listdir(f"/proc/{name}/task"))
            except OSError:  # the process has gone
                pass
    return count


def _drop_to(uid: int, gid: int) -> None:
    """Host-root parent: become `uid`/`gid` with no supplementary groups, so that RLIMIT_NPROC applies."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    _prctl(PR_SET_DUMPABLE, 1)  # changing uid made the process non-dumpable: /proc/self would be root's


def _enter_namespaces(spec: dict, report_fd: int) -> None:
    """Create the namespaces; returns in the command's process (a child of the pid namespace's init)."""
    if spec["ids"]:
        # Host-root parent: assemble the root as real root (it can read a Python under /root) in a private mount
        # namespace; the user namespace created next, as uid 65534, inherits it with every mount locked.
        _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        _build_root(spec["plan"])
        _drop_to(*spec["ids"])
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS
    _check(_libc.unshare(flags), "unshare(user, mount, pid, net, ipc, uts)")
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
    status_r, status_w = os.pipe()
    init = os.fork()
    if init == 0:
        os.close(status_r)
        _run_init(spec, report_fd, status_w)
        return
    os.close(status_w)
    os.close(report_fd)
    _, status = os.waitpid(init, 0)
    with open(status_r, "rb") as f:
        reported = f.read()
    _exit_like(int(reported) if reported else status)


def _run_init(spec: dict, report_fd: int, status_w: int) -> None:
    """Pid 1 of the new pid namespace: enter the new root, start the command, reap, report its wait status.

    Returns only in the command's process. When init exits, the kernel kills everything left in the
    namespace; PDEATHSIG makes init die with the helper (which the parent kills on a timeout).
    """
    _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # as init, it then ignores SIGINT from inside
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    if not spec["ids"]:
        _build_root(spec["plan"])  # unprivileged parent: assembled here, as root of the new user namespace
    _pivot_into(STAGE)
    name = spec["hostname"].encode()
    _check(_libc.sethostname(name, len(name)), "sethostname")
    try:  # defence in depth, best effort: no nested user namespaces (this namespace's own limit, not the host's)
        with open("/proc/sys/user/max_user_namespaces", "w") as f:
            f.write("0")
    except OSError:
        pass
    command = os.fork()
    if command == 0:
        os.close(status_w)
        _drop_capabilities()
        return
    os.close(report_fd)
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == command:
            break
    os.write(status_w, str(status).encode())
    os._exit(0)


def _build_root(plan: list[tuple[str, str, str]]) -> None:
    """Apply `mount_plan` steps on a new tmpfs at STAGE. Host paths are opened first (O_PATH) and bound
    through /proc/self/fd, so that the tmpfs covering STAGE (/tmp) cannot hide a source under it."""
    fds = {src: os.open(src, os.O_PATH | os.O_CLOEXEC) for kind, src, _ in plan if kind in ("ro", "rw", "dev")}
    _mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "size=16m,mode=0755")
    for kind, arg, path in plan:
        target = STAGE + path
        if kind in ("file", "symlink", "ro", "rw", "dev"):
            os.makedirs(os.path.dirname(target), exist_ok=True)
        if kind in ("dir", "tmpfs"):
            os.makedirs(target, exist_ok=True)
        if kind == "file":
            with open(target, "w") as f:
                f.write(arg)
        elif kind == "symlink":
            os.symlink(arg, target)
        elif kind == "tmpfs":
            _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, arg)
        elif kind in ("ro", "rw", "dev"):
            fd = fds[arg]
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(target, exist_ok=True)
            else:
                open(target, "a").close()
            _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
            if kind == "ro":
                _remount_ro(target)
        elif kind == "remount-ro":
            _remount_ro(target)
        elif kind != "dir":
            raise ValueError(f"unknown mount plan step {kind!r}")
    for fd in fds.values():
        os.close(fd)


def _remount_ro(target: str) -> None:
    """Make the mount at `target` read-only, nosuid, nodev, keeping what a user namespace may not change
    (noexec and the atime mode of the mount it was bound from)."""
    have = os.statvfs(target).f_flag
    kept = sum(ms for st, ms in ((os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME),
                                 (os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)) if have & st)
    if not kept & (MS_NOATIME | MS_RELATIME):
        kept |= MS_STRICTATIME
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | kept)


def _pivot_into(new_root: str) -> None:
    """Mount /proc for the new pid namespace, make `new_root` the root and detach the old one entirely."""
    _mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(new_root, new_root, None, MS_BIND | MS_REC)  # a mount of our own: pivot_root refuses a locked one
    number = SYS_PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise OSError(f"pivot_root: syscall number unknown for {os.uname().machine}")
    os.chdir(new_root)
    _check(_libc.syscall(number, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")


def _drop_capabilities() -> None:
    """The command execs with no capabilities: empty bounding and ambient sets (the inheritable set of a
    new user namespace is empty) and no_new_privs, so that nothing it execs can gain any."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), ctypes.c_ulong(0), ctypes.c_ulong(0),
                       ctypes.c_ulong(0)) != 0:
            break  # EINVAL: past the last capability this kernel knows
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _exit_like(status: int) -> None:
    """Exit as the process with wait status `status` did: same exit code, or killed by the same signal."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if sig not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else SETUP_FAILED)


if __name__ == "__main__":
    _helper_main(int(sys.argv[1]), int(sys.argv[2]))
