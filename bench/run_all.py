"""Run every benchmark in sequence with its default settings (``make bench``).

Each benchmark runs in its own process (so one's memory does not count against the next), prints
its Markdown tables and writes ``bench/results/<name>.json``.

  python bench/run_all.py                      # all, default sizes (a few minutes on 2 cores)
  python bench/run_all.py --quick              # smaller sizes: a smoke run
  python bench/run_all.py --only proxy_overhead
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BENCHMARKS = {
    "proxy_overhead": [],
    "generation_throughput": [],
    "decode_step": [],
    "prefill_interference": [],
    "learning_latency": [],
    "backlog_drops": [],
    "opd_overhead": [],
    "topk_loss": [],
    "sandbox_overhead": [],
    "agent_episodes": [],
    "gui_browser": [],
    "judge_eval": [],
    "reply_length": [],
    "first_hour": [],
}

QUICK = {
    "proxy_overhead": ["--requests", "32", "--rounds", "2"],
    "generation_throughput": ["--concurrency", "1,8", "--max-tokens", "32", "--waves", "1"],
    "decode_step": ["--rows", "1,8", "--steps", "10", "--runs", "2"],
    "prefill_interference": ["--prompt-tokens", "8000"],
    "learning_latency": ["--quick"],
    "backlog_drops": ["--quick"],
    "opd_overhead": ["--quick"],
    "topk_loss": ["--quick"],
    "sandbox_overhead": ["--n", "10"],
    "agent_episodes": ["--model", "tiny", "--limit", "4", "--max-turns", "2", "--max-new-tokens", "16"],
    "gui_browser": ["--starts", "3", "--rounds", "1", "--concurrency", "1"],
    "judge_eval": [],
    "reply_length": ["--seeds", "0", "--max-tokens", "128"],
    "first_hour": ["--model", "tiny", "--wait-s", "60"],
}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="Run the benchmarks under bench/ in sequence.")
    p.add_argument("--only", action="append", choices=list(BENCHMARKS), help="run only this one (repeatable)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = p.parse_args(argv)
    names = args.only or list(BENCHMARKS)
    failed = []
    for name in names:
        cmd = [sys.executable, str(HERE / f"{name}.py"), *BENCHMARKS[name], *(QUICK[name] if args.quick else [])]
        print(f"\n# {name}\n\n$ {' '.join(cmd[1:])}\n", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.call(cmd)
        print(f"\n({name}: exit {rc}, {time.perf_counter() - t0:.0f} s)", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"\nfailed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
