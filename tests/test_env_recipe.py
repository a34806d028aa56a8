"""`openclaw-rl env eval` and `env train` on the tiny model in the terminal (and gui) setting, as a user runs them."""

import json
import subprocess
import sys

import pytest

from slime_ext.envs.agent_loop import Episode, episode_sample
from slime_ext.envs.base import get_task
from slime_ext.envs.recipe import check_slice, group_samples, passes_check, summarize


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
             "--threads", "1", "--check", "0", "--out", str(out))
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
             "--max-new-tokens", "8", "--lora-rank", "4", "--baseline", "none", "--threads", "1", "--check", "0",
             "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((out / "metrics.jsonl").read_text())
    assert row["episodes"] == 2 and row["trained_tokens"] > 0 and row["masked_tokens"] > 0 and row["grad_norm"] > 0
    assert (out / "v1" / "adapter_config.json").exists()
    shots = list((out / "screenshots").glob("gui-*/step-*.png"))
    assert 2 <= len(shots) <= 4 and all(s.read_bytes()[:4] == b"\x89PNG" for s in shots)


def test_env_train_says_when_nothing_can_be_learned(tmp_path):
    r = _cli("train", "--setting", "terminal", "--model", "tiny", "--steps", "1", "--episodes", "4",
             "--group-size", "2", "--max-turns", "1", "--max-new-tokens", "4", "--lora-rank", "4", "--threads", "1",
             "--check", "0", "--out", str(tmp_path / "run"))
    assert r.returncode == 0, r.stderr[-2000:]
    # all -1: both GRPO groups are constant, so both are dropped and nothing is trained
    assert "2 constant group(s) dropped (no signal: every episode got the same reward" in r.stderr
    row = json.loads((tmp_path / "run" / "metrics.jsonl").read_text())
    assert row["groups_dropped"] == 2 and row["no_signal"] and "loss" not in row


def _episodes(rewards):
    task = get_task("terminal", "term-make-dirs")
    eps = []
    for r in rewards:
        ep = Episode(task=task, prompt_ids=[1, 2], response_ids=[3, 4, 5], loss_mask=[1, 0, 1],
                     logprobs=[-0.5, 0.0, -0.5], versions=[0, 0], reward=r, outcome=r)
        eps.append(ep)
    return eps


def test_group_samples_give_grpo_advantages_and_drop_constant_groups():
    samples, dropped = group_samples(_episodes([1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.5, 0.5, 1.0, 0.0]),
                                     4, rollout_id=3)
    assert dropped == 1 and len(samples) == 8  # the second group is constant
    first = [s.metadata["group_advantage"] for s in samples[:4]]
    assert first[0] == pytest.approx(1.5) and first[1:] == [pytest.approx(-0.5)] * 3  # (r - mean) / std
    assert sum(s.metadata["group_advantage"] for s in samples[4:]) == pytest.approx(0.0)
    assert samples[7].metadata["group_advantage"] < 0 < samples[6].metadata["group_advantage"]
    assert all(s.rollout_id == 3 and s.loss_mask == [1, 0, 1] for s in samples)


def test_the_check_keeps_an_adapter_at_most_one_task_worse_than_the_best():
    assert passes_check(0.5, 0.5, 16) and passes_check(7 / 16, 0.5, 16)
    assert not passes_check(6 / 16, 0.5, 16)
    assert passes_check(1.0, 0.0, 4)


def test_the_check_slice_is_fixed_and_apart_from_the_rl_tasks():
    from slime_ext.envs import list_tasks

    tasks = list_tasks("toolcall", "train")
    checked, rest = check_slice(tasks, 16)
    assert len(checked) == 16 and len(rest) == len(tasks) - 16 and not {t.id for t in checked} & {t.id for t in rest}
    assert check_slice(tasks, 16) == (checked, rest)  # the same slice whatever the seed
    assert check_slice(tasks, 0) == ([], tasks)
    with pytest.raises(ValueError, match="must leave train tasks"):
        check_slice(tasks, len(tasks))


