"""Slime's custom generate function for the agent settings, against an SGLang-protocol server backed by the
tiny model: episode samples with the right masks, per-step fan-out, and bad rows dropped with a reason."""

import asyncio
import types

import pytest
from _sglang_server import serving_in_thread

from slime_ext.envs import list_tasks
from slime_ext.hooks.generate import EnvSettings, generate, task_of
from slime_ext.models import resolve_model
from slime_ext.types import Sample


@pytest.fixture(scope="module")
def router():
    model_dir = resolve_model("tiny")
    with serving_in_thread(model_dir) as fake:
        host, port = fake.url.split("//")[1].split(":")
        yield types.SimpleNamespace(ip=host, port=int(port), model_dir=str(model_dir))


def _args(router, **env):
    return types.SimpleNamespace(sglang_router_ip=router.ip, sglang_router_port=router.port,
                                 hf_checkpoint=router.model_dir, openclaw_rl_env={"max_turns": 2, **env})


SAMPLING = {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 6}


def test_an_episode_fills_the_sample_with_masked_observations(router):
    sample = Sample(index=5, prompt="p", label="term-make-dirs", metadata={"setting": "terminal"})
    out = asyncio.run(generate(_args(router), sample, dict(SAMPLING)))
    assert out is sample and out.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    assert out.reward == -1.0 and out.metadata["task_id"] == "term-make-dirs" and out.rollout_id == 5
    assert len(out.loss_mask) == len(out.rollout_log_probs) == out.response_length
    assert 0 in out.loss_mask and 1 in out.loss_mask  # model tokens, then an observation, then model tokens
    assert all(lp == 0.0 for lp, m in zip(out.rollout_log_probs, out.loss_mask) if m == 0)
    assert all(lp < 0.0 for lp, m in zip(out.rollout_log_probs, out.loss_mask) if m == 1)
    assert out.loss_mask[0] == 1 and out.loss_mask[-1] == 1  # the response starts and ends with the model's tokens
    assert isinstance(out.response, str) and "No shell" in out.response  # the format-help observation


def test_step_samples_fan_out_with_one_rollout_id(router):
    task = list_tasks("toolcall", "train")[0]
    sample = Sample(index=9, group_index=3, prompt="p", metadata={"setting": "toolcall", "task_id": task.id})
    out = asyncio.run(generate(_args(router, samples="step"), sample, dict(SAMPLING)))
    assert isinstance(out, list) and 1 <= len(out) <= 2
    assert {s.rollout_id for s in out} == {9} and {s.group_index for s in out} == {3}
    for s in out:
        assert set(s.loss_mask) == {1} and len(s.rollout_log_probs) == s.response_length
    if len(out) == 2:  # the second step's prompt holds the first step and its observation
        assert out[1].tokens[: len(out[0].tokens)] == out[0].tokens


def test_a_sample_naming_no_task_is_dropped_with_the_reason(router):
    sample = Sample(index=1, prompt="just a prompt")
    out = asyncio.run(generate(_args(router), sample, dict(SAMPLING)))
    assert out.status == Sample.Status.FAILED and out.remove_sample and out.reward == 0.0
    assert "names no task" in out.metadata["error"]
    bad = asyncio.run(generate(_args(router), Sample(index=2, label="nope", metadata={"setting": "terminal"}),
                               dict(SAMPLING)))
    assert bad.remove_sample and "unknown task" in bad.metadata["error"].lower()


def test_a_gui_episode_plays_in_the_browser_and_screenshots_go_to_the_run_dir(router, tmp_path):
    from tests.conftest import require_chromium

    require_chromium()
    sample = Sample(index=4, prompt="p", metadata={"setting": "gui", "task_id": list_tasks("gui", "train")[0].id})
    out = asyncio.run(generate(_args(router, run_dir=str(tmp_path)), sample, dict(SAMPLING)))
    assert out is sample and out.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED)
    assert 0 in out.loss_mask and out.loss_mask[0] == 1 and -1.0 <= out.reward < 1.0
    assert "[1] page" in out.response  # the page's tree came back as the observation
    assert len(list((tmp_path / "screenshots").glob("gui-*/step-*.png"))) == out.metadata["steps"]


def test_a_gui_episode_without_a_browser_is_dropped_with_the_reason(router, tmp_path, monkeypatch, caplog):
    from slime_ext.envs import browser

    monkeypatch.setattr(browser, "_shared", {})  # no browser started yet in this process ...
    monkeypatch.setenv("PATH", str(tmp_path))   # ... and none to find
    sample = Sample(index=6, prompt="p", metadata={"setting": "gui", "task_id": list_tasks("gui", "train")[0].id})
    out = asyncio.run(generate(_args(router), sample, dict(SAMPLING)))
    assert out.status == Sample.Status.FAILED and out.remove_sample and out.reward == 0.0
    assert "no Chromium found" in out.metadata["error"] and "no Chromium found" in caplog.text


def test_settings_are_validated():
    with pytest.raises(ValueError, match="unknown keys \\['turns'\\]"):
        EnvSettings.from_args(types.SimpleNamespace(openclaw_rl_env={"turns": 3}))
    with pytest.raises(ValueError, match="samples must be episode or step"):
        EnvSettings.from_args(types.SimpleNamespace(openclaw_rl_env={"samples": "all"}))
    assert task_of(Sample(label="x"), EnvSettings(setting="swe")) == ("swe", "x")
