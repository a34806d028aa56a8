"""`openclaw-rl env eval` and `env train` on the tiny model in the terminal (and gui) setting, as a user runs them."""

import json
import subprocess
import sys

import pytest

from slime_ext.envs.agent_loop import Episode
from slime_ext.envs.base import get_task
from slime_ext.envs.recipe import summarize


def _cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_summarize_counts_successes_as_reward_one():
    task = get_task("terminal", "term-make-dirs")
    eps = [Episode(task=task, prompt_ids=[], reward=r) for r in (1.0, -1.0, 0.5, 1.0)]
    s = summarize(eps, wall_s=30.0)
    assert s["success_rate"] == 0.5 and s["mean_reward"] == pytest.approx(0.375) and s["episodes_per_min"] == 8.0


def test_env_eval_plays_each_task_of_the_split_once():
    r = _cli("eval", "--setting", "terminal", "--model", "tiny", "--split", "heldout", "--limit", "2",
             "--max-turns", "2", "--max-new-tokens", "8", "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["episodes"] == 2 and len(out["per_task"]) == 2
    assert all(get_task("terminal", t).split == "heldout" for t in out["per_task"])
    assert out["success_rate"] == 0.0 and out["mean_reward"] == -1.0  # random weights solve nothing


def test_env_train_completes_steps_with_masked_observations_and_swaps_adapters(tmp_path):
    out = tmp_path / "run"
    r = _cli("train", "--setting", "terminal", "--model", "tiny", "--steps", "2", "--episodes", "2",
             "--max-turns", "2", "--max-new-tokens", "8", "--lora-rank", "4", "--baseline", "none",
             "--threads", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["episodes"] == 2 and row["trained_tokens"] > 0 and row["masked_tokens"] > 0
        assert row["grad_norm"] > 0 and not row["no_signal"]
    assert (out / "v2" / "adapter_config.json").exists()
    assert "step 2/2" in r.stderr and "episode 2/2" in r.stderr  # progress per episode and per step


def test_env_train_on_the_gui_setting_trains_and_keeps_screenshots_in_the_run_directory(tmp_path):
    from tests.conftest import require_chromium

    require_chromium()
    out = tmp_path / "run"
    r = _cli("train", "--setting", "gui", "--model", "tiny", "--steps", "1", "--episodes", "2", "--max-turns", "2",
             "--max-new-tokens", "8", "--lora-rank", "4", "--baseline", "none", "--threads", "1", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((out / "metrics.jsonl").read_text())
    assert row["episodes"] == 2 and row["trained_tokens"] > 0 and row["masked_tokens"] > 0 and row["grad_norm"] > 0
    assert (out / "v1" / "adapter_config.json").exists()
    shots = list((out / "screenshots").glob("gui-*/step-*.png"))
    assert 2 <= len(shots) <= 4 and all(s.read_bytes()[:4] == b"\x89PNG" for s in shots)


def test_env_train_says_when_nothing_can_be_learned(tmp_path):
    r = _cli("train", "--setting", "terminal", "--model", "tiny", "--steps", "1", "--episodes", "2",
             "--max-turns", "1", "--max-new-tokens", "4", "--lora-rank", "4", "--threads", "1",
             "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "no signal: every episode got the same reward" in r.stderr  # all -1 with the mean baseline


def test_env_eval_refuses_an_unknown_setting_before_loading_a_model():
    r = _cli("eval", "--setting", "nosuch", "--model", "tiny")
    assert r.returncode == 2 and "unknown setting 'nosuch'" in r.stderr and "Traceback" not in r.stderr


def test_env_export_writes_a_slime_dataset_naming_each_task(tmp_path):
    out = tmp_path / "data" / "terminal-train.jsonl"
    r = _cli("export", "--setting", "terminal", "--split", "train", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    from slime_ext.envs import list_tasks

    assert [row["label"] for row in rows] == [t.id for t in list_tasks("terminal", "train")]
    task = get_task("terminal", rows[0]["label"])
    assert rows[0] == {"prompt": task.instruction, "label": task.id,
                       "metadata": {"setting": "terminal", "task_id": task.id}}
