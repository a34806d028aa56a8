"""The personalization experiment: does online learning from a simulated user's feedback move the
model toward that user's hidden preference?

For each (method, persona, seed), ``run`` starts the real server (``openclaw-rl serve --method M
--judge heuristic``) in its own run directory and drives it over HTTP exactly as a user would:

* a **training session** is a fresh ``X-Session-Id``; the persona's first message for a train task,
  the model's answer, then up to ``rounds`` follow-ups (``persona.reply``, sent with the history;
  each follow-up is the next state that judges the previous answer; after the persona's thanks the
  session ends; the answer to a session's last message is cut to a few tokens: nothing judges
  it). ``interactions`` counts the answers the persona replied to (each one judged turn) so far.
  A session starts once the previous one is judged (a user does not type that fast; with the
  memory on, what they said is then in it). Each session's **first answer**, scored by the persona,
  is what the user experiences: ``sessions.csv``, and sessions to adaptation (``adaptation.py``).
* a **probe** runs at 0 sessions (the base model) and after every ``probe_every`` sessions: first
  wait until the trainer is idle (nothing left to judge, fewer than ``batch_size`` judged turns
  waiting, and the served policy version steady for a second; bounded), then ask the first message
  of every held-out task as a side turn (``X-Turn-Type: side``: never judged or trained on) at
  temperature 0, all at once (the engine batches them), **without the preference memory**
  (``X-OpenClaw-RL-Memory: off``: what the weights learned), and score the answers with
  ``persona.score``; where the server's memory is on, the same again with it (``score_memory``,
  ``correct_memory``); at the first and the last probe the held-out general questions
  (``questions.CORRECTNESS_QUESTIONS``) give the fraction answered correctly; distinct-2 and words per answer catch a collapsing policy. At 0
  sessions the hinted teacher is probed too (``teacher_compliance``): what OPD can teach at most.
  One row per probe.

The persona is scripted (``personas.py``: deterministic checks, corrections and partial-credit
scores) unless ``--simulator-url`` names an OpenAI-compatible endpoint, which then plays it
(``llm_persona.py``: its replies are the follow-ups, its ratings the probe scores). The server's
judge stays ``heuristic`` unless ``--serve-args`` picks another (``--judge openai ...``).

A request that fails (HTTP 5xx, connection error, timeout) is retried a few times; failures are
counted in ``failed_requests`` and never abort the run (a failed training session is abandoned,
a failed probe question is left out of ``probe_n``).

``--jobs N`` runs N (method, persona, seed) runs at once, each server on ``cores // N`` threads.

Outputs (``write_outputs``): ``results.csv`` (``COLUMNS``), ``sessions.csv`` (``SESSION_COLUMNS``),
``results.md`` (a table per method and persona, then sessions to adaptation) and ``results.png`` (score vs interactions: one line per method, mean over seeds with
the min-max band shaded, the base model dashed; one subplot per persona).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import shlex
import shutil
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from slime_ext.launch import ServerProcess
from slime_ext.simulate.adaptation import adaptation_table
from slime_ext.simulate.client import ChatClient
from slime_ext.simulate.llm_persona import LLMPersona
from slime_ext.simulate.personas import (JOINT_PERSONAS, PERSONAS, JointPersona, Persona, RoleTask, get_persona,
                                         role_tasks)
from slime_ext.simulate.questions import correctness_tasks, preference_tasks
from slime_ext.simulate.tasks import grading_tasks, math_tasks
from slime_ext.trainers.canary import distinct_n
from slime_ext.trainers.canary_data import holds_key

COLUMNS = ["method", "persona", "seed", "sessions", "interactions", "policy_version", "score_mean", "score_std",
           "probe_n", "correct", "distinct2", "mean_words", "teacher_score", "wall_s", "failed_requests",
           "score_memory", "correct_memory"]
SESSION_COLUMNS = ["method", "persona", "seed", "session", "score", "words"]  # each training session's first answer
TARGET = 0.8  # the score whose first crossing the Markdown table reports
STABLE_POINTS = 3  # consecutive probe points at or above TARGET: a stable effect (upstream's metric)


def tasks_for(persona: Persona | JointPersona | LLMPersona, split: str, n: int, seed: int) -> list:
    """The persona's tasks: math problems, grading requests or general questions; a joint persona's roles' in turn."""
    if isinstance(persona, JointPersona):
        return role_tasks(persona.roles, lambda role, k: tasks_for(role, split, k, seed), n)
    if persona.task_kind == "question":
        return preference_tasks(split, n, seed)
    return (math_tasks if persona.task_kind == "math" else grading_tasks)(split, n, seed)


