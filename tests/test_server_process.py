"""``slime_ext.launch.ServerProcess``, what tests and experiments drive the server with: a server
outlives neither a second start nor the process that started it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from slime_ext.launch import ServerProcess

STARTER = textwrap.dedent("""
    import sys, time
    from slime_ext.launch import ServerProcess
    srv = ServerProcess(sys.argv[1], extra=["--method", "none"]).start()
    print(srv.pid, flush=True)
    time.sleep(600)
""")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.skipif(sys.platform != "linux", reason="the parent-death signal (PR_SET_PDEATHSIG) is Linux only")
def test_a_server_goes_when_the_process_that_started_it_is_killed(tmp_path):
    starter = subprocess.Popen([sys.executable, "-c", STARTER, str(tmp_path / "run")], stdout=subprocess.PIPE, text=True)
    try:
        server = int(starter.stdout.readline())
        assert alive(server)
        starter.send_signal(signal.SIGKILL)  # no cleanup runs in the starter
        starter.wait(10)
        deadline = time.time() + 60
        while alive(server) and time.time() < deadline:
            time.sleep(0.2)
        assert not alive(server), "the server outlived the process that started it"
    finally:
        starter.kill()


def test_starting_a_started_server_is_refused(tmp_path):
    with ServerProcess(tmp_path / "run", extra=["--method", "none"]) as srv:
        first = srv.pid
        with pytest.raises(RuntimeError, match="already started"):
            srv.start()
        assert srv.pid == first and srv.health()["status"] == "ok"
