"""The edges a new user meets first (issue 32): `records` without --run-dir, a failed start, a port in use, a
wrong flag, the run folder's own log, the libraries' noise and a short /healthz. Driven as a user drives the
program where practical: a real `openclaw-rl` process."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from slime_ext.launch import ServerProcess

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


# ---------------------------------------------------------------- the port
def test_a_port_in_use_is_one_line_before_the_model_loads(tmp_path, taken_port):
    """Was: the model loaded (4.4 to 5.6 s for smollm2-135m), then a 37-line traceback, exit 1, and a run folder
    with an empty records.sqlite left behind."""
    started = time.perf_counter()
    r = cli("serve", "--model", "smollm2-135m", "--port", str(taken_port), cwd=tmp_path)
    took = time.perf_counter() - started
    assert r.returncode == 2 and r.stdout == "", r.stderr
    assert r.stderr.splitlines() == [f"openclaw-rl serve: port {taken_port} on 127.0.0.1 is in use (another "
                                     "openclaw-rl serve, or another program, listens there): stop it, or choose a free "
                                     "port with --port N"]
    assert not (tmp_path / "runs").exists()  # nothing made: the default runs/<timestamp> went again
    print(f"port in use refused in {took:.2f} s")


def test_the_real_bind_reports_the_same_line_when_the_port_was_taken_after_the_check(taken_port):
    """The check binds and releases; another program may take the port before the server listens."""
    from aiohttp import web

    from slime_ext.api.guard import ConnectionGuard, ListenError, check_listen

    with pytest.raises(ListenError) as checked:
        check_listen("127.0.0.1", taken_port)

    async def listen():
        server = web.Server(lambda request: web.Response())
        return await ConnectionGuard().listen(server, "127.0.0.1", taken_port)

    with pytest.raises(ListenError) as listened:
        asyncio.run(listen())
    assert str(listened.value) == str(checked.value) and "\n" not in str(checked.value)
    check_listen("127.0.0.1", 0)  # a free one passes


# ---------------------------------------------------------------- a failed start
def failing_judge(tmp_path: Path) -> dict[str, str]:
    """A judge plugin that loads but fails to make its backend: the start fails after the run folder was made."""
    (tmp_path / "badjudge.py").write_text("def make(cfg):\n    raise RuntimeError('no backend today')\n")
    return {"PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}


def test_a_failed_start_leaves_no_run_folder_behind(tmp_path):
    """Was: runs/<timestamp> with an empty records.sqlite, which `records` would then call the newest run."""
    home = tmp_path / "home"
    home.mkdir()
    r = cli("serve", "--model", "tiny", "--port", "0", "--judge", "badjudge:make", cwd=home, env=failing_judge(tmp_path))
    assert r.returncode == 2 and "no backend today" in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert list(home.iterdir()) == []  # neither runs/<timestamp> nor runs/


def test_a_failed_start_keeps_a_run_folder_that_was_there(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "notes.txt").write_text("mine")
    r = cli("serve", "--model", "tiny", "--port", "0", "--run-dir", str(run), "--judge", "badjudge:make",
            env=failing_judge(tmp_path))
    assert r.returncode == 2 and (run / "notes.txt").read_text() == "mine"
    assert "no backend today" in (run / "serve.log").read_text()  # the log of a resumed run keeps the failure


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


# ---------------------------------------------------------------- the run folder's log, without noise
NOISE = ("Loading weights", "is_gradient_checkpointing", "FutureWarning", "generation flags are not valid",
         "leaked semaphore", "resource_tracker")


def test_serve_logs_to_its_run_folder_without_noise_or_secrets(tmp_path):
    """The server's and the trainer's lines in RUN_DIR/serve.log (owner-only), the same as on stderr; no tqdm bars,
    FutureWarning or leaked-semaphore warning (the trainer's bar made the semaphore); a key never."""
    key = "sekret-key-5678"
    srv = ServerProcess(tmp_path / "run", extra=["--method", "binary", "--api-key", key], log_path=tmp_path / "err.log")
    srv.start()
    try:
        deadline = time.time() + 120
        while "trainer: ready" not in srv.log_tail(100_000):
            assert time.time() < deadline and srv.proc.poll() is None, srv.log_tail()
            time.sleep(0.3)
        for auth in (key, "wrong-key"):
            req = urllib.request.Request(srv.url + "/chat/completions", headers={
                "Content-Type": "application/json", "Authorization": f"Bearer {auth}"},
                data=json.dumps({"model": "policy", "messages": [{"role": "user", "content": "hi"}],
                                 "max_tokens": 4}).encode())
            try:
                urllib.request.urlopen(req, timeout=60).read()
            except urllib.error.HTTPError as e:
                assert e.code == 401 and auth == "wrong-key"
    finally:
        srv.stop()
    time.sleep(1)  # the resource tracker (a process of its own) warned after the server had exited
    log = (tmp_path / "run" / "serve.log").read_text()
    stderr = (tmp_path / "err.log").read_text()
    assert stat.S_IMODE((tmp_path / "run" / "serve.log").stat().st_mode) == 0o600
    assert "serving tiny" in log and "trainer: ready" in log and "shutting down" in log
    assert "--api-key on the command line is visible" in log  # the warning, naming the flag
    assert key not in log and key not in stderr
    assert [n for n in NOISE if n in stderr + log] == [], stderr
    assert sorted(log.splitlines()) == sorted(stderr.splitlines())  # what stderr said, nothing else


def test_the_canary_generates_greedily_without_a_warning_about_the_models_sampling_flags():
    """smollm2-135m's generation_config.json says temperature 0.2, top_p 0.9; greedy decoding ignores them, and
    transformers warned "generation flags are not valid" on every canary check."""
    import logging

    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from slime_ext.models import resolve_model
    from slime_ext.trainers.canary import greedy

    model = AutoModelForCausalLM.from_pretrained(str(resolve_model("tiny")), dtype=torch.float32)
    model.generation_config.do_sample, model.generation_config.temperature = True, 0.2
    model.generation_config.top_p, model.generation_config.top_k = 0.9, 20
    said: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: said.append(record.getMessage())
    hf_logging.get_logger("transformers").addHandler(handler)
    hf_logging.warning_once.cache_clear()  # an earlier test may have had it said once already
    try:
        responses, _ = greedy(model, [[1, 2, 3]], 3, [0])
    finally:
        hf_logging.get_logger("transformers").removeHandler(handler)
    assert len(responses) == 1 and not [m for m in said if "generation flags" in m], said


def test_the_trainer_makes_its_lora_wrapper_without_a_future_warning():
    import warnings

    import torch
    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model
    from slime_ext.trainers.loop import TrainerConfig, wrap_lora

    model = AutoModelForCausalLM.from_pretrained(str(resolve_model("tiny")), dtype=torch.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrap_lora(model, TrainerConfig())
    assert [str(w.message) for w in caught if issubclass(w.category, FutureWarning)] == []


# ---------------------------------------------------------------- /healthz stays short
def test_healthz_counts_the_canary_facts_instead_of_listing_them(tmp_path):
    from slime_ext.trainers.process import CheckpointWatcher

    facts = [f"What is fact number {i}?" for i in range(44)]
    entry = {"version": 1, "accepted": True, "reasons": [], "at": 1.0, "seconds": 2.5,
             "before": {"nll": 1.2, "distinct2": 0.9}, "after": {"nll": 1.25, "distinct2": 0.9}}
    (tmp_path / "canary.json").write_text(json.dumps({"checks": 1, "refused": 0, "first": {"nll": 1.2},
                                                      "first_known": facts, "last": entry}))
    shown = CheckpointWatcher(None, tmp_path).status()["canary"]
    assert shown == {"checks": 1, "refused": 0, "first_recalled": 44,
                     "last": {"version": 1, "accepted": True, "reasons": [], "at": 1.0, "seconds": 2.5}}
    assert "first_known" in json.loads((tmp_path / "canary.json").read_text())  # the file keeps them


def test_a_flag_is_taken_only_as_spelled_in_full():
    """argparse's prefix matching made ``serve --lor 3`` a ``--lora-rank 3`` server on the default port."""
    r = subprocess.run([sys.executable, "-m", "slime_ext.cli", "serve", "--lor", "3", "--model", "tiny"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "unknown flag --lor;" in r.stderr
