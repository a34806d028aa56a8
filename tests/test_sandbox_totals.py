"""A sandbox run's totals (memory and processes of all its processes together, the workspace's size) and the loud
rlimits fallback (slime_ext.envs.sandbox_totals, sandbox.isolation_report, `env --require-isolation`).

Each bound is tested with cgroups (where this machine lets us make one per run) and with the watchdog that
replaces them (forced by replacing cgroup_support), in every sandbox mode that works here. Sizes are small:
4 x 300 MB of memory at most, 320 MB of writes at most.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from _fork_until_refused import fork_until_refused

from slime_ext.envs import Sandbox, SandboxError, SandboxLimits, fresh_workspace, isolation_status
from slime_ext.envs import sandbox as sandbox_mod
from slime_ext.envs.sandbox_totals import (
    MIB,
    CgroupSupport,
    WorkspaceWatch,
    cgroup_dir,
    cgroup_support,
    delegating_ancestor,
    disk_usage,
    parse_cgroup_mounts,
    parse_counters,
    parse_proc_cgroup,
    parse_stat,
    run_members,
)

MODE, WHY = isolation_status()
CGROUPS = cgroup_support()
ALL_MODES = [pytest.param("namespaces", marks=pytest.mark.skipif(MODE != "namespaces", reason=WHY)), "rlimits"]
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def workspace():
    with fresh_workspace("sandbox-totals-") as ws:
        yield ws


@pytest.fixture(params=["cgroup", "watchdog"])
def totals(request, monkeypatch):
    """How the run's totals are bounded: a cgroup per run (skipped where there is none), or the watchdog."""
    if request.param == "cgroup" and not CGROUPS.available:
        pytest.skip(f"no cgroups here: {CGROUPS.why}")
    if request.param == "watchdog":
        monkeypatch.setattr(sandbox_mod, "cgroup_support", lambda: CgroupSupport({}, "forced off by the test"))
    return request.param


def processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and marker.encode() in Path(f"/proc/{name}/cmdline").read_bytes():
                found.append(int(name))
        except OSError:
            pass
    return found


# ----------------------------------------------------------------------------- the bounds (every mode, both ways)
@pytest.mark.parametrize("mode", ALL_MODES)
def test_memory_of_the_whole_run_is_bounded(workspace, mode, totals):
    """4 processes of 300 MB each pass a per-process limit of 512 MB; the run as a whole must not."""
    hog = "import time; a = b'x' * (300 << 20); time.sleep(30)"
    box = Sandbox(workspace, SandboxLimits(memory_mb=512, wall_s=20), mode=mode)
    r = box.run(f"for i in 1 2 3 4; do python3 -c \"{hog}\" & done; wait")
    assert r.stopped_by == "memory_mb", r
    assert "memory_mb" in r.stop_reason and not r.timed_out
    assert r.wall_s < 15  # stopped, not left to the wall clock


@pytest.mark.parametrize("mode", ALL_MODES)
def test_process_count_of_the_whole_run_is_bounded(workspace, mode, totals):
    # the run holds its processes: it must be stopped, not left to the wall clock
    code = fork_until_refused(start=1, hold_s=30)
    limits = SandboxLimits(max_procs=12, wall_s=20)
    r = Sandbox(workspace, limits, mode=mode).run(["python3", "-c", code])
    assert r.stopped_by == "max_procs", r
    assert "max_procs" in r.stop_reason and not r.timed_out and r.wall_s < 15
    assert not r.stdout or int(r.stdout.split()[-1]) <= limits.max_procs


@pytest.mark.parametrize("mode", ALL_MODES)
def test_workspace_size_is_bounded(workspace, mode, totals):
    """Many files, each under file_size_mb, past workspace_mb together: stopped, and the disk got about the limit."""
    limits = SandboxLimits(workspace_mb=32, file_size_mb=64, wall_s=20)
    r = Sandbox(workspace, limits, mode=mode).run("for i in $(seq 1 20); do head -c 16000000 /dev/zero > f$i; done")
    assert r.stopped_by == "workspace_mb", r
    assert "workspace_mb=32" in r.stop_reason and r.exit_code is None
    used = disk_usage(str(workspace))[0]
    assert used < 3 * limits.workspace_mb * MIB, used / MIB  # 320 MB were asked for; typically 35-50 MB land


