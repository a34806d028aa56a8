"""`openclaw-rl experiment personalization` end to end on a tiny configuration: the real server,
training sessions over HTTP, probes at 0, 1 and 2 sessions, and the CSV / Markdown / PNG outputs."""

import csv
import json
import os
import re
import subprocess
import sys

import pytest

from slime_ext.simulate import ChatClient, LLMPersona, get_persona
from slime_ext.simulate.experiment import COLUMNS, tasks_for
from slime_ext.simulate.questions import correctness_tasks


def test_tiny_experiment_writes_csv_markdown_and_png_and_never_trains_on_probes(tmp_path):
    out = tmp_path / "results"
    r = subprocess.run(
        [sys.executable, "-m", "slime_ext.cli", "experiment", "personalization", "--model", "tiny",
         "--methods", "combine", "--personas", "student", "--seeds", "0", "--sessions", "2", "--probe-every", "1",
         "--heldout", "2", "--rounds", "1", "--max-tokens", "8", "--batch-size", "1", "--lora-rank", "4",
         "--lr", "1e-3", "--out", str(out),
         # the random tiny teacher follows no hint: serve's default (drop) would train none of these turns
         "--serve-args", "--unfollowed-hints train"],
        capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "2/2 sessions" in r.stderr  # the progress bar

    rows = list(csv.DictReader(open(out / "results.csv")))
    assert list(rows[0]) == COLUMNS
    assert [int(x["sessions"]) for x in rows] == [0, 1, 2]
    assert [int(x["interactions"]) for x in rows] == [0, 1, 2]  # rounds=1: one judged answer per session
    assert {(x["method"], x["persona"], x["seed"]) for x in rows} == {("combine", "student", "0")}
    for x in rows:
        assert 0.0 <= float(x["score_mean"]) <= 1.0 and int(x["probe_n"]) == 2
        assert 0.0 < float(x["distinct2"]) <= 1.0 and float(x["mean_words"]) >= 0
    # correctness at the first and the last probe; the hinted teacher's score at the first
    assert [x["correct"] != "" for x in rows] == [True, False, True]
    assert all(0.0 <= float(rows[i]["correct"]) <= 1.0 for i in (0, -1))
    assert 0.0 <= float(rows[0]["teacher_score"]) <= 1.0
    assert int(rows[0]["policy_version"]) == 0 and int(rows[-1]["policy_version"]) >= 1  # training happened

    png = (out / "results.png").read_bytes()
    assert len(png) > 1000 and png[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "results.md").read_text()
    assert "| combine | student |" in md and "first >= 0.8" in md and "stable >= 0.8 from" in md

    run_dir = out / "runs" / "combine-student-s0"
    records = json.loads(subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(run_dir),
                                         "--json"], capture_output=True, text=True, check=True).stdout)
    turns = [t for s in records["sessions"] for t in s["turns"]]
    probes = [t for t in turns if not t["main_line"]]
    # asked without the memory: three probes of two held-out tasks, two of the general questions, and the
    # hinted teacher; with it (on by default), the probes after the first again
    general = len(correctness_tasks())
    with_memory = [s for s in records["sessions"] if re.match(r"probe-\d+-m-", s["id"])]
    assert len(with_memory) == 2 * 2 + general
    assert 3 * 2 + 2 * general <= len(probes) - len(with_memory) <= 3 * 2 + 2 * general + 2
    assert all(t["trained_in_version"] is None and t["verdict"] is None for t in probes)
    assert any(t["trained_in_version"] is not None for t in turns if t["main_line"])


def test_tiny_experiment_with_an_llm_simulator_scores_through_it_and_never_leaks_its_key(tmp_path):
    from _persona_server import start_sim_server

    persona = LLMPersona("student", ChatClient("http://127.0.0.1:9"))
    tasks = tasks_for(persona, "train", 1, 0) + tasks_for(persona, "heldout", 2, 0)
    sim = start_sim_server("student", {persona.first_message(t): t for t in tasks})
    out = tmp_path / "results"
    try:
        r = subprocess.run(
            [sys.executable, "-m", "slime_ext.cli", "experiment", "personalization", "--model", "tiny",
             "--methods", "binary", "--personas", "student", "--seeds", "0", "--sessions", "1",
             "--heldout", "2", "--rounds", "1", "--max-tokens", "8", "--batch-size", "1", "--lora-rank", "4",
             "--simulator-url", f"http://127.0.0.1:{sim.server_port}/v1", "--simulator-model", "sim",
             "--out", str(out), "--serve-args", "--memory off"],  # one probe each time: the ratings are counted
            capture_output=True, text=True, timeout=240, env={**os.environ, "OPENCLAW_SIM_API_KEY": "sk-test-secret"})
    finally:
        sim.shutdown()
        sim.server_close()
    assert r.returncode == 0, r.stderr[-3000:]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [int(x["sessions"]) for x in rows] == [0, 1] and all(int(x["probe_n"]) == 2 for x in rows)
    ratings = [b for _, b in sim.requests if "Reply with one number" in b["messages"][-1]["content"]]
    replies = [b for _, b in sim.requests if "Reply with one number" not in b["messages"][-1]["content"]]
    # two probes of two answers, and the session's first answer (sessions.csv); one follow-up
    assert len(ratings) == 2 * 2 + 1 and len(replies) == 1
    assert all(h["Authorization"] == "Bearer sk-test-secret" and b["model"] == "sim" for h, b in sim.requests)

    scripted = get_persona("student")
    rated = [re.findall(r"<<<\n(.*?)\n>>>", b["messages"][-1]["content"], re.S) for b in ratings]
    rated = rated[:2] + rated[3:]  # in order: the first probe, the session's first answer, the last probe
    for row, pair in zip(rows, (rated[:2], rated[2:])):  # each probe's score is the mean of the simulator's ratings
        expected = sum(scripted.score(sim.tasks[q], a) for q, a in pair) / 2
        assert float(row["score_mean"]) == pytest.approx(expected, abs=1e-4)

    run_dir = out / "runs" / "binary-student-s0"
    records = json.loads(subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(run_dir),
                                         "--json"], capture_output=True, text=True, check=True).stdout)
    probe_answers = sorted(t["response_text"] for s in records["sessions"] for t in s["turns"]
                           if not t["main_line"] and "-c-" not in s["id"])  # not the general questions
    assert probe_answers == sorted(a for _, a in rated)  # the simulator rated exactly the served probe answers
    assert "sk-test-secret" not in r.stdout + r.stderr + (run_dir / "serve.log").read_text()