def wait_idle(srv: ServerProcess, batch_size: float, timeout_s: float = 300.0, steady_s: float = 1.0) -> dict[str, Any]:
    """Wait (at most ``timeout_s``) until nothing is left to judge, fewer than ``batch_size`` judged
    turns wait for training, and the served policy version has not changed for ``steady_s``."""
    deadline = time.time() + timeout_s
    last_version, since = None, time.time()
    health: dict[str, Any] = {}
    while time.time() < deadline:
        try:
            health = srv.health()
        except OSError:
            time.sleep(0.2)
            continue
        version = health.get("policy_version")
        if version != last_version:
            last_version, since = version, time.time()
        judging = health.get("turns_with_next_state", 0) - health.get("judged_turns", 0)
        if judging <= 0 and health.get("waiting_to_train", 0) < batch_size and time.time() - since >= steady_s:
            return health
        time.sleep(0.2)
    return health


class Progress:
    """One text progress bar per run on stderr: sessions done / total, last probe score, elapsed."""

    def __init__(self, label: str, total: int, stream=None, width: int = 24):
        self.label, self.total, self.width = label, max(total, 1), width
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.t0 = time.time()
        self.done, self.score = 0, None

    def update(self, done: int | None = None, score: float | None = None, final: bool = False) -> None:
        if done is not None:
            self.done = done
        if score is not None:
            self.score = score
        filled = int(self.width * self.done / self.total)
        score = "-" if self.score is None else f"{self.score:.3f}"
        line = (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} sessions "
                f"| probe {score} | {time.time() - self.t0:.0f}s")
        if self.tty:
            self.stream.write("\r" + line + ("\n" if final else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _probe_answers(client: ChatClient, messages: list[list[dict]], tag: str, jobs: int = 8,
                   memory: str = "on") -> list[str | None]:
    """Greedy answers to ``messages`` (one conversation each) as side turns, sent concurrently so
    the engine batches them; ``memory`` "off" asks without the preference memory (what the weights do)."""
    def ask(i: int) -> str | None:
        headers = {"X-Session-Id": f"probe-{tag}-{i}-{uuid.uuid4().hex[:8]}", "X-Turn-Type": "side",
                   "X-OpenClaw-RL-Memory": memory}
        return client.chat(messages[i], headers, temperature=0.0)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(ask, range(len(messages))))


def distinct_2(texts: list[str]) -> float:
    """Distinct bigrams over all bigrams of ``texts`` (words, lowercased; the canary's ``distinct_n``
    over words instead of tokens); 1.0 without bigrams."""
    return distinct_n([t.lower().split() for t in texts], 2)


def teacher_compliance(client: ChatClient, p: Persona, tasks: list, base: list[str | None]) -> float:
    """How often the hinted teacher satisfies the persona on ``tasks``: each base answer that fails
    gets the persona's correction, the hint the judge reads from it is appended as the teacher
    sees it (``teacher.teacher_messages``), and the served base model answers greedily. Answers
    that already pass count as passing (their turn has no hint)."""
    from slime_ext.judge.heuristic import heuristic_hint
    from slime_ext.learning.teacher import teacher_messages

    asks, idx = [], []
    for i, (task, answer) in enumerate(zip(tasks, base)):
        if answer is None or not p.failed(task, answer):
            continue
        hint = heuristic_hint(p.reply(task, answer), "user")
        if hint:
            asks.append(teacher_messages([{"role": "user", "content": p.first_message(task)}], hint))
            idx.append(i)
    scores = {i: p.score(task, a) for i, (task, a) in enumerate(zip(tasks, base)) if a is not None}
    for i, text in zip(idx, _probe_answers(client, asks, "teacher")):
        if text is not None:
            scores[i] = p.score(tasks[i], text)
    return statistics.fmean(scores.values()) if scores else float("nan")


def probe_row(client: ChatClient, p: Persona | LLMPersona, tasks: list, tag: str,
              correctness: bool = True, memory: str = "on") -> tuple[dict[str, Any], list]:
    """One probe: the persona's score of greedy answers to the held-out ``tasks``, distinct-2 and
    mean words of those answers, and (``correctness``) the fraction of the held-out general
    questions answered correctly; ``memory`` "off": asked without the preference memory."""
    answers = _probe_answers(client, [[{"role": "user", "content": p.first_message(t)}] for t in tasks], tag,
                             memory=memory)
    scores = [p.score(t, a) for t, a in zip(tasks, answers) if a is not None]
    general = correctness_tasks() if correctness else []
    replies = _probe_answers(client, [[{"role": "user", "content": q.prompt}] for q in general], tag + "-c",
                             memory=memory)
    correct = [holds_key(q.keys, a) for q, a in zip(general, replies) if a is not None]
    texts = [a for a in answers if a is not None]
    return {"score_mean": round(statistics.fmean(scores), 4) if scores else float("nan"),
            "score_std": round(statistics.pstdev(scores), 4) if scores else float("nan"),
            "probe_n": len(scores), "correct": round(statistics.fmean(correct), 4) if correct else "",  # "": not measured
            "distinct2": round(distinct_2(texts), 4),
            "mean_words": round(statistics.fmean(len(a.split()) for a in texts), 2) if texts else float("nan")}, answers


def _session(client: ChatClient, p: Persona | LLMPersona, task, headers: dict[str, str], rounds: int,
             seed: int) -> tuple[int, str | None]:
    """One training session; returns how many answers the persona replied to (judged turns) and the session's
    first answer (what the user got before saying anything about it; None when it failed)."""
    messages = [{"role": "user", "content": p.first_message(task)}]
    judged, first = 0, None
    for r in range(rounds + 1):
        end = r == rounds or (r > 0 and messages[-1]["content"] == p.thanks)
        # the answer to the session's last message is never judged: a few tokens keep the run short
        answer = client.chat(messages, headers, seed=seed, **({"max_tokens": 8} if end else {}))
        first = answer if r == 0 else first
        if answer is None or end:
            break
        follow_up = p.reply(task, answer)
        if follow_up is None:  # the simulator failed: abandon the session
            break
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": follow_up}]
        judged += 1
    return judged, first


def wait_judged(srv: ServerProcess, timeout_s: float = 30.0) -> None:
    """Wait (at most ``timeout_s``) until every turn with a next state is judged: a user starts the next
    session after the last one ended, by which time the judge has read it (and the memory holds what they said)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        try:
            health = srv.health()
        except OSError:
            health = {}
        if health and health.get("turns_with_next_state", 0) <= health.get("judged_turns", 0):
            return
        time.sleep(0.1)


def run(method: str, persona: str, seed: int, *, model: str = "tiny", sessions: int = 32, probe_every: int = 8,
        heldout: int = 16, rounds: int = 2, max_tokens: int = 96, out_dir: str | Path = "results",
        extra_serve_args: list[str] | None = None, batch_size: int = 4, simulator: ChatClient | None = None,
        progress: Callable[[int, float | None], None] | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One (method, persona, seed) run; returns one row (``COLUMNS``) per probe and one (``SESSION_COLUMNS``) per
    training session: the score of its first answer, what the user got.

    ``simulator``: an OpenAI-compatible endpoint that plays the persona (``LLMPersona``); without
    it the scripted persona plays. The run directory ``<out_dir>/runs/<method>-<persona>-s<seed>``
    is started afresh."""
    p: Persona | JointPersona | LLMPersona = LLMPersona(persona, simulator) if simulator else get_persona(persona)
    sim_failed0 = simulator.failed if simulator else 0
    train = tasks_for(p, "train", sessions, seed)
    probe_tasks = tasks_for(p, "heldout", heldout, 0)  # fixed across seeds and methods
    run_dir = Path(out_dir) / "runs" / f"{method}-{persona}-s{seed}"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    args = ["--method", method, "--judge", "heuristic", "--batch-size", str(batch_size), "--status-interval-s", "0",
            *(extra_serve_args or [])]
    t0 = time.time()
    rows: list[dict[str, Any]] = []
    with ServerProcess(run_dir, model, args, log_path=run_dir / "serve.log") as srv:
        client = ChatClient(srv.url, max_tokens=max_tokens)
        interactions, teacher, firsts = 0, float("nan"), []
        memory_on = bool(srv.health().get("memory", {}).get("on"))
        for s in range(sessions + 1):
            if s > 0:
                wait_judged(srv)
                headers = {"X-Session-Id": f"train-s{seed}-{s}-{uuid.uuid4().hex[:8]}", "X-Turn-Type": "main"}
                task = train[s - 1]  # a joint persona's: the session is its role's, with the role's task
                who, asked = (task.role, task.task) if isinstance(task, RoleTask) else (p, task)
                judged, first = _session(client, who, asked, headers, rounds, seed * 100_003 + s * 101)
                interactions += judged
                if first is not None:
                    firsts.append({"method": method, "persona": persona, "seed": seed, "session": s,
                                   "score": round(p.score(train[s - 1], first), 4), "words": len(first.split())})
                if progress:
                    progress(s, None)
            if s % probe_every and s != sessions:
                continue
            # --method none trains nothing: judged turns wait forever, and only the judging is waited for
            health = wait_idle(srv, batch_size if method != "none" else float("inf"))
            correctness = s in (0, sessions)
            row, answers = probe_row(client, p, probe_tasks, str(s), correctness=correctness, memory="off")
            with_memory = row  # the memory has nothing to add before the user said anything, or when it is off
            if memory_on and s > 0:
                with_memory, _ = probe_row(client, p, probe_tasks, f"{s}-m", correctness=correctness, memory="on")
            if s == 0 and isinstance(p, (Persona, JointPersona)):
                teacher = teacher_compliance(client, p, probe_tasks, answers)
            rows.append({"method": method, "persona": persona, "seed": seed, "sessions": s,
                         "interactions": interactions, "policy_version": health.get("policy_version"), **row,
                         "score_memory": with_memory["score_mean"], "correct_memory": with_memory["correct"],
                         "teacher_score": round(teacher, 4), "wall_s": round(time.time() - t0, 2),
                         "failed_requests": client.failed + (simulator.failed - sim_failed0 if simulator else 0)})
            if progress:
                progress(s, row["score_mean"])
    return rows, firsts


# ------------------------------------------------------------------ outputs

def write_csv(rows: list[dict[str, Any]], path: str | Path, columns: list[str] = COLUMNS) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in columns})