def test_env_sft_then_train_from_its_adapter_then_eval_it(tmp_path):
    sft_dir, rl_dir = tmp_path / "sft", tmp_path / "rl"
    r = _cli("sft", "--setting", "terminal", "--model", "tiny", "--steps", "2", "--batch-size", "4",
             "--lora-rank", "4", "--threads", "1", "--out", str(sft_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    from slime_ext.envs import list_tasks

    demos = [json.loads(line) for line in (sft_dir / "demos.jsonl").read_text().splitlines()]
    assert {d["label"] for d in demos} == {t.id for t in list_tasks("terminal", "train")}
    rows = [json.loads(line) for line in (sft_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2] and all(row["nll"] > 0 and row["grad_norm"] > 0 for row in rows)
    assert (sft_dir / "adapter" / "adapter_config.json").exists() and (sft_dir / "sft.png").exists()
    assert "sft step 2/2" in r.stderr
    r = _cli("train", "--setting", "terminal", "--model", "tiny", "--init", str(sft_dir / "adapter"), "--steps", "1",
             "--episodes", "2", "--baseline", "none", "--max-turns", "1", "--max-new-tokens", "4", "--threads", "1",
             "--check", "2", "--out", str(rl_dir))
    assert r.returncode == 0, r.stderr[-2000:]
    row = json.loads((rl_dir / "metrics.jsonl").read_text())
    assert row["check_success"] == 0.0 and row["kept"] and row["trained_tokens"] > 0
    assert "check 1/2" in r.stderr and "check slice (2 train tasks RL never samples" in r.stderr
    config = json.loads((rl_dir / "adapter" / "adapter_config.json").read_text())
    assert config["r"] == 4  # the warm start's rank is kept, not a new adapter's (16 by default)
    assert (rl_dir / "train.png").exists()
    r = _cli("eval", "--setting", "terminal", "--model", "tiny", "--adapter", str(rl_dir / "adapter"), "--limit", "1",
             "--repeat", "2", "--max-turns", "1", "--max-new-tokens", "4", "--threads", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["episodes"] == 2 and len(out["per_task"]) == 1 and out["adapter"] == str(rl_dir / "adapter")
    r = _cli("eval", "--setting", "terminal", "--model", "tiny", "--adapter", str(tmp_path), "--limit", "1")
    assert r.returncode == 2 and "not a LoRA adapter folder" in r.stderr and "Traceback" not in r.stderr


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


def test_env_train_and_sft_flags_default_to_the_recipes_configs():
    """Each learning default is declared once: the flags of `env train` / `env sft` take TrainConfig's and
    SftConfig's, and their help shows those values."""
    import dataclasses

    from slime_ext.cli import build_parser
    from slime_ext.envs.recipe import SftConfig, TrainConfig

    parser = build_parser()
    for command, config in (("train", TrainConfig), ("sft", SftConfig)):
        args = parser.parse_args(["env", command, "--setting", "toolcall", "--out", "x"])
        assert config(**{f.name: getattr(args, f.name) for f in dataclasses.fields(config)}) == config()
    help_text = _cli("train", "--help").stdout
    assert f"[{TrainConfig().episodes}]" in help_text and f"[{TrainConfig().lr:g}]" in help_text


@pytest.mark.parametrize("flags, problem", [
    (["--episodes", "6", "--group-size", "4"], "episodes (6) must be a multiple of the group size (4)"),
    (["--baseline", "group", "--group-size", "1"], "--group-size >= 2 with the group baseline"),
    (["--steps", "0"], "steps, episodes and lora_rank must be >= 1"),
])
def test_env_train_refuses_learning_flags_that_do_not_go_together(tmp_path, flags, problem):
    r = _cli("train", "--setting", "terminal", "--model", "tiny", "--out", str(tmp_path / "rl"), *flags, timeout=60)
    assert r.returncode == 2 and problem in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "rl").exists()  # refused before anything was written


def test_the_default_check_slice_leaves_most_train_tasks_to_rl():
    from slime_ext.envs.recipe import default_check

    assert default_check(200) == 16 and default_check(33) == 8 and default_check(3) == 0


def test_rescored_samples_start_the_ppo_ratio_at_one_in_the_trainers_precision():
    """Under bf16 autocast the engine's recorded log-probs are a few hundredths off the trainer's; rescoring
    replaces them with the trainer's own pi_old, so the first step's ratio is exactly 1 on every trained token."""
    import torch

    from slime_ext.envs.recipe import _trainable, rescore_samples
    from slime_ext.models import resolve_model
    from slime_ext.trainers.step import collate, response_logprobs

    model = _trainable(resolve_model("tiny"), torch.device("cpu"), 4)
    samples = [episode_sample(e) for e in _episodes([1.0, -1.0])]
    samples[1].loss_mask = [1, 1, 0]
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        rescore_samples(model, samples)
        for s in samples:
            now = response_logprobs(model, collate([s]))[0, : s.response_length].float().tolist()
            assert [x if m else 0.0 for x, m in zip(now, s.loss_mask)] == s.rollout_log_probs
    assert samples[0].rollout_log_probs[1] == 0.0 and samples[1].rollout_log_probs[2] == 0.0  # observations
    assert all(x < 0 for s in samples for x, m in zip(s.rollout_log_probs, s.loss_mask) if m)
