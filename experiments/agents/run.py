"""Track 2 on this machine: held-out success of the base model, after the warm start, and after RL, per seed.

    python experiments/agents/run.py --settings toolcall terminal --seeds 0 1 2 --out runs/agents
    python experiments/agents/run.py --report-only --out runs/agents     # the tables and plot again

For each setting and seed it runs the product's own commands with their defaults (only the setting, the seed and
the folders are given), printing each one:

    openclaw-rl env eval  --setting S --seed K --repeat R --out base.json                  the base model
    openclaw-rl env sft   --setting S --seed K --out sft                                   the warm start
    openclaw-rl env eval  --setting S --seed K --repeat R --adapter sft/adapter --out sft.json
    openclaw-rl env train --setting S --seed K --init sft/adapter --out rl                 RL from the warm start
    openclaw-rl env eval  --setting S --seed K --repeat R --adapter rl/adapter --out rl.json

``R`` plays every held-out task often enough for at least ``--episodes`` held-out episodes (the terminal setting
has 8 held-out tasks: 4 each). A stage whose output exists is not run again, so an interrupted run resumes.
``results.csv``, ``results.md`` (mean and a 95% t-interval over seeds, and every seed; and RL's gain over the warm
start seed by seed) and ``results.png`` go to
``--out``; experiments/agents/README.md holds the figures of the committed run.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

STAGES = ("base", "sft", "rl")
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def cli(*args: str, log: Path) -> None:
    """Run ``openclaw-rl ARGS`` (this interpreter's), its stderr to ``log``; exit on failure."""
    cmd = [sys.executable, "-m", "slime_ext.cli", *args]
    print("$ openclaw-rl " + " ".join(args), flush=True)
    t0 = time.time()
    with open(log, "a") as f:
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=f)
    print(f"  ({time.time() - t0:.0f} s)", flush=True)
    if r.returncode:
        sys.exit(f"failed (exit {r.returncode}); see {log}")


def run_seed(setting: str, seed: int, out: Path, repeat: int, threads: int | None) -> None:
    d = out / setting / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    log, common = d / "log.txt", ["--setting", setting, "--seed", str(seed)]
    if threads:  # compute only: two settings run side by side on 2 cores with one thread each
        common += ["--threads", str(threads)]
    evaluate = ["env", "eval", *common, "--repeat", str(repeat)]
    t0 = time.time()
    if not (d / "base.json").exists():
        cli(*evaluate, "--out", str(d / "base.json"), log=log)
    if not (d / "sft" / "adapter").exists():
        cli("env", "sft", *common, "--out", str(d / "sft"), log=log)
    if not (d / "sft.json").exists():
        cli(*evaluate, "--adapter", str(d / "sft" / "adapter"), "--out", str(d / "sft.json"), log=log)
    if not (d / "rl" / "adapter").exists():
        cli("env", "train", *common, "--init", str(d / "sft" / "adapter"), "--out", str(d / "rl"), log=log)
    if not (d / "rl.json").exists():
        cli(*evaluate, "--adapter", str(d / "rl" / "adapter"), "--out", str(d / "rl.json"), log=log)
    print(f"[{setting} seed {seed}] done in {time.time() - t0:.0f} s", flush=True)


def ci95(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% t-interval); the half-width is nan for one value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    return mean, T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))


