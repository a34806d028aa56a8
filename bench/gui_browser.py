"""The GUI setting's own costs, without a model: browser start, episode start, step latency, episodes per minute.

- browser start: ``--starts`` fresh headless Chromium processes, from exec to the first CDP reply.
- episode start (``reset``): publish the task's pages, open a tab in a fresh browser context, load the start
  page, read and render its accessibility tree.
- step latency: one scripted action (click / type / select / press / scroll) -> settle -> new tree, diff,
  task progress; and the cost of the optional screenshot per step.
- scripted episodes per minute: every task's scripted solution, played ``--rounds`` times, with
  ``--concurrency`` episodes at once in threads sharing one browser (the agent loop's arrangement).

Prints Markdown tables, writes ``bench/results/gui_browser.json``. A benchmark: nothing is asserted. The
model's share (episodes per minute with smollm2-135m acting) is ``bench/agent_episodes.py --settings gui``.

  python bench/gui_browser.py
  python bench/gui_browser.py --starts 3 --rounds 1     # a smoke run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table, percentile, write_json  # noqa: E402
from gui_tasks import solution_messages  # noqa: E402

from slime_ext.envs import list_tasks, make_env  # noqa: E402
from slime_ext.envs.browser import Browser, shared_browser  # noqa: E402


def browser_starts(n: int) -> list[float]:
    out = []
    for _ in range(n):
        b = Browser().start()
        out.append(b.start_s)
        b.close()
    return out


def scripted_episode(task, steps: dict[str, list[float]], resets: list[float], shots: list[float] | None,
                     run_dir: str | None) -> float:
    env = make_env("gui", max_turns=30, run_dir=run_dir)
    try:
        t0 = time.perf_counter()
        env.reset(task)
        resets.append(time.perf_counter() - t0)
        for msg in solution_messages(task, lambda: env.lines):
            t = time.perf_counter()
            r = env.step(msg)
            total = time.perf_counter() - t
            verb = msg.split()[0]
            steps[verb].append(r.info["step_s"])
            if shots is not None:
                shots.append(total - r.info["step_s"])  # what the step did after its own timing: the screenshot
            if r.done:
                break
        return env.outcome()
    finally:
        env.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--starts", type=int, default=10, help="fresh browser starts to time [10]")
    p.add_argument("--rounds", type=int, default=2, help="times every task's scripted solution is played [2]")
    p.add_argument("--concurrency", default="1,4", help="episodes at once, comma-separated [1,4]")
    p.add_argument("--out", help="JSON path [bench/results/gui_browser.json]")
    args = p.parse_args(argv)
    tasks = list_tasks("gui")

    starts = browser_starts(args.starts)
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; {shared_browser().version}; "
          f"{len(tasks)} tasks\n")
    print(md_table(["browser start", "median s", "min s", "max s"],
                   [["exec -> first CDP reply", statistics.median(starts), min(starts), max(starts)]]))

    shots: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:  # one pass with screenshots, to price them
        for task in tasks:
            scripted_episode(task, defaultdict(list), [], shots, tmp)
    rows, runs, latency = [], {}, {}
    for conc in [int(c) for c in args.concurrency.split(",")]:
        steps: dict[str, list[float]] = defaultdict(list)
        resets: list[float] = []
        batch = [t for _ in range(args.rounds) for t in tasks]
        t0 = time.perf_counter()
        with ThreadPoolExecutor(conc) as pool:
            rewards = list(pool.map(lambda t, s=steps, r=resets: scripted_episode(t, s, r, None, None), batch))
        wall = time.perf_counter() - t0
        runs[conc] = {"episodes": len(batch), "wall_s": wall, "all_top_reward": all(r == 1.0 for r in rewards)}
        rows.append([conc, len(batch), wall, 60 * len(batch) / wall, sum(r == 1.0 for r in rewards)])
        latency[conc] = {verb: [v * 1000 for v in vs] for verb, vs in steps.items()}
        latency[conc]["reset (episode start)"] = [v * 1000 for v in resets]
    latency[1 if 1 in latency else min(latency)]["screenshot (extra per step)"] = [v * 1000 for v in shots]
    print()
    print(md_table(["scripted episodes at once", "episodes", "wall s", "episodes/min", "reward 1.0"], rows))
    for conc, ms in latency.items():
        print(f"\nlatency with {conc} episode(s) at once (a step: the action, settling, the new tree, diff, progress)\n")
        print(md_table(["latency", "n", "median ms", "p90 ms", "max ms"],
                       [[k, len(v), percentile(v, 50), percentile(v, 90), max(v)] for k, v in ms.items()]))
    result = {"browser_start_s": starts, "latency_ms": latency, "runs": runs, "tasks": len(tasks),
              "version": shared_browser().version, "loadavg": os.getloadavg()}
    print(f"\nJSON: {write_json('gui_browser', result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
