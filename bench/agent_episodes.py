"""Agent episodes on this machine: episodes per minute and the base success rate per setting.

For each setting, play every held-out task (or the first ``--limit``) once with the embedded engine through
the agent loop (``openclaw-rl env eval``'s code: ``slime_ext.envs.recipe.evaluate``), and print a Markdown
table: episodes, mean reward, success rate (reward 1.0), turns per episode, episodes per minute, wall time.
Also the sandbox's share: the time of one sandboxed ``true`` in the mode this machine gets. Writes
``bench/results/agent_episodes.json``. A benchmark, not a test: nothing is asserted.

  python bench/agent_episodes.py                                  # smollm2-135m, every setting, held-out
  python bench/agent_episodes.py --settings terminal --limit 4 --model tiny --max-turns 2   # a smoke run
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table, write_json  # noqa: E402

from slime_ext.envs import known_settings  # noqa: E402
from slime_ext.envs.recipe import RunSettings, evaluate  # noqa: E402
from slime_ext.envs.sandbox import Sandbox, fresh_workspace, isolation_status  # noqa: E402


def sandbox_start_ms(n: int = 20) -> float:
    with fresh_workspace("bench-") as ws:
        box = Sandbox(ws)
        box.run(["true"])
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            box.run(["true"])
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--settings", default=",".join(known_settings()), help="comma-separated settings [all]")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--split", default="heldout")
    p.add_argument("--limit", type=int, help="first N tasks of the split [all]")
    p.add_argument("--max-turns", type=int, default=6)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--threads", type=int, help="engine torch threads [torch's default]")
    p.add_argument("--out", help="JSON path [bench/results/agent_episodes.json]")
    args = p.parse_args(argv)
    mode, why = isolation_status()
    rows, results = [], {"sandbox_mode": mode, "sandbox_why": why, "sandbox_true_ms": round(sandbox_start_ms(), 1)}
    for setting in [s.strip() for s in args.settings.split(",") if s.strip()]:
        print(f"{setting}: playing the {args.split} tasks...", file=sys.stderr, flush=True)
        r = evaluate(RunSettings(setting=setting, model=args.model, max_turns=args.max_turns,
                                 max_new_tokens=args.max_new_tokens, concurrency=args.concurrency,
                                 threads=args.threads), args.split, args.limit)
        results[setting] = r
        rows.append([setting, r["episodes"], f"{r['mean_reward']:+.3f}", f"{r['success_rate']:.3f}",
                     r["turns_per_episode"], r["episodes_per_min"], r["wall_s"]])
    print(f"model {args.model}, {args.split} split, max {args.max_turns} turns x {args.max_new_tokens} tokens, "
          f"{args.concurrency} episodes at once; sandbox: {mode}, `true` takes {results['sandbox_true_ms']} ms")
    print(md_table(["setting", "episodes", "mean reward", "success rate", "turns / episode", "episodes / min",
                    "wall s"], rows))
    path = write_json("agent_episodes", {"args": vars(args), **results}, args.out)
    print(f"JSON: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
