"""experiments/agents/run.py --report-only: the tables it writes from a run folder, the paired RL gain included."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stage(folder: Path, stage: str, success: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stage}.json").write_text(json.dumps({"success_rate": success, "mean_reward": 0.0, "episodes": 50,
                                                      "wall_s": 1.0}))


def test_the_report_gives_each_seeds_rl_gain_over_its_own_warm_start(tmp_path):
    for seed, (sft, rl) in enumerate([(0.5, 0.6), (0.3, 0.5)]):
        d = tmp_path / "toolcall" / f"seed{seed}"
        _stage(d, "base", 0.0)
        _stage(d, "sft", sft)
        _stage(d, "rl", rl)
    _stage(tmp_path / "terminal" / "seed0", "sft", 0.1)  # no RL stage: no gain row
    r = subprocess.run([sys.executable, str(ROOT / "experiments" / "agents" / "run.py"), "--report-only", "--out",
                        str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    table = (tmp_path / "results.md").read_text()
    # gains +0.1 and +0.2: mean 0.15, sd 0.0707, 95% t-interval half-width 12.706 * 0.0707 / sqrt(2) = 0.635
    assert "| toolcall | +0.100, +0.200 | +0.150 ± 0.635 | 2 |" in table
    assert "| toolcall | sft | 0.400 ± 1.271 | 0.500, 0.300 | 2 |" in table
    assert "| terminal | +" not in table and (tmp_path / "results.png").exists()