def test_one_file_is_capped_at_the_workspace_size(workspace):
    r = Sandbox(workspace, SandboxLimits(workspace_mb=8, file_size_mb=64)).run("head -c 20000000 /dev/zero > big")
    assert r.exit_code != 0
    assert (workspace / "big").stat().st_size <= 8 * MIB


def test_ordinary_runs_are_not_stopped(workspace):
    r = Sandbox(workspace, SandboxLimits(memory_mb=256, max_procs=16, workspace_mb=16)).run(
        "python3 -c 'print(sum(range(10**6)))' & head -c 1000000 /dev/zero > f; wait; ls")
    assert (r.exit_code, r.stopped_by, r.stop_reason) == (0, None, ""), r
    assert r.stdout.split() == ["499999500000", "f"]


@pytest.mark.skipif(not CGROUPS.available, reason=f"no cgroups here: {CGROUPS.why}")
def test_cgroup_kills_what_left_the_session_in_rlimits_mode(workspace):
    marker = f"{41 + uuid.uuid4().int % 1000 / 1000:.3f}"
    r = Sandbox(workspace, mode="rlimits").run(f"setsid sleep {marker} > /dev/null 2>&1 < /dev/null & echo ok")
    assert r.stdout == "ok\n"
    assert processes_with(f"sleep\0{marker}") == []


@pytest.mark.skipif(not CGROUPS.available, reason=f"no cgroups here: {CGROUPS.why}")
def test_run_cgroups_are_removed(workspace):
    box = Sandbox(workspace)
    box.run("true")
    box.run("sleep 5 &", timeout_s=1)
    for _, parent in CGROUPS.dirs.values():
        assert [n for n in os.listdir(parent) if os.path.isdir(os.path.join(parent, n))] == []  # no run-<n> left


# ----------------------------------------------------------------------------- the workspace watch (no sandbox)
def test_workspace_watch_stops_growth_only(tmp_path):
    (tmp_path / "old").write_bytes(b"x" * (6 * MIB))
    watch = WorkspaceWatch(str(tmp_path), limit_mb=4)  # already over: it may shrink, not grow
    assert watch.limit >= 6 * MIB and watch.check() is None
    (tmp_path / "old").unlink()
    watch.next_du = 0  # measure now
    assert watch.check() is None and watch.size < MIB
    (tmp_path / "new").write_bytes(b"y" * (7 * MIB))
    stop = watch.check()
    assert stop is not None and stop.limit == "workspace_mb" and "7 MB" in stop.reason


