"""The personalization experiment: does online learning from a simulated user's feedback move the
model toward that user's hidden preference?

For each (method, persona, seed), ``run`` starts the real server (``openclaw-rl serve --method M
--judge heuristic``) in its own run directory and drives it over HTTP exactly as a user would:

* a **training session** is a fresh ``X-Session-Id``; the persona's first message for a train task,
  the model's answer, then up to ``rounds`` follow-ups (``persona.reply``, sent with the history;
  each follow-up is the next state that judges the previous answer; after the persona's thanks the
  session ends). ``interactions`` counts the user messages sent in training sessions so far.
* a **probe** runs at 0 sessions (the base model) and after every ``probe_every`` sessions: first
  wait until the trainer is idle (nothing left to judge, fewer than ``batch_size`` judged turns
  waiting, and the served policy version steady for a second; bounded), then ask the first message
  of every held-out task as a side turn (``X-Turn-Type: side``: never judged or trained on) at
  temperature 0 and score the answers with ``persona.score``. One row per probe.

The persona is scripted (``personas.py``: deterministic checks, corrections and partial-credit
scores) unless ``--simulator-url`` names an OpenAI-compatible endpoint, which then plays it
(``llm_persona.py``: its replies are the follow-ups, its ratings the probe scores). The server's
judge stays ``heuristic`` unless ``--serve-args`` picks another (``--judge openai ...``).

A request that fails (HTTP 5xx, connection error, timeout) is retried a few times; failures are
counted in ``failed_requests`` and never abort the run (a failed training session is abandoned,
a failed probe question is left out of ``probe_n``).

Outputs (``write_outputs``): ``results.csv`` (``COLUMNS``), ``results.md`` (a table per method and
persona) and ``results.png`` (score vs interactions: one line per method, mean over seeds with
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
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slime_ext.launch import ServerProcess
from slime_ext.simulate.client import ChatClient
from slime_ext.simulate.llm_persona import LLMPersona
from slime_ext.simulate.personas import Persona, get_persona
from slime_ext.simulate.tasks import Task, grading_tasks, math_tasks

COLUMNS = ["method", "persona", "seed", "sessions", "interactions", "policy_version", "score_mean", "score_std",
           "probe_n", "wall_s", "failed_requests"]
TARGET = 0.8  # the score whose first crossing the Markdown table reports


def tasks_for(persona: Persona | LLMPersona, split: str, n: int, seed: int) -> list[Task]:
    return (math_tasks if persona.task_kind == "math" else grading_tasks)(split, n, seed)


def wait_idle(srv: ServerProcess, batch_size: int, timeout_s: float = 300.0, steady_s: float = 1.0) -> dict[str, Any]:
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


def run(method: str, persona: str, seed: int, *, model: str = "tiny", sessions: int = 32, probe_every: int = 8,
        heldout: int = 16, rounds: int = 2, max_tokens: int = 96, out_dir: str | Path = "results",
        extra_serve_args: list[str] | None = None, batch_size: int = 4, simulator: ChatClient | None = None,
        progress: Callable[[int, float | None], None] | None = None) -> list[dict[str, Any]]:
    """One (method, persona, seed) run; returns one row (``COLUMNS``) per probe.

    ``simulator``: an OpenAI-compatible endpoint that plays the persona (``LLMPersona``); without
    it the scripted persona plays. The run directory ``<out_dir>/runs/<method>-<persona>-s<seed>``
    is started afresh."""
    p: Persona | LLMPersona = LLMPersona(persona, simulator) if simulator else get_persona(persona)
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
    srv = ServerProcess(run_dir, model, args, log_path=run_dir / "serve.log")
    with srv:
        client = ChatClient(srv.url, max_tokens=max_tokens)

        def failed() -> int:
            return client.failed + (simulator.failed - sim_failed0 if simulator else 0)
        interactions = 0

        def probe(done: int) -> None:
            health = wait_idle(srv, batch_size)
            scores = []
            for i, task in enumerate(probe_tasks):
                headers = {"X-Session-Id": f"probe-{done}-{i}-{uuid.uuid4().hex[:8]}", "X-Turn-Type": "side"}
                text = client.chat([{"role": "user", "content": p.first_message(task)}], headers, temperature=0.0)
                score = p.score(task, text) if text is not None else None
                if score is not None:
                    scores.append(score)
            mean = statistics.fmean(scores) if scores else float("nan")
            rows.append({"method": method, "persona": persona, "seed": seed, "sessions": done,
                         "interactions": interactions, "policy_version": health.get("policy_version"),
                         "score_mean": round(mean, 4),
                         "score_std": round(statistics.pstdev(scores), 4) if scores else float("nan"),
                         "probe_n": len(scores), "wall_s": round(time.time() - t0, 2),
                         "failed_requests": failed()})
            if progress:
                progress(done, mean)

        probe(0)
        for s, task in enumerate(train, start=1):
            headers = {"X-Session-Id": f"train-s{seed}-{s}-{uuid.uuid4().hex[:8]}", "X-Turn-Type": "main"}
            messages = [{"role": "user", "content": p.first_message(task)}]
            for r in range(rounds + 1):
                interactions += 1
                answer = client.chat(messages, headers, seed=seed * 100_003 + s * 101 + r)
                thanked = r > 0 and messages[-1]["content"] == p.thanks  # the thanks judged the last answer
                if answer is None or r == rounds or thanked:
                    break
                follow_up = p.reply(task, answer)
                if follow_up is None:  # the simulator failed: abandon the session
                    break
                messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": follow_up}]
            if progress:
                progress(s, None)
            if s % probe_every == 0 or s == sessions:
                probe(s)
    return rows


# ------------------------------------------------------------------ outputs

def write_csv(rows: list[dict[str, Any]], path: str | Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in COLUMNS})


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


def markdown_table(rows: list[dict[str, Any]]) -> str:
    lines = ["| method | persona | seeds | score at start | score at end | end mean ± sd over seeds | "
             f"interactions to reach {TARGET:g} | wall s (mean per run) |",
             "|---|---|---|---|---|---|---|---|"]
    for (method, persona), points in sorted(_groups(rows).items()):
        order = sorted(points)
        start, end = _scores(points[order[0]]), _scores(points[order[-1]])
        reached = "not reached"
        for s in order:
            if _mean(_scores(points[s])) >= TARGET:
                reached = f"{_mean([float(r['interactions']) for r in points[s]]):.0f}"
                break
        spread = statistics.pstdev(end) if len(end) > 1 else 0.0
        seeds = len({r["seed"] for rs in points.values() for r in rs})
        wall = _mean([float(r["wall_s"]) for r in points[order[-1]]])
        lines.append(f"| {method} | {persona} | {seeds} | {_mean(start):.3f} | {_mean(end):.3f} | "
                     f"{_mean(end):.3f} ± {spread:.3f} | {reached} | {wall:.0f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _groups(rows)
    personas = sorted({p for _, p in groups})
    fig, axes = plt.subplots(1, len(personas), figsize=(5.5 * len(personas), 4), squeeze=False)
    for ax, persona in zip(axes[0], personas):
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
            (line,) = ax.plot(xs, ys, marker="o", label=method)
            ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.2)
        if base:
            ax.axhline(_mean(base), color="gray", linestyle="--", label="base model")
        ax.set_title(persona)
        ax.set_xlabel("interactions (user messages in training)")
        ax.set_ylabel("held-out score")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_outputs(rows: list[dict[str, Any]], out_dir: str | Path) -> dict[str, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out / "results.csv", "md": out / "results.md", "png": out / "results.png"}
    write_csv(rows, paths["csv"])
    paths["md"].write_text(markdown_table(rows))
    plot(rows, paths["png"])
    return paths


# ------------------------------------------------------------------ command line

def _csv_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--methods", default="binary,opd,combine", help="comma-separated --method values [binary,opd,combine]")
    p.add_argument("--personas", default="student,teacher", help="comma-separated personas: student, teacher, terse [student,teacher]")
    p.add_argument("--seeds", default="0", help="comma-separated integer seeds [0]")
    p.add_argument("--model", default="smollm2-135m", help="the served model [smollm2-135m]")
    p.add_argument("--sessions", type=int, default=32, help="training sessions per run [32]")
    p.add_argument("--probe-every", type=int, default=8, help="probe the held-out set after every K sessions [8]")
    p.add_argument("--heldout", type=int, default=16, help="held-out tasks per probe [16]")
    p.add_argument("--rounds", type=int, default=2, help="most follow-up messages per training session [2]")
    p.add_argument("--max-tokens", type=int, default=96, help="max_tokens of every request [96]")
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
    if min(args.sessions, args.probe_every, args.heldout) < 1 or args.rounds < 0:
        raise ValueError("--sessions, --probe-every and --heldout must be >= 1 and --rounds >= 0")
    extra = shlex.split(args.serve_args)
    if args.lr is not None:
        extra += ["--lr", str(args.lr)]
    if args.lora_rank is not None:
        extra += ["--lora-rank", str(args.lora_rank)]
    simulator = None
    if args.simulator_url:
        simulator = ChatClient(args.simulator_url, model=args.simulator_model, max_tokens=args.simulator_max_tokens,
                               api_key=os.environ.get(args.simulator_key_env) or None)
    rows: list[dict[str, Any]] = []
    out = Path(args.out)
    for method in methods:
        for persona in personas:
            for seed in seeds:
                bar = Progress(f"{method}/{persona}/s{seed}", args.sessions)
                bar.update()
                rows += run(method, persona, seed, model=args.model, sessions=args.sessions,
                            probe_every=args.probe_every, heldout=args.heldout, rounds=args.rounds,
                            max_tokens=args.max_tokens, out_dir=out, extra_serve_args=extra,
                            batch_size=args.batch_size, simulator=simulator, progress=lambda d, s, bar=bar: bar.update(d, s))
                bar.update(final=True)
                write_outputs(rows, out)  # partial results survive an interrupted experiment
    paths = write_outputs(rows, out)
    print(paths["md"].read_text(), end="")
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}", file=sys.stderr)
    return 0


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a ``results.csv``; refuses a file without the ``COLUMNS``."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: not a results.csv, missing columns {missing}")
        return list(reader)


def cmd_report(args: argparse.Namespace) -> int:
    rows = [row for path in args.csv for row in read_csv(path)]
    paths = write_outputs(rows, args.out)
    print(paths["md"].read_text(), end="")
    print(f"wrote {paths['csv']}, {paths['md']}, {paths['png']}", file=sys.stderr)
    return 0
