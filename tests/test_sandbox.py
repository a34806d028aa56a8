"""The agent sandbox (slime_ext.envs.sandbox): escapes that must be contained, ordinary use that must work.

Tests run in every mode that works here. Those that need namespace isolation skip, with the reason
isolation_status() gives, on a machine where namespaces are unavailable (the rlimits fallback does not
isolate the filesystem or the network, so those tests would fail there by design).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from _fork_until_refused import fork_until_refused

from slime_ext.envs import Sandbox, SandboxError, SandboxLimits, fresh_workspace, isolation_status
from slime_ext.envs.sandbox import (
    INSIDE_WORKSPACE,
    command_argv,
    is_host_root,
    mount_plan,
    rlimit_table,
    sandbox_env,
)

MODE, WHY = isolation_status()
needs_namespaces = pytest.mark.skipif(MODE != "namespaces", reason=f"needs namespace isolation: {WHY}")
ALL_MODES = [pytest.param("namespaces", marks=needs_namespaces), "rlimits"]
LIMITS = SandboxLimits(cpu_s=2, memory_mb=256, max_procs=16, file_size_mb=16, wall_s=10, output_bytes=64 * 1024)


@pytest.fixture
def workspace():
    with fresh_workspace("sandbox-test-") as ws:
        yield ws


@pytest.fixture(params=ALL_MODES)
def box(request, workspace) -> Sandbox:
    return Sandbox(workspace, LIMITS, mode=request.param)


@pytest.fixture
def ns_box(workspace) -> Sandbox:
    if MODE != "namespaces":
        pytest.skip(f"needs namespace isolation: {WHY}")
    return Sandbox(workspace, LIMITS, mode="namespaces")


def processes_with(marker: str) -> list[int]:
    """Pids of the processes whose command line contains `marker`."""
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            pass
    return found


# ----------------------------------------------------------------------------- pure helpers
def test_limits_defaults_and_validation():
    d = SandboxLimits()
    assert (d.cpu_s, d.memory_mb, d.max_procs, d.file_size_mb, d.open_files, d.wall_s, d.output_bytes) == (
        10, 1024, 64, 64, 256, 30, 64 * 1024)
    assert (d.workspace_mb, d.tmp_mb, d.address_space_mb) == (512, 256, None)
    for bad in ({"cpu_s": 0}, {"memory_mb": -1}, {"wall_s": 0.0}, {"max_procs": True}, {"output_bytes": "1"},
                {"workspace_mb": 0}, {"address_space_mb": 0}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            SandboxLimits(**bad)


def test_command_argv_and_env():
    assert command_argv("echo hi | wc") == ["/bin/sh", "-c", "echo hi | wc"]
    assert command_argv(("ls", Path("/x"))) == ["ls", "/x"]
    with pytest.raises(ValueError):
        command_argv([])
    env = sandbox_env("/workspace", "/tmp", extra={"TASK": "1"})
    assert env == {"PATH": env["PATH"], "HOME": "/workspace", "LANG": "C.UTF-8", "TMPDIR": "/tmp", "TASK": "1"}
    for bad in ({"A=B": "1"}, {"": "1"}, {"A": 1}):
        with pytest.raises(ValueError):
            sandbox_env("/w", "/tmp", extra=bad)


def test_rlimit_table():
    import resource

    table = {res: (soft, hard) for res, soft, hard in rlimit_table(LIMITS, nproc=18)}
    assert table[resource.RLIMIT_CPU] == (2, 3)  # SIGXCPU at the soft limit, SIGKILL a second later
    assert table[resource.RLIMIT_AS] == (256 << 20, 256 << 20)
    assert table[resource.RLIMIT_NPROC] == (18, 18)
    assert table[resource.RLIMIT_FSIZE] == (16 << 20, 16 << 20)
    assert table[resource.RLIMIT_NOFILE] == (256, 256)
    assert table[resource.RLIMIT_CORE] == (0, 0)
    table = {res: soft for res, soft, _ in rlimit_table(SandboxLimits(memory_mb=100, address_space_mb=300,
                                                                      file_size_mb=64, workspace_mb=8), nproc=4)}
    assert table[resource.RLIMIT_AS] == 300 << 20  # per process; memory_mb bounds the run as a whole
    assert table[resource.RLIMIT_FSIZE] == 8 << 20  # one file is never bigger than the whole workspace


def test_mount_plan_exposes_only_system_dirs_readonly_and_the_workspace(tmp_path):
    plan = mount_plan(str(tmp_path), ["/opt/py"], tmp_mb=32)
    binds = {(kind, src, dst) for kind, src, dst in plan if kind in ("ro", "rw", "dev")}
    assert {b for b in binds if b[0] == "rw"} == {("rw", str(tmp_path), INSIDE_WORKSPACE)}
    for kind, src, dst in binds - {("rw", str(tmp_path), INSIDE_WORKSPACE)}:
        assert kind == "ro" or (kind == "dev" and src == dst and src.startswith("/dev/")), (kind, src)
        assert src.startswith(("/usr", "/bin", "/sbin", "/lib", "/etc/", "/dev/", "/opt/py")), src
    sources = {src for _, src, _ in binds}
    assert not sources & {"/", "/root", "/home", "/work", "/etc", "/tmp", "/proc", "/sys", "/var", "/run"}
    assert ("tmpfs", "size=32m,mode=1777", "/tmp") in plan
    assert plan[-1] == ("remount-ro", "", "/")  # the root tmpfs is read-only once assembled


def test_sandbox_argument_checks(workspace):
    with pytest.raises(ValueError, match="mode"):
        Sandbox(workspace, mode="chroot")
    with pytest.raises(ValueError, match="extra_ro_paths"):
        Sandbox(workspace, mode="rlimits", extra_ro_paths=["/proc/1"])
    with pytest.raises(ValueError, match="does not exist"):
        Sandbox(workspace, mode="rlimits", extra_ro_paths=["/no/such/path"])
    with pytest.raises(ValueError, match="not a directory"):
        Sandbox(workspace / "missing", mode="rlimits")
    with pytest.raises(ValueError, match="timeout_s"):
        Sandbox(workspace, mode="rlimits").run("true", timeout_s=0)


def test_is_host_root_reads_the_uid_map():
    if os.geteuid() != 0:
        assert not is_host_root("         0          0 4294967295\n")
        return
    assert is_host_root("         0          0 4294967295\n")  # the initial user namespace
    assert not is_host_root("         0      65534          1\n")  # root of a user namespace (rootless container)
    assert not is_host_root("         0       1000          1\n         1     100000      65536\n")


def test_isolation_status_explains_itself():
    mode, why = isolation_status()
    assert mode in ("namespaces", "rlimits") and why
    assert isolation_status() is isolation_status()  # probed once


def test_fresh_workspace_is_removed_even_if_locked(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o755)
    with fresh_workspace() as ws:
        (ws / "d" / "e").mkdir(parents=True)
        (ws / "d" / "e" / "f").write_text("x")
        (ws / "d" / "e").chmod(0)
        (ws / "d").chmod(0o500)
        (ws / "link").symlink_to(outside)  # must not be followed
    assert not ws.exists()
    assert outside.is_dir() and outside.stat().st_mode & 0o777 == 0o755


# ----------------------------------------------------------------------------- ordinary use (every mode)
def test_command_output_and_exit_code(box):
    r = box.run("echo out; echo err >&2; exit 3")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out, r.truncated, r.signal) == (3, "out\n", "err\n", False,
                                                                                      False, None)
    assert box.run(["false"]).exit_code == 1
    missing = box.run(["no-such-program-xyz"])
    assert missing.exit_code == 127 and "no-such-program-xyz" in missing.stderr


def test_stdin_is_passed(box):
    assert box.run("cat", stdin="hello\nworld\n").stdout == "hello\nworld\n"
    assert box.run("wc -c", stdin="x" * 1_000_000).stdout.strip() == "1000000"  # more than a pipe buffer
    assert box.run("true", stdin="x" * 1_000_000).exit_code == 0  # a command that does not read it


def test_writes_inside_the_workspace_persist(box, workspace):
    r = box.run("echo data > made.txt && mkdir -p d && echo more > d/f && pwd && echo $HOME")
    assert r.exit_code == 0, r.stderr
    assert (workspace / "made.txt").read_text() == "data\n"
    assert (workspace / "d" / "f").read_text() == "more\n"
    inside = INSIDE_WORKSPACE if box.mode == "namespaces" else str(workspace)
    assert r.stdout.split() == [inside, inside]


def test_python_runs_inside(box):
    r = box.run(["python3", "-c", "print(1 + 1)"])
    assert (r.exit_code, r.stdout) == (0, "2\n"), r.stderr


def test_environment_is_scrubbed(box, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-parent-secret-123")
    r = box.run(["env"], env={"TASK_ID": "7"})
    names = {line.split("=", 1)[0] for line in r.stdout.splitlines()}
    assert names == {"PATH", "HOME", "LANG", "TMPDIR", "TASK_ID"}
    assert "sk-parent-secret-123" not in r.stdout
    assert "LANG=C.UTF-8" in r.stdout.splitlines()


def test_background_processes_die_with_the_command(box):
    marker = f"{31 + uuid.uuid4().int % 1000 / 1000:.3f}"  # a unique `sleep` argument
    r = box.run(f"sleep {marker} & echo started")
    assert (r.stdout, r.timed_out) == ("started\n", False)
    assert r.wall_s < 5
    time.sleep(0.2)
    assert processes_with(f"sleep\0{marker}") == []


# ----------------------------------------------------------------------------- limits (every mode)
@pytest.mark.skipif(shutil.which("bash") is None, reason="the classic fork bomb needs bash")
def test_fork_bomb_is_contained(box):
    marker = f"bomb-{uuid.uuid4().hex[:8]}"
    start = time.monotonic()
    r = box.run(["bash", "-c", f":(){{ :|:& }};:; sleep 30 # {marker}"], timeout_s=10)
    assert r.stopped_by == "max_procs" and not r.timed_out and r.signal == signal.SIGKILL, r
    assert time.monotonic() - start < 6  # stopped at the process limit, not at the wall clock
    time.sleep(0.3)
    assert processes_with(marker) == []  # nothing of the bomb survives
    t = time.monotonic()  # the machine is fine: a process starts at once, and so does a sandbox
    subprocess.run(["true"], check=True)
    assert time.monotonic() - t < 1
    assert box.run("echo alive").stdout == "alive\n"


def test_process_limit_counts_the_runs_processes(box):
    code = fork_until_refused()
    r = box.run(["python3", "-c", code])
    # the refused fork stops the run (a cgroup reports it at once; the watchdog may miss a brief peak), unless the
    # command exited first
    assert r.stopped_by == "max_procs" or (r.exit_code, r.stopped_by) == (0, None), r
    assert LIMITS.max_procs - 4 <= int(r.stdout.split()[-1]) < LIMITS.max_procs
    assert r.wall_s < 5  # the sleeping children were killed


def test_what_a_run_printed_before_a_total_stopped_it_is_kept():
    """A total (processes, memory, workspace) stops a run at the monitor's next look; output already in the pipes
    is read before the kill, not dropped (it was, and a fork bomb's count came back empty now and then)."""
    from slime_ext.envs.sandbox import _communicate
    from slime_ext.envs.sandbox_totals import Stop

    class StopsAtOnce:  # a total passed: at its first look, after the command has printed
        def check(self):
            time.sleep(0.5)
            return Stop("max_procs", "test")

    proc = subprocess.Popen(["sh", "-c", "printf 'made 61'; printf 'refused' >&2; exec sleep 30"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err, truncated, stop = _communicate(proc, None, 1000, time.monotonic() + 20, StopsAtOnce(),
                                                 Stop("wall_s", "timeout"))
    finally:
        proc.kill()
        proc.wait()
    assert stop.limit == "max_procs" and (out, err, truncated) == (b"made 61", b"refused", False)


def test_memory_limit(box):
    r = box.run(["python3", "-c", "a = []\nwhile True: a.append(bytearray(10**7))"])
    assert r.exit_code != 0 and not r.timed_out
    assert "MemoryError" in r.stderr or r.signal == signal.SIGKILL


def test_cpu_limit(workspace):
    for mode in ("namespaces", "rlimits") if MODE == "namespaces" else ("rlimits",):
        r = Sandbox(workspace, SandboxLimits(cpu_s=1, wall_s=8), mode=mode).run(["python3", "-c", "while True: pass"])
        assert r.exit_code is None and r.signal in (signal.SIGXCPU, signal.SIGKILL), (mode, r)
        assert not r.timed_out and r.wall_s < 8


def test_wall_clock_timeout(box):
    r = box.run("sleep 30", timeout_s=1)
    assert r.timed_out and r.exit_code is None and r.signal == signal.SIGKILL
    assert 1 <= r.wall_s < 3
    r = box.run("exec >&- 2>&-; sleep 30", timeout_s=1)  # closing its pipes does not end the run early
    assert r.timed_out and r.wall_s < 3


def test_output_flood_is_capped_and_killed(box):
    r = box.run(["yes"])
    assert r.truncated and not r.timed_out and r.signal == signal.SIGKILL
    assert len(r.stdout) == LIMITS.output_bytes and r.stdout.startswith("y\ny\n")
    assert r.wall_s < 5
    r = box.run("head -c 70000 /dev/zero | tr '\\0' e >&2; echo done")  # a bit past the cap: truncated, not killed
    assert (r.truncated, r.exit_code, r.stdout, len(r.stderr)) == (True, 0, "done\n", LIMITS.output_bytes)


def test_file_size_limit(box, workspace):
    r = box.run("head -c 40000000 /dev/zero > big")
    assert r.exit_code != 0
    assert (workspace / "big").stat().st_size <= LIMITS.file_size_mb << 20


# ----------------------------------------------------------------------------- isolation (namespace mode)
@needs_namespaces
def test_no_network(ns_box):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    code = textwrap.dedent(f"""
        import socket
        for addr in (("1.1.1.1", 53), ("127.0.0.1", {port})):
            s = socket.socket()
            s.settimeout(3)
            try:
                s.connect(addr)
                print(addr[0], "connected")
            except OSError as e:
                print(addr[0], "failed", e)
    """)
    try:
        r = ns_box.run(["python3", "-c", code])
        assert r.exit_code == 0, r.stderr
        assert "connected" not in r.stdout and r.stdout.count("failed") == 2, r.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody reached the parent's listener
    finally:
        listener.close()
    ifaces = ns_box.run("tail -n +3 /proc/net/dev").stdout.split()
    assert ifaces[0] == "lo:" and sum(name.endswith(":") for name in ifaces) == 1  # only a loopback


@needs_namespaces
def test_cannot_read_outside_the_workspace(ns_box, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-4242")
    readme = Path(__file__).resolve().parent.parent / "README.md"
    r = ns_box.run(f"cat {secret}; cat {readme}; cat /etc/shadow; ls /home /var /run /sys; ls -a /root")
    assert "TOPSECRET" not in r.stdout and readme.read_text()[:40] not in r.stdout
    assert r.stderr.count("No such file or directory") >= 6, r.stderr
    # /root holds at most the path down to this Python, when it lives there (exposed read-only)
    assert set(r.stdout.split()) <= {".", "..", *Path(sys.base_prefix).parts}, r.stdout


@needs_namespaces
def test_cannot_write_outside_the_workspace(ns_box, tmp_path):
    host_tmp = Path("/tmp") / f"sandbox-escape-{uuid.uuid4().hex[:8]}"
    r = ns_box.run(f"echo x > {tmp_path}/escape; echo x > {host_tmp} && cat {host_tmp}; "
                   "mount -o remount,rw /usr; touch /usr/escape /escape /etc/escape")
    assert r.stdout == "x\n"  # its /tmp is a private tmpfs: writable, but not the host's
    assert not (tmp_path / "escape").exists() and not host_tmp.exists()
    assert not Path("/usr/escape").exists() and not Path("/escape").exists() and not Path("/etc/escape").exists()
    assert r.stderr.count("Read-only file system") == 3, r.stderr


@needs_namespaces
def test_own_pid_namespace_no_capabilities(ns_box):
    r = ns_box.run("ls /proc | grep -c '^[0-9]'; grep -E 'Cap(Eff|Prm|Bnd)' /proc/self/status; hostname")
    lines = r.stdout.split("\n")
    assert int(lines[0]) <= 5  # init, sh, ls, grep: none of the host's processes
    assert [line.split()[1] for line in lines[1:4]] == ["0000000000000000"] * 3
    assert lines[4] == "sandbox"


@needs_namespaces
def test_extra_ro_paths_are_visible_read_only(workspace, tmp_path):
    shared = tmp_path / "dataset"
    shared.mkdir()
    (shared / "a.txt").write_text("shared data")
    box = Sandbox(workspace, LIMITS, mode="namespaces", extra_ro_paths=[shared])
    r = box.run(f"cat {shared}/a.txt; echo x > {shared}/b.txt")
    assert r.stdout == "shared data" and "Read-only file system" in r.stderr
    assert not (shared / "b.txt").exists()


@needs_namespaces
def test_setup_failure_raises(ns_box):
    ns_box.plan = [*ns_box.plan, ("ro", "/no/such/source", "/x")]
    with pytest.raises(SandboxError, match="/no/such/source"):
        ns_box.run("true")


@pytest.mark.skipif(not is_host_root(), reason="only a parent that is the host's root hands the workspace to uid 65534")
def test_root_parent_runs_the_sandbox_as_nobody(box, workspace):
    assert workspace.stat().st_uid == 65534
    late = workspace / "added-later.txt"
    late.write_text("x")  # root's: the sandbox may not write it until adopted
    assert box.run("echo y >> added-later.txt").exit_code != 0
    box.adopt(late)
    assert box.run("echo y >> added-later.txt").exit_code == 0
    assert late.read_text() == "xy\n"