def test_disk_usage_counts_blocks_and_hard_links_once(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a").write_bytes(b"a" * MIB)
    os.link(tmp_path / "d" / "a", tmp_path / "b")
    (tmp_path / "link").symlink_to("/usr")  # not followed
    with open(tmp_path / "sparse", "wb") as f:
        f.truncate(512 * MIB)  # no blocks: nothing on disk
    used, complete = disk_usage(str(tmp_path))
    assert complete and MIB <= used < 2 * MIB


# ----------------------------------------------------------------------------- pure parsing
def test_parse_proc_cgroup_and_mounts():
    own = parse_proc_cgroup("9:name=systemd:/\n8:pids:/\n4:memory:/job/42\n2:cpu,cpuacct:/\n0::/user.slice/s.scope\n")
    assert own["memory"] == "/job/42" and own["pids"] == "/" and own["cpu"] == "/" and own[""] == "/user.slice/s.scope"
    mountinfo = (
        "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory\n"
        "31 25 0:27 / /sys/fs/cgroup/pids rw,relatime shared:10 - cgroup cgroup rw,pids\n"
        "32 25 0:28 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw\n"
        "40 25 0:29 /job /mnt/my\\040cg rw - cgroup cgroup rw,memory\n"
        "41 25 8:1 / / rw - ext4 /dev/vda rw\n")
    mounts = parse_cgroup_mounts(mountinfo)
    assert mounts == [("1", frozenset({"memory"}), "/sys/fs/cgroup/memory", "/"),
                      ("1", frozenset({"pids"}), "/sys/fs/cgroup/pids", "/"),
                      ("2", frozenset(), "/sys/fs/cgroup/unified", "/"),
                      ("1", frozenset({"memory"}), "/mnt/my cg", "/job")]
    assert cgroup_dir("/sys/fs/cgroup/memory", "/", "/job/42") == "/sys/fs/cgroup/memory/job/42"
    assert cgroup_dir("/sys/fs/cgroup/pids", "/", "/") == "/sys/fs/cgroup/pids"
    assert cgroup_dir("/mnt/my cg", "/job", "/job/42") == "/mnt/my cg/42"
    assert cgroup_dir("/mnt/my cg", "/job", "/other") is None  # the mount does not show it


def test_v2_runs_go_under_the_nearest_ancestor_that_delegates_memory_and_pids():
    tree = {"/sys/fs/cgroup": "cpu io memory pids", "/sys/fs/cgroup/user.slice": "memory pids",
            "/sys/fs/cgroup/user.slice/user@1000.service": "cpu memory pids",
            "/sys/fs/cgroup/user.slice/user@1000.service/app.slice": "memory pids",
            "/sys/fs/cgroup/user.slice/user@1000.service/app.slice/term.scope": "",  # ours: holds processes
            "/sys/fs/cgroup/system.slice": "cpu", "/sys/fs/cgroup/system.slice/docker.scope": ""}
    top = "/sys/fs/cgroup/user.slice/user@1000.service/app.slice/term.scope"
    found = delegating_ancestor("/sys/fs/cgroup", top, lambda d: tree.get(d, ""))
    assert found == "/sys/fs/cgroup/user.slice/user@1000.service/app.slice"
    assert delegating_ancestor("/sys/fs/cgroup", "/sys/fs/cgroup/system.slice/docker.scope",
                               lambda d: tree.get(d, "")) == "/sys/fs/cgroup"  # the root: exempt from the rule
    assert delegating_ancestor("/sys/fs/cgroup", "/sys/fs/cgroup/system.slice/docker.scope",
                               lambda d: "" if d == "/sys/fs/cgroup" else tree.get(d, "")) is None
    assert delegating_ancestor("/c", "/c", lambda d: "") is None  # a container's own root, nothing delegated


def test_parse_counters_and_stat():
    assert parse_counters("low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n")["oom_kill"] == 1
    assert parse_counters("oom_kill_disable 0\nunder_oom 0\noom_kill 0\n")["oom_kill"] == 0
    line = "4242 (a b) c) S 7 4242 4242 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 3 0 1 2 3"
    assert parse_stat(line) == (4242, 7, 4242, 3)


def test_run_members_are_descendants_and_the_session():
    stats = [(1, 0, 1, 1), (10, 1, 10, 1), (11, 10, 10, 2), (12, 11, 10, 1), (13, 1, 10, 1), (20, 1, 20, 5)]
    assert run_members(stats, 10, by_session=False) == {10: 1, 11: 2, 12: 1}
    assert run_members(stats, 10, by_session=True) == {10: 1, 11: 2, 12: 1, 13: 1}  # 13 left the tree, not the session
    assert run_members(stats, 99, by_session=False) == {}


# ----------------------------------------------------------------------------- the loud fallback, and refusing it
@pytest.fixture
def forced_fallback(monkeypatch):
    """Namespaces off for this process (OPENCLAW_SANDBOX_NAMESPACES=0); the probe is redone before and after."""
    monkeypatch.setenv(sandbox_mod.NAMESPACES_ENV, "0")
    monkeypatch.delenv(sandbox_mod.REQUIRE_ENV, raising=False)
    isolation_status.cache_clear()
    yield
    isolation_status.cache_clear()


def test_fallback_is_logged_once_naming_what_is_lost(forced_fallback, caplog, workspace):
    with caplog.at_level(logging.WARNING, logger="slime_ext.envs.sandbox"):
        assert isolation_status()[0] == "rlimits"
        isolation_status()
        Sandbox(workspace)
    warnings = [r.getMessage() for r in caplog.records if "SANDBOX NOT ISOLATED" in r.getMessage()]
    assert len(warnings) == 1, warnings
    assert "OPENCLAW_SANDBOX_NAMESPACES=0" in warnings[0]  # why
    assert "read every host file" in warnings[0] and "loopback listeners" in warnings[0]  # what is lost
    assert "OPENCLAW_REQUIRE_ISOLATION=1" in warnings[0]  # how to refuse it
    report = sandbox_mod.isolation_report()
    assert report["mode"] == "rlimits" and report["isolated"] is False and report["warnings"]
    assert report["totals"] in ("cgroup", "watchdog") and report["totals_why"]


def test_required_isolation_refuses_rlimits_mode(forced_fallback, monkeypatch, workspace):
    assert Sandbox(workspace).mode == "rlimits"  # not required: runs, loudly
    with pytest.raises(SandboxError, match="namespace isolation is required.*OPENCLAW_SANDBOX_NAMESPACES=0"):
        Sandbox(workspace, require_isolation=True)
    monkeypatch.setenv(sandbox_mod.REQUIRE_ENV, "1")
    with pytest.raises(SandboxError, match="loopback listeners"):
        Sandbox(workspace)
    with pytest.raises(SandboxError, match="rlimits mode was asked for"):
        Sandbox(workspace, mode="rlimits")
    assert Sandbox(workspace, require_isolation=False).mode == "rlimits"  # an explicit False wins


def test_a_setting_can_require_isolation(forced_fallback):
    from slime_ext.envs import list_tasks, make_env

    for setting in ("terminal", "toolcall", "swe"):
        with make_env(setting, require_isolation=True) as env, pytest.raises(SandboxError, match="required"):
            env.reset(list_tasks(setting)[0])


def _env_cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != sandbox_mod.REQUIRE_ENV}
    full.update(OMP_NUM_THREADS="1", **env)
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", *args], capture_output=True, text=True,
                          cwd=REPO, env=full, timeout=120, input="```bash\nls\n```\n")


def test_env_commands_print_the_fallback_and_can_refuse_it():
    off = {sandbox_mod.NAMESPACES_ENV: "0"}
    r = _env_cli("list", "--setting", "terminal", **off)
    assert r.returncode == 0 and "term-count-lines" in r.stdout
    assert "SANDBOX NOT ISOLATED" in r.stderr and "sandbox: rlimits mode" in r.stderr, r.stderr
    assert "sandbox run totals:" in r.stderr
    r = _env_cli("play", "--setting", "terminal", "--task", "term-count-lines", "--require-isolation", **off)
    assert r.returncode == 2 and "namespace isolation is required" in r.stderr and "Traceback" not in r.stderr
    assert "reward:" not in r.stdout
    r = _env_cli("play", "--setting", "terminal", "--task", "term-count-lines", **off,
                 **{sandbox_mod.REQUIRE_ENV: "1"})
    assert r.returncode == 2 and "namespace isolation is required" in r.stderr
    if MODE == "namespaces":
        r = _env_cli("play", "--setting", "terminal", "--task", "term-count-lines", "--require-isolation")
        assert r.returncode == 0 and "reward:" in r.stdout and "NOT ISOLATED" not in r.stderr, r.stderr
        assert "sandbox: namespaces mode" in r.stderr