def report(out: Path) -> None:
    rows = []
    for path in sorted(out.glob("*/seed*/")):
        setting, seed = path.parent.name, int(path.name.removeprefix("seed"))
        for stage in STAGES:
            f = path / f"{stage}.json"
            if f.exists():
                r = json.loads(f.read_text())
                rows.append({"setting": setting, "seed": seed, "stage": stage, "success_rate": r["success_rate"],
                             "mean_reward": r["mean_reward"], "episodes": r["episodes"], "wall_s": r["wall_s"]})
        rl = path / "rl" / "metrics.jsonl"
        if rl.exists():
            steps = [json.loads(line) for line in rl.read_text().splitlines()]
            rows.append({"setting": setting, "seed": seed, "stage": "rl-steps", "success_rate": None,
                         "mean_reward": None, "episodes": sum(s["episodes"] for s in steps),
                         "wall_s": round(sum(s["wall_s"] + s.get("train_s", 0) for s in steps), 1),
                         "kept": sum(bool(s.get("kept")) for s in steps), "steps": len(steps),
                         "groups_dropped": sum(s["groups_dropped"] for s in steps)})
    if not rows:
        sys.exit(f"no results under {out}")
    with open(out / "results.csv", "w", newline="") as f:
        fields = ["setting", "seed", "stage", "success_rate", "mean_reward", "episodes", "wall_s", "steps", "kept",
                  "groups_dropped"]
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    lines = ["| setting | stage | held-out success, mean ± 95% CI | per seed | seeds |", "|---|---|---|---|---|"]
    summary = {}
    for setting in sorted({r["setting"] for r in rows}):
        for stage in STAGES:
            vals = [(r["seed"], r["success_rate"]) for r in rows if r["setting"] == setting and r["stage"] == stage]
            if not vals:
                continue
            mean, half = ci95([v for _, v in vals])
            summary[(setting, stage)] = dict(sorted(vals))
            per_seed = ", ".join(f"{v:.3f}" for _, v in sorted(vals))
            lines.append(f"| {setting} | {stage} | {mean:.3f} ± {half:.3f} | {per_seed} | {len(vals)} |")
    lines += ["", "| setting | RL - warm start, per seed (paired) | mean ± 95% CI | seeds |", "|---|---|---|---|"]
    for setting in sorted({r["setting"] for r in rows}):
        by_seed = {(r["seed"], r["stage"]): r["success_rate"] for r in rows if r["setting"] == setting}
        gains = [by_seed[seed, "rl"] - by_seed[seed, "sft"] for seed in sorted({s for s, _ in by_seed})
                 if (seed, "rl") in by_seed and (seed, "sft") in by_seed]
        if gains:
            mean, half = ci95(gains)
            lines.append(f"| {setting} | {', '.join(f'{g:+.3f}' for g in gains)} | {mean:+.3f} ± {half:.3f} | "
                         f"{len(gains)} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(summary, out / "results.png")


def plot(summary: dict[tuple[str, str], dict[int, float]], path: Path) -> None:
    """Each stage's seeds (grey, a seed's stages joined by a line) and their mean with its 95% interval."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    settings = sorted({s for s, _ in summary})
    fig, axes = plt.subplots(1, len(settings), figsize=(4.5 * len(settings), 3.5), squeeze=False)
    for ax, setting in zip(axes[0], settings):
        stages = [st for st in STAGES if (setting, st) in summary]
        for seed in sorted({k for st in stages for k in summary[(setting, st)]}):
            pts = [(i, summary[(setting, st)][seed]) for i, st in enumerate(stages) if seed in summary[(setting, st)]]
            ax.plot(*zip(*pts), color="grey", alpha=0.4, linewidth=1, zorder=1)
        for i, st in enumerate(stages):
            vals = list(summary[(setting, st)].values())
            ax.scatter([i] * len(vals), vals, color="grey", zorder=2)
            mean, half = ci95(vals)
            ax.errorbar([i], [mean], yerr=[0 if math.isnan(half) else half], fmt="o", color="C0", capsize=6,
                        zorder=3)
        ax.set_xticks(range(len(stages)), [{"base": "base", "sft": "warm start", "rl": "warm start + RL"}[s]
                                           for s in stages])
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(f"{setting}: held-out success")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--settings", nargs="+", default=["toolcall", "terminal"])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--episodes", type=int, default=32, help="at least this many held-out episodes per evaluation")
    p.add_argument("--out", type=Path, default=Path("runs/agents"))
    p.add_argument("--threads", type=int, help="torch threads of each command [torch's default]")
    p.add_argument("--report-only", action="store_true")
    args = p.parse_args()
    if not args.report_only:
        from slime_ext.envs import list_tasks

        for setting in args.settings:
            repeat = -(-args.episodes // len(list_tasks(setting, "heldout")))
            for seed in args.seeds:
                run_seed(setting, seed, args.out, repeat, args.threads)
    report(args.out)


if __name__ == "__main__":
    main()