def _groups(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, list[dict]]]:
    """(method, persona) -> sessions -> the rows of every seed at that probe point."""
    out: dict[tuple[str, str], dict[int, list[dict]]] = {}
    for r in rows:
        out.setdefault((r["method"], r["persona"]), {}).setdefault(int(r["sessions"]), []).append(r)
    return out


def _scores(rs: list[dict]) -> list[float]:
    return [float(r["score_mean"]) for r in rs if not math.isnan(float(r["score_mean"]))]


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _first(order: list[int], points: dict[int, list[dict]], run: int) -> str:
    """Interactions at the first probe point from which ``run`` consecutive points (mean over
    seeds) are at or above ``TARGET``; "-" when there is none."""
    ok = [_mean(_scores(points[s])) >= TARGET for s in order]
    for i in range(len(order) - run + 1):
        if all(ok[i:i + run]):
            return f"{_mean([float(r['interactions']) for r in points[order[i]]]):.0f}"
    return "-"


def _column(rs: list[dict], key: str) -> float:
    return _mean([float(r[key]) for r in rs if r.get(key) not in (None, "") and not math.isnan(float(r[key]))])


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """One line per (method, persona): the held-out score at start and end (mean ± sd over seeds),
    the interactions at which it first reaches ``TARGET`` and from which it stays there for
    ``STABLE_POINTS`` probe points (upstream's "sessions until a stable effect"), the hinted
    teacher's score on the same probe, correctness, the score and correctness at the end with the
    memory on (nan: not measured), distinct-2 and words per answer, start -> end."""
    lines = [f"| method | persona | seeds | teacher | score start | score end (± sd) | first >= {TARGET:g} | "
             f"stable >= {TARGET:g} from | correct | memory on: score end, correct end | distinct-2 | words | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (method, persona), points in sorted(_groups(rows).items()):
        order = sorted(points)
        first, last = points[order[0]], points[order[-1]]
        end = _scores(last)
        spread = statistics.pstdev(end) if len(end) > 1 else 0.0
        seeds = len({r["seed"] for rs in points.values() for r in rs})
        change = {k: f"{_column(first, k):.2f} -> {_column(last, k):.2f}" for k in ("correct", "distinct2", "mean_words")}
        lines.append(f"| {method} | {persona} | {seeds} | {_column(first, 'teacher_score'):.3f} | "
                     f"{_mean(_scores(first)):.3f} | {_mean(end):.3f} ± {spread:.3f} | {_first(order, points, 1)} | "
                     f"{_first(order, points, STABLE_POINTS)} | {change['correct']} | "
                     f"{_column(last, 'score_memory'):.3f}, {_column(last, 'correct_memory'):.2f} | {change['distinct2']} | "
                     f"{change['mean_words']} | {_column(last, 'wall_s'):.0f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(rows)
    personas = sorted({p for _, p in groups})
    colors = {m: f"C{i % 10}" for i, m in enumerate(sorted({m for m, _ in groups}))}  # one colour per method
    ncols = min(3, len(personas))
    nrows = -(-len(personas) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.5 * ncols, 4 * nrows), squeeze=False)
    for ax in axes.flat[len(personas):]:
        ax.set_visible(False)
    for ax, persona in zip(axes.flat, personas):
        base: list[float] = []
        for (method, p), points in sorted(groups.items()):
            if p != persona:
                continue
            order = sorted(points)
            base += _scores(points[order[0]])
            xs = [_mean([float(r["interactions"]) for r in points[s]]) for s in order]
            ys = [_mean(_scores(points[s])) for s in order]
            lo = [min(_scores(points[s]), default=float("nan")) for s in order]
            hi = [max(_scores(points[s]), default=float("nan")) for s in order]
            ax.plot(xs, ys, marker="o", label=method, color=colors[method])
            ax.fill_between(xs, lo, hi, color=colors[method], alpha=0.2)
        if base:
            ax.axhline(_mean(base), color="gray", linestyle="--", label="base model")
        ax.set_title(persona)
        ax.set_xlabel("interactions (answers the user replied to)")
        ax.set_ylabel("held-out score")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(rows: list[dict[str, Any]], out_dir: str | Path,
                  sessions: list[dict[str, Any]] | None = None) -> dict[str, Path]:
    """``results.csv`` (the probes), ``sessions.csv`` (each training session's first answer, when there are
    any), ``results.md`` (the probes' table, then sessions to adaptation) and ``results.png``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "md": out / "results.md", "png": out / "results.png"}
    write_csv(rows, paths["csv"])
    table = markdown_table(rows)
    if sessions:
        paths["sessions"] = out / "sessions.csv"
        write_csv(sessions, paths["sessions"], SESSION_COLUMNS)
        table += "\n" + adaptation_table(sessions)
    paths["md"].write_text(table)
    plot(rows, paths["png"])
    return paths


# ------------------------------------------------------------------ command line

def _csv_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", default="combine,opd,binary", help="comma-separated --method values [combine,opd,binary]")
    p.add_argument("--personas", default="one_sentence,under_ten,sure,asks_back",
                   help="comma-separated personas: " + ", ".join([*PERSONAS, *JOINT_PERSONAS])
                   + " (joint: upstream's student, TA and teacher roles in turn, one server) "
                     "[one_sentence,under_ten,sure,asks_back]")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated integer seeds [0,1,2]")
    p.add_argument("--model", default="smollm2-135m", help="the served model [smollm2-135m]")
    p.add_argument("--sessions", type=int, default=24, help="training sessions per run [24]")
    p.add_argument("--probe-every", type=int, default=4, help="probe the held-out set after every K sessions [4]")
    p.add_argument("--heldout", type=int, default=12,
                   help="held-out tasks per probe (at most 12 for the one-preference personas) [12]")
    p.add_argument("--rounds", type=int, default=1, help="most follow-up messages per training session [1]")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens of every request [64]")
    p.add_argument("--batch-size", type=int, default=4, help="the server's --batch-size (judged turns per step) [4]")
    p.add_argument("--lr", type=float, help="the server's --lr [the server's default]")
    p.add_argument("--lora-rank", type=int, help="the server's --lora-rank [the server's default]")
    p.add_argument("--simulator-url", default="",
                   help="an OpenAI-compatible base URL (e.g. http://host:8000/v1) whose model plays the persona "
                   "and rates the probes; empty: the scripted persona [empty]")
    p.add_argument("--simulator-model", default="default", help="the model name sent to --simulator-url [default]")
    p.add_argument("--simulator-key-env", default="OPENCLAW_SIM_API_KEY",
                   help="the environment variable holding the simulator's API key, if it needs one "
                   "[OPENCLAW_SIM_API_KEY]")
    p.add_argument("--simulator-max-tokens", type=int, default=64, help="max_tokens of simulator requests [64]")
    p.add_argument("--label", default="",
                   help="added to the method's name in the results, to tell configurations apart ('+group4') [none]")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each server on cores/jobs threads [1]")
    p.add_argument("--serve-args", default="", help="more `openclaw-rl serve` flags, one shell-quoted string")
    p.add_argument("--out", default="experiments/personalization/results",
                   help="output folder: results.csv, results.md, results.png, runs/ [experiments/personalization/results]")


def cmd_personalization(args: argparse.Namespace) -> int:
    methods, personas = _csv_list(args.methods), _csv_list(args.personas)
    seeds = [int(s) for s in _csv_list(args.seeds)]
    for name in personas:
        get_persona(name)  # unknown names fail before anything starts
    if not methods or not personas or not seeds:
        raise ValueError("--methods, --personas and --seeds need at least one value each")
    if min(args.sessions, args.probe_every, args.heldout, args.jobs) < 1 or args.rounds < 0:
        raise ValueError("--sessions, --probe-every, --heldout and --jobs must be >= 1 and --rounds >= 0")
    extra = shlex.split(args.serve_args)
    if args.lr is not None:
        extra += ["--lr", str(args.lr)]
    if args.lora_rank is not None:
        extra += ["--lora-rank", str(args.lora_rank)]
    simulator = None
    if args.simulator_url:
        simulator = ChatClient(args.simulator_url, model=args.simulator_model, max_tokens=args.simulator_max_tokens,
                               api_key=os.environ.get(args.simulator_key_env) or None)
    if args.jobs > 1 and "--threads" not in extra:
        extra += ["--threads", str(max(1, (os.cpu_count() or 1) // args.jobs))]
    rows: list[dict[str, Any]] = []
    sessions: list[dict[str, Any]] = []
    out = Path(args.out)
    lock = threading.Lock()

    def one(key: tuple[str, str, int]) -> None:
        method, persona, seed = key
        bar = Progress(f"{method}/{persona}/s{seed}", args.sessions)
        bar.update()
        got, firsts = run(method, persona, seed, model=args.model, sessions=args.sessions,
                          probe_every=args.probe_every, heldout=args.heldout, rounds=args.rounds,
                          max_tokens=args.max_tokens, out_dir=out, extra_serve_args=extra, batch_size=args.batch_size,
                          simulator=simulator, progress=lambda d, sc: bar.update(d, sc))
        bar.update(final=True)
        for row in got + firsts:
            row["method"] += args.label  # a configuration's name in the results: "combine+group4"
        with lock:
            rows.extend(got)
            sessions.extend(firsts)
            write_outputs(rows, out, sessions)  # partial results survive an interrupted experiment
    keys = [(m, p, s) for m in methods for p in personas for s in seeds]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        list(pool.map(one, keys))
    paths = write_outputs(rows, out, sessions)
    print(paths["md"].read_text(), end="")
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


def read_csv(path: str | Path, columns: list[str] = COLUMNS[:15]) -> list[dict[str, Any]]:
    """Rows of a ``results.csv`` (``columns``: those it must have; v2's files lack the memory columns) or of a
    ``sessions.csv`` (``SESSION_COLUMNS``); refuses a file without them."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a {'sessions' if columns == SESSION_COLUMNS else 'results'}.csv, "
                             f"missing columns {missing}")
        return list(reader)


def cmd_report(args: argparse.Namespace) -> int:
    """Merge ``results.csv`` files, and the ``sessions.csv`` beside each one where there is one."""
    rows = [row for path in args.csv for row in read_csv(path)]
    beside = [Path(path).with_name("sessions.csv") for path in args.csv]
    sessions = [row for path in beside if path.exists() for row in read_csv(path, SESSION_COLUMNS)]
    paths = write_outputs(rows, args.out, sessions)
    print(paths["md"].read_text(), end="")
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0