def memory_only_run(out, persona: str, heldout: int) -> dict:
    """``--methods none`` (the memory alone) for 3 sessions of ``persona``, probed at 0 and 3; its run's records."""
    r = subprocess.run(
        [sys.executable, "-m", "slime_ext.cli", "experiment", "personalization", "--model", "tiny",
         "--methods", "none", "--personas", persona, "--seeds", "0", "--sessions", "3", "--probe-every", "3",
         "--heldout", str(heldout), "--rounds", "1", "--max-tokens", "8", "--out", str(out), "--serve-args", "--memory on"],
        capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir",
                                      str(out / "runs" / f"none-{persona}-s0"), "--json"],
                                     capture_output=True, text=True, check=True).stdout)


def test_probes_ask_without_and_with_the_memory_and_each_sessions_first_answer_is_kept(tmp_path):
    """v3: the held-out probes carry `X-OpenClaw-RL-Memory: off` (what the weights learned) and, where the
    server's memory is on, run again with it (what the user gets); every training session's first answer is
    scored into sessions.csv, and results.md gives sessions to adaptation. `--methods none` (the memory alone)
    trains nothing, and the run does not wait for training."""
    out = tmp_path / "results"
    records = memory_only_run(out, "so", heldout=2)
    assert "so," in records["preferences"]["-"][0]["hint"].lower()  # the persona stated it (tiny never complies)
    probes = {s["id"]: s["turns"][0] for s in records["sessions"] if s["id"].startswith("probe-3-")}
    without = [t for k, t in probes.items() if not k.startswith("probe-3-m-")]
    with_memory = [t for k, t in probes.items() if k.startswith("probe-3-m-")]
    assert len(without) >= 2 and len(with_memory) >= 2  # the held-out tasks (and the general questions) both ways
    assert all(t["memory"] is None for t in without) and all(t["memory"] for t in with_memory)
    # the first probe (nothing stated yet) is asked once
    assert not any(s["id"].startswith("probe-0-m-") for s in records["sessions"])

    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [x["sessions"] for x in rows] == ["0", "3"] and rows[-1]["score_memory"] != ""
    assert rows[-1]["correct_memory"] != "" and rows[0]["score_memory"] == rows[0]["score_mean"]
    firsts = list(csv.DictReader(open(out / "sessions.csv")))
    assert [x["session"] for x in firsts] == ["1", "2", "3"] and all(x["score"] in ("0.0", "1.0") for x in firsts)
    main = sorted((s for s in records["sessions"] if s["id"].startswith("train-")), key=lambda s: int(s["id"].split("-")[2]))
    for x, session in zip(firsts, main):  # each row scores the session's first answer
        assert int(x["words"]) == len(session["turns"][0]["response_text"].split())
    assert main[1]["turns"][0]["memory"]  # the second session opened with what the first one stated
    assert "sessions to adaptation" in (out / "results.md").read_text()


def test_joint_persona_plays_the_three_roles_in_turn_against_one_server(tmp_path):
    """`--personas joint` (upstream's joint mode): one server, one user, whose sessions take the student, TA and
    teacher roles in turn; each session's first answer is scored by its own role, and the one memory holds what
    each role asked for."""
    out = tmp_path / "results"
    records = memory_only_run(out, "joint", heldout=3)
    main = sorted((s for s in records["sessions"] if s["id"].startswith("train-")), key=lambda s: int(s["id"].split("-")[2]))
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    asked = [tok.decode(s["turns"][0]["prompt_token_ids"]) for s in main]
    assert "can you do this one for my homework?" in asked[0]  # the student
    assert "I'm the TA" in asked[1] and "The correct answer is" in asked[1]  # the TA
    assert "Grade this answer" in asked[2] and "I'm the TA" not in asked[2]  # the teacher
    firsts = list(csv.DictReader(open(out / "sessions.csv")))
    assert [x["persona"] for x in firsts] == ["joint"] * 3
    # each scored by its role: the student's 5 checks, the TA's 4, the teacher's 5
    assert [round(float(x["score"]) * n, 6) % 1 for x, n in zip(firsts, (5, 4, 5))] == [0, 0, 0]
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [x["persona"] for x in rows] == ["joint", "joint"] and all(int(x["probe_n"]) == 3 for x in rows)
