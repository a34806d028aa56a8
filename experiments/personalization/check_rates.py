"""Per-check pass rates of the probe answers recorded in experiment run directories.

    python experiments/personalization/check_rates.py experiments/personalization/raw/seed*/runs/*

For each run directory ``<method>-<persona>-s<seed>`` and each probe point (sessions done), prints
the fraction of held-out answers passing each of the persona's checks: which parts of the hidden
preference moved. Reads the run's record store through ``openclaw-rl records --json``; the probe
session ids are ``probe-<sessions>-<task index>-...`` and the task order is the experiment's.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from slime_ext.simulate import get_persona
from slime_ext.simulate.experiment import tasks_for


def check_rates(run_dir: Path) -> dict[int, dict[str, float]]:
    """sessions done -> check name -> fraction of probe answers passing it."""
    _method, persona_name, _seed = run_dir.name.rsplit("-", 2)
    persona = get_persona(persona_name)
    out = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(run_dir), "--json"],
                         capture_output=True, text=True, check=True).stdout
    passed: dict[int, list[dict[str, bool]]] = defaultdict(list)
    # the held-out probes asked without the memory: probe-<sessions>-<task>-... (not -c-, the general questions;
    # not -m-, the same asked with the memory)
    sessions = [s for s in json.loads(out)["sessions"] if re.match(r"probe-\d+-\d+-", s["id"])]
    n = 1 + max((int(s["id"].split("-")[2]) for s in sessions), default=-1)
    tasks = tasks_for(persona, "heldout", n, 0)
    for s in sessions:
        done, index = int(s["id"].split("-")[1]), int(s["id"].split("-")[2])
        answer = s["turns"][0]["response_text"]
        passed[done].append({c.name: c.test(tasks[index], answer) for c in persona.checks})
    return {done: {c: sum(r[c] for r in rows) / len(rows) for c in rows[0]} for done, rows in sorted(passed.items())}


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    for arg in argv:
        run_dir = Path(arg)
        for done, rates in check_rates(run_dir).items():
            print(f"{run_dir.name:24s} {done:3d}  " + "  ".join(f"{c}={v:.2f}" for c, v in rates.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
