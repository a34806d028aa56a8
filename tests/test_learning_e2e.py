"""Serve with --method binary on tiny: judged feedback trains a new version that gets served."""

import csv
import json
import time
import urllib.request


def chat(srv, messages, seed, full=False):
    data = srv.chat(messages, seed=seed)
    return data if full else data["choices"][0]["message"]["content"]


def wait(pred, timeout=180):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError("timed out")


def test_feedback_is_judged_trained_and_swapped_in_and_a_restart_resumes(make_server, tmp_path):
    run_dir = tmp_path / "learn"
    args = ["--method", "binary", "--batch-size", "2", "--lora-rank", "4", "--lr", "1e-3", "--status-interval-s", "0.5"]
    srv = make_server(extra=args, run_dir=run_dir)
    for i, feedback in enumerate(["Thanks, perfect!", "No, that's wrong.", "Great, thank you!", "Try again, too long."]):
        u = {"role": "user", "content": f"question {i}"}
        reply = chat(srv, [u], seed=i)
        chat(srv, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=100 + i)
    wait(lambda: srv.health()["policy_version"] >= 2)
    turns = [t for s in srv.records()["sessions"] for t in s["turns"]]
    trained = [t for t in turns if t["trained_in_version"] is not None]
    assert len(trained) == 4 and {t["verdict"] for t in trained} == {1, -1}
    assert sorted({t["trained_in_version"] for t in trained}) == [1, 2]
    health = srv.health()
    assert health["trained_turns"] == 4 and health["judged_turns"] == 4 and health["dropped_turns"] == 0
    assert health["waiting_to_train"] == 0 and health["training"]["swaps"] >= 1
    assert health["training"]["step_s"] > 0 and health["training"]["turns"] == 2
    # every step's scalars are on disk (CSV here: tensorboard is not installed in the test venv)
    rows = list(csv.DictReader(open(run_dir / "scalars" / "scalars.csv")))
    assert {(r["version"], r["tag"]) for r in rows} >= {("1", "train/loss"), ("2", "train/loss"), ("2", "train/clip_fraction")}
    with urllib.request.urlopen(srv.base + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert "openclaw_trained_turns 4" in metrics and "openclaw_train_step_seconds" in metrics
    assert "trainer: version 2: 2 turns" in srv.log_path.read_text()  # one log line per training step
    # the status line, logged when it changes (at its next tick, every 0.5 s here)
    status = wait(lambda: [ln for ln in srv.log_path.read_text().splitlines() if "status: v2 |" in ln], timeout=30)
    assert "trained 4" in status[-1] and "waiting 0" in status[-1]
    # a request now is served by the trained policy and records it
    served = chat(srv, [{"role": "user", "content": "after training"}], seed=7, full=True)
    (turn,) = [t for s in srv.records()["sessions"] for t in s["turns"] if t["request_id"] == served["id"]]
    assert turn["policy_version"] == 2
    srv.kill9()
    again = make_server(extra=args, run_dir=run_dir)
    assert again.health()["policy_version"] == 2  # the latest checkpoint is served after the restart
    after = [t for s in again.records()["sessions"] for t in s["turns"]]
    assert sum(t["trained_in_version"] is not None for t in after) == 4  # nothing retrained or lost


def test_kill_mid_run_then_restart_trains_every_turn_exactly_once(make_server, tmp_path):
    """kill -9 while judged turns still wait for training; the restarted server finishes them.

    On smollm2-135m a training step takes seconds, so the kill lands mid-run; the old trainer
    finishes its step and exits, and the new one waits for it (the run directory's trainer lock).
    """
    run_dir = tmp_path / "crash"
    # --no-canary: this test counts turns, and a refused version drops its turns (at lr 1e-3 on answers
    # sampled at smollm2's 0.2, trained at 0.2, the canary refused one: "EOS rate fell 0.83 -> 0.50")
    args = ["--method", "binary", "--batch-size", "2", "--lora-rank", "4", "--lr", "1e-3", "--max-staleness", "100",
            "--no-canary"]
    srv = make_server("smollm2-135m", extra=args, run_dir=run_dir)
    feedback = ["Thanks!", "No, wrong.", "Perfect, thank you.", "That's not what I asked."]
    for i in range(12):
        u = {"role": "user", "content": f"crash question {i}"}
        reply = chat(srv, [u], seed=i)
        chat(srv, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback[i % 4]}], seed=100 + i)
    wait(lambda: srv.health()["policy_version"] >= 1)
    before = srv.health()
    srv.kill9()
    assert before["trained_turns"] < 12  # killed mid-run: turns were still waiting
    again = make_server("smollm2-135m", extra=args, run_dir=run_dir)
    wait(lambda: again.health()["trained_turns"] == 12, timeout=240)
    turns = {(s["id"], t["index"]): t for s in again.records()["sessions"] for t in s["turns"]}
    assert len(turns) == 24  # every recorded turn survived the crash
    judged = {k: t for k, t in turns.items() if t["verdict"] is not None}
    assert len(judged) == 12 and all(t["trained_in_version"] is not None for t in judged.values())
    # each checkpoint lists the turns it trained on: no turn in two versions, and the store agrees
    seen: dict[tuple[str, int], int] = {}
    for state in sorted((run_dir / "checkpoints").glob("v*/trainer_state.json")):
        data = json.loads(state.read_text())
        for sid, idx in data["turns"]:
            assert (sid, idx) not in seen, f"turn {sid}/{idx} trained in versions {seen[(sid, idx)]} and {data['version']}"
            seen[(sid, idx)] = data["version"]
    assert seen == {k: t["trained_in_version"] for k, t in judged.items()}
    assert max(seen.values()) == 6
    # the server swaps the last checkpoint in after the trainer has marked its turns: served a moment later
    wait(lambda: again.health()["policy_version"] == 6, timeout=30)
