"""The edges a new user meets first (issue 32): `records` without --run-dir, a failed start, a port in use, a
wrong flag, the run folder's own log, the libraries' noise and a short /healthz. Driven as a user drives the
program where practical: a real `openclaw-rl` process."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None, env=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})


@pytest.fixture
def taken_port():
    """A port another program listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


# ---------------------------------------------------------------- flags
@pytest.mark.parametrize("args, said", [
    (["serve", "--lora-rnk", "8"], "openclaw-rl serve: unknown flag --lora-rnk; did you mean --lora-rank?"),
    (["serve", "--batch-size=4", "--metod", "binary"], "openclaw-rl serve: unknown flag --metod; did you mean --method?"),
    (["records", "--jsn"], "openclaw-rl records: unknown flag --jsn; did you mean --json?"),
    (["export", "--run-dir", "r", "--format", "peft", "--out", "o", "--verison", "2"],
     "openclaw-rl export: unknown flag --verison; did you mean --version?"),
    (["env", "list", "--settng", "terminal"],  # named before the --setting it left missing
     "openclaw-rl env list: unknown flag --settng; did you mean --setting?"),
    (["memory", "list", "--run-dir", "r", "--usr", "x"], "openclaw-rl memory: unknown flag --usr; did you mean --user?"),
])
def test_an_unknown_flag_is_named_by_its_subcommand_with_close_matches(args, said):
    """Was: the top-level usage and `openclaw-rl: error: unrecognized arguments: --lora-rnk 8`."""
    r = cli(*args, timeout=60)
    assert r.returncode == 2 and r.stderr.splitlines() == [said], r.stderr


def test_an_error_of_serve_does_not_scroll_away_under_its_usage():
    r = cli("serve", "--method", "binry", timeout=60)
    assert r.returncode == 2 and len(r.stderr.splitlines()) == 2, r.stderr
    assert "--help lists its flags" in r.stderr and "invalid choice: 'binry'" in r.stderr


# ---------------------------------------------------------------- records finds the newest run
def add_turn(run_dir: Path, text: str, at: float) -> None:
    from slime_ext.store import Store
    from slime_ext.types import Turn

    store = Store(run_dir)
    sid = f"s-{run_dir.name}"
    store.create_session(sid, None, "inferred", now=at)
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{run_dir.name}",
                           prompt_token_ids=[1], response_token_ids=[2], response_logprobs=[-0.1],
                           response_text=text, policy_version=0, policy_version_end=0, finish_reason="stop",
                           messages=[{"role": "user", "content": "hi"}], created_at=at))
    store.close()


def test_records_reads_the_newest_run_with_turns_and_says_which(tmp_path):
    from slime_ext.store import Store, newest_run_with_turns

    runs = tmp_path / "runs"
    add_turn(runs / "20260101-000000", "older answer", at=1000.0)
    add_turn(runs / "20260101-000100", "newer answer", at=2000.0)
    Store(runs / "20260102-000000").close()  # newer, but nothing was said there
    (runs / "20260103-000000").mkdir()  # not a run
    assert newest_run_with_turns(runs) == runs / "20260101-000100"
    assert newest_run_with_turns(tmp_path / "none") is None

    r = cli("records", cwd=tmp_path)
    assert r.returncode == 0 and "newer answer" in r.stdout and "older answer" not in r.stdout, r.stderr
    assert r.stderr == (f"openclaw-rl records: {Path('runs') / '20260101-000100'} (the newest run with turns under "
                        "runs/; --run-dir DIR for another)\n")
    assert json.loads(cli("records", "--json", cwd=tmp_path).stdout)["sessions"][0]["turns"][0]["response_text"] == \
        "newer answer"


def test_records_without_a_run_says_where_it_looked(tmp_path):
    r = cli("records", cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "no run with turns under runs/" in r.stderr
    assert "--run-dir" in r.stderr and "Traceback" not in r.stderr
