"""Sandbox start overhead: wall time of `true` run N times plainly and in each available sandbox mode.

"plain" is ``subprocess.run(["true"])``; "rlimits" and "namespaces" are ``Sandbox.run(["true"])`` (a helper
process, limits, and in namespace mode the namespaces and the new root; see docs/sandbox.md). Prints a
Markdown table (median, p90, min in ms) and writes ``bench/results/sandbox_overhead.json``. A benchmark, not a
test: nothing is asserted.

  python bench/sandbox_overhead.py            # N = 30
  python bench/sandbox_overhead.py --n 100
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import md_table, percentile, write_json  # noqa: E402

from slime_ext.envs.sandbox import Sandbox, fresh_workspace, isolation_status  # noqa: E402


def timed(fn, n: int) -> list[float]:
    fn()  # warm-up (page cache, the mode probe)
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--n", type=int, default=30, help="runs per mode (default 30)")
    p.add_argument("--out", help="JSON path (default bench/results/sandbox_overhead.json)")
    args = p.parse_args(argv)

    mode, why = isolation_status()
    modes = ["namespaces", "rlimits"] if mode == "namespaces" else ["rlimits"]
    times = {"plain": timed(lambda: subprocess.run(["true"], check=True), args.n)}
    with fresh_workspace("sandbox-bench-") as ws:
        for m in modes:
            sandbox = Sandbox(ws, mode=m)
            times[m] = timed(lambda sb=sandbox: sb.run(["true"]), args.n)
    ms = {k: [v * 1000 for v in vs] for k, vs in times.items()}
    rows = [[k, percentile(v, 50), percentile(v, 90), min(v), percentile(v, 50) - percentile(ms["plain"], 50)]
            for k, v in ms.items()]
    print(f"isolation: {mode} ({why}); uid {os.geteuid()}; load average {os.getloadavg()[0]:.2f}; n = {args.n}\n")
    print(md_table(["run `true`", "median ms", "p90 ms", "min ms", "median overhead ms"], rows))
    result = {"mode": mode, "why": why, "uid": os.geteuid(), "loadavg": os.getloadavg(), "n": args.n, "ms": ms}
    print(f"\nJSON: {write_json('sandbox_overhead', result, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
