"""Shared fixtures: a real `openclaw-rl serve` process on a free port, driven over HTTP.

Servers here run with ``--method none`` unless a test asks for learning (``extra=["--method",
"binary", ...]``; the last flag wins): serving tests should not have a trainer swapping weights
under them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slime_ext.envs.loader import load_settings
from slime_ext.launch import ServerProcess, free_port  # noqa: F401  (re-exported for tests)

# tests never reach the Hugging Face hub (a hub id resolves from a cache a test builds: test_hub_models.py)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# the built-in settings' folders go on the Python path, so their tests import `terminal`, `swe`, ... directly
load_settings()

SERVING_ONLY = ["--method", "none"]


def require_chromium() -> str:
    """The Chromium the GUI setting drives; skips the test naming why when there is none, unless
    OPENCLAW_RL_REQUIRE_BROWSER=1 (CI sets it after installing one), where a missing browser fails it."""
    from slime_ext.envs.browser import BrowserError, find_chromium

    try:
        return find_chromium()
    except BrowserError as e:
        if os.environ.get("OPENCLAW_RL_REQUIRE_BROWSER") == "1":
            pytest.fail(f"OPENCLAW_RL_REQUIRE_BROWSER=1 but {e}")
        pytest.skip(f"the GUI setting needs Chromium: {e}")


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory):
    """One tiny-model server shared by a test module."""
    srv = ServerProcess(tmp_path_factory.mktemp("run") / "run", extra=SERVING_ONLY).start()
    yield srv
    srv.stop()


@pytest.fixture
def make_server(tmp_path):
    """Start servers with custom arguments; all are stopped at the end of the test."""
    started: list[ServerProcess] = []

    def make(model: str = "tiny", extra: list[str] | None = None, run_dir: Path | None = None, env: dict | None = None):
        srv = ServerProcess(run_dir or tmp_path / f"run{len(started)}", model, [*SERVING_ONLY, *(extra or [])], env)
        started.append(srv)
        return srv.start()

    yield make
    for s in started:
        s.stop()
