"""Run `openclaw-rl serve` as a subprocess and wait until it answers, and a command on a pseudo-terminal
(``Terminal``: `openclaw-rl chat` as a person types into it): for tests, benchmarks and experiment harnesses that
drive the program the way a user does."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    """`python -m slime_ext.cli serve` on a free port; ``url`` is the /v1 base URL. ``open_files``:
    the server's RLIMIT_NOFILE (soft and hard), to test what happens at the descriptor limit."""

    def __init__(self, run_dir: str | Path, model: str = "tiny", extra: list[str] | None = None,
                 env: dict[str, str] | None = None, port: int | None = None, log_path: str | Path | None = None,
                 open_files: int | None = None):
        self.run_dir = Path(run_dir)
        self.model = model
        self.extra = list(extra or [])
        self.env = {**os.environ, **(env or {})}
        self.port = port or free_port()
        self.log_path = Path(log_path) if log_path else self.run_dir.parent / f"serve-{self.port}.log"
        self.proc: subprocess.Popen | None = None
        self.startup_s = float("nan")
        self.open_files = open_files
        self._log = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return self.base + "/v1"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def start(self, timeout: float = 300.0) -> ServerProcess:
        if self.proc is not None and self.proc.poll() is None:  # a second process would be left running
            raise RuntimeError(f"the server on port {self.port} is already started")
        cmd = [sys.executable, "-m", "slime_ext.cli", "serve", "--model", self.model, "--run-dir", str(self.run_dir),
               "--port", str(self.port), *self.extra]
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                                     preexec_fn=self._child_setup)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.health()
                self.startup_s = time.perf_counter() - t0
                return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"server did not come up in {timeout} s:\n{self.log_tail()}")

    def _child_setup(self) -> None:
        """In the server's process before it runs: it gets SIGTERM (and shuts down) when the process
        that started it dies, so a killed test run or experiment leaves no server behind (Linux);
        and ``open_files`` when set."""
        if sys.platform == "linux":
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if self.open_files:
            import resource

            resource.setrlimit(resource.RLIMIT_NOFILE, (self.open_files, self.open_files))

    def health(self, key: str | None = None) -> dict[str, Any]:
        """``GET /healthz``, with ``key`` (an API key) to see what only a key shows (per-user figures)."""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with urllib.request.urlopen(urllib.request.Request(self.base + "/healthz", headers=headers), timeout=5) as r:
            return json.loads(r.read())

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int = 6, timeout: float = 120.0,
             **body: Any) -> dict[str, Any]:
        """One non-streamed chat completion (``body``: more request fields, e.g. ``seed``); the response
        JSON. Raises ``urllib.error.HTTPError`` on an error status."""
        data = json.dumps({"model": "m", "messages": messages, "max_tokens": max_tokens, **body}).encode()
        req = urllib.request.Request(self.url + "/chat/completions", data=data,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

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
        if self._log:
            self._log.close()
            self._log = None

    def records(self) -> dict[str, Any]:
        out = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(self.run_dir), "--json"],
                             capture_output=True, text=True, check=True, env=self.env)
        return json.loads(out.stdout)

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


async def sse_chunks(resp) -> Any:
    """Yield the JSON chunks of an OpenAI-style SSE response (an aiohttp response), then ``None``
    for ``data: [DONE]``; lines that are not ``data:`` lines are skipped."""
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        payload = line[5:].strip()
        if payload == b"[DONE]":
            yield None
            return
        yield json.loads(payload)


class Terminal:
    """A command on a pseudo-terminal (Linux, macOS): type lines into it, wait for what it prints."""

    def __init__(self, argv: list[str]) -> None:
        import pty

        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the command, with the terminal as its stdin, stdout and stderr
            os.execv(argv[0], argv)
        self.seen = ""  # what it printed since the last match
        self.transcript = ""  # everything it printed

    def _read(self, wait_s: float) -> None:
        if select.select([self.fd], [], [], wait_s)[0]:
            try:
                text = os.read(self.fd, 65536).decode("utf-8", "replace")
            except OSError:  # the command exited and the terminal closed
                return
            self.seen, self.transcript = self.seen + text, self.transcript + text

    def expect(self, pattern: str | re.Pattern, timeout: float = 120.0) -> re.Match:
        """The first match of ``pattern`` (a literal string or a regex) in what it printed since the last one."""
        regex = re.compile(re.escape(pattern)) if isinstance(pattern, str) else pattern
        deadline = time.time() + timeout
        while (found := regex.search(self.seen)) is None:
            if time.time() > deadline:
                raise AssertionError(f"waited {timeout} s for {regex.pattern!r}; the terminal shows:\n{self.seen}")
            self._read(0.5)
        self.seen = self.seen[found.end():]
        return found

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def exit_code(self, timeout: float = 30.0) -> int:
        """Wait for the command to exit; its exit code."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self._read(0)
                return os.waitstatus_to_exitcode(status)
            self._read(0.2)
        raise AssertionError(f"the command did not exit in {timeout} s; it shows:\n{self.seen}")
