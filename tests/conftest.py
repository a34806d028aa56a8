"""Shared fixtures: a real `openclaw-rl serve` process on a free port, driven over HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`openclaw-rl serve` in a subprocess; `url` is the /v1 base URL."""

    def __init__(self, run_dir: Path, model: str = "tiny", extra: list[str] | None = None, env: dict | None = None):
        self.run_dir = Path(run_dir)
        self.model = model
        self.extra = extra or []
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.log_path = self.run_dir.parent / f"serve-{self.port}.log"

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    def start(self, timeout: float = 180.0) -> "ServerProcess":
        cmd = [sys.executable, "-m", "slime_ext.cli", "serve", "--model", self.model, "--run-dir", str(self.run_dir),
               "--port", str(self.port), *self.extra]
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=self.env, cwd=ROOT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_path.read_text()[-3000:]}")
            try:
                self.health()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"server did not come up in {timeout} s:\n{self.log_path.read_text()[-3000:]}")

    def health(self) -> dict:
        with urllib.request.urlopen(self.base + "/healthz", timeout=5) as r:
            return json.loads(r.read())

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        if getattr(self, "log", None):
            self.log.close()

    def records(self) -> dict:
        out = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(self.run_dir), "--json"],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        return json.loads(out.stdout)


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    """One tiny-model server shared by a test module."""
    srv = ServerProcess(tmp_path_factory.mktemp("run") / "run").start()
    yield srv
    srv.stop()


@pytest.fixture
def make_server(tmp_path):
    """Start servers with custom arguments; all are stopped at the end of the test."""
    started: list[ServerProcess] = []

    def make(model: str = "tiny", extra: list[str] | None = None, run_dir: Path | None = None, env: dict | None = None):
        srv = ServerProcess(run_dir or tmp_path / f"run{len(started)}", model, extra, env).start()
        started.append(srv)
        return srv

    yield make
    for s in started:
        s.stop()
