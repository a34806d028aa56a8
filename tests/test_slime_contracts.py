"""Slime's own plugin contract tests (``tests/plugin_contracts/`` of a Slime checkout) against our
hooks, through their ``SLIME_CONTRACT_*_PATH`` variables. Runs when ``SLIME_DIR`` points at a Slime
checkout (v0.3.1 or later) and Slime's CPU test imports are installed
(``pip install -e '.[slime-contracts]'``); skipped, saying so, otherwise."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SLIME_DIR = os.environ.get("SLIME_DIR", "")
ROOT = Path(__file__).resolve().parent.parent
HOOKS = {
    "SLIME_CONTRACT_ROLLOUT_FUNCTION_PATH": "slime_ext.hooks.rollout.live_rollout",
    "SLIME_CONTRACT_CUSTOM_REWARD_POST_PROCESS_PATH": "slime_ext.hooks.reward.post_process_rewards",
    "SLIME_CONTRACT_CUSTOM_GENERATE_FUNCTION_PATH": "slime_ext.hooks.generate.generate",
    "SLIME_CONTRACT_DYNAMIC_SAMPLING_FILTER_PATH": "slime_ext.hooks.filters.drop_constant_groups",
}

missing = [m for m in ("httpx", "PIL", "pylatexenc") if importlib.util.find_spec(m) is None]
pytestmark = [
    pytest.mark.skipif(not SLIME_DIR or not (Path(SLIME_DIR) / "tests" / "plugin_contracts").is_dir(),
                       reason="SLIME_DIR is not set to a Slime checkout with tests/plugin_contracts/ "
                              "(git clone https://github.com/THUDM/slime; export SLIME_DIR=...)"),
    pytest.mark.skipif(bool(missing), reason=f"Slime's contract tests import {', '.join(missing)}: "
                                             "pip install -e '.[slime-contracts]'"),
]


def run_contracts(extra_env: dict[str, str]) -> subprocess.CompletedProcess:
    env = {**os.environ, **HOOKS, **extra_env, "PYTHONPATH": os.pathsep.join([SLIME_DIR, str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "pytest", "tests/plugin_contracts", "-q", "-p", "no:cacheprovider"],
                          cwd=SLIME_DIR, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("rm, group", [("slime_ext.hooks.reward.known_reward", False),
                                       ("slime_ext.hooks.reward.known_rewards", True)], ids=["rm", "group-rm"])
def test_slimes_plugin_contracts_pass_with_our_hooks(rm, group):
    extra = {"SLIME_CONTRACT_CUSTOM_RM_PATH": rm, **({"SLIME_CONTRACT_GROUP_RM": "1"} if group else {})}
    r = run_contracts(extra)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "failed" not in r.stdout
