"""Warm-start data (envs/demos.py): the scripted solutions played through the real environments are the agent
loop's own tokens, hold no held-out task, and every setting's scripts earn +1 on their train tasks."""

import asyncio
import json
import subprocess
import sys

import pytest
from transformers import AutoTokenizer

from slime_ext.chat.prompt import PromptRenderer
from slime_ext.envs import list_tasks
from slime_ext.envs.agent_loop import ChatSegments
from slime_ext.envs.base import EnvTask, demonstrator, make_env
from slime_ext.envs.demos import ScriptEnded, demonstrate, demonstrations, read_demos, write_demos
from slime_ext.models import resolve_model


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))  # the real model's chat template


def conversation(tok, sample, task: EnvTask) -> list[dict]:
    """The episode as chat messages, rebuilt from its text alone: the first message, then each action and what
    the environment answered (played again, so nothing is read from the sample's ids)."""
    with make_env(task.setting, max_turns=6) as env:
        messages = [{"role": "user", "content": env.reset(task)}]
        for action in demonstrator(task.setting)(task, env):
            result = env.step(action)
            messages.append({"role": "assistant", "content": action})
            if result.done:
                break
            messages.append({"role": env.observation_role, "content": result.observation})
        return messages, env.tools


@pytest.mark.parametrize("setting", ["terminal", "toolcall", "swe"])
def test_demonstrations_are_the_chat_templates_rendering_with_the_loss_on_the_agents_tokens(tok, setting):
    renderer = PromptRenderer(tok)
    samples, skipped = demonstrations(setting, tok, renderer, max_turns=6, limit=3)
    assert len(samples) == 3 and not skipped
    for sample in samples:
        task = next(t for t in list_tasks(setting) if t.id == sample.label)
        messages, tools = conversation(tok, sample, task)
        rendered = renderer.render(messages, tools, add_generation_prompt=False)
        # the agent loop's ids are the template's rendering of the whole conversation (which adds only the
        # closing newline after the last end-of-turn token)
        assert rendered[: len(sample.tokens)] == sample.tokens
        assert len(rendered) - len(sample.tokens) <= 1
        # the trained tokens are exactly each assistant message and its end-of-turn token
        prompt_len = len(sample.tokens) - sample.response_length
        response = sample.tokens[prompt_len:]
        trained = [t for t, m in zip(response, sample.loss_mask) if m]
        end = ChatSegments(renderer, tools).end_token
        expected = [t for m in messages if m["role"] == "assistant"
                    for t in [*tok.encode(m["content"], add_special_tokens=False), end]]
        assert trained == expected
        assert sample.reward == 1.0 and sample.metadata["outcome"] == 1.0


def test_no_held_out_task_ever_becomes_data(tok, tmp_path):
    with pytest.raises(ValueError, match="train split only"):
        demonstrations("terminal", tok, PromptRenderer(tok), split="heldout")
    out = tmp_path / "demos.jsonl"
    r = subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", "demos", "--setting", "terminal", "--model",
                        "tiny", "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    train = {t.id for t in list_tasks("terminal", "train")}
    assert {row["label"] for row in rows} == train  # every train task's script earns +1; no held-out id
    assert all(row["metadata"]["task_id"] == row["label"] for row in rows)
    again = read_demos(out)
    assert [s.tokens for s in again] == [row["tokens"] for row in rows]
    assert all(sum(s.loss_mask) > 0 and 0 in s.loss_mask for s in again)  # agent and observation tokens
    write_demos(again, tmp_path / "copy.jsonl")
    assert (tmp_path / "copy.jsonl").read_text() == out.read_text()


def test_a_script_that_ends_early_or_fails_is_left_out_and_said(tok, monkeypatch):
    import terminal_solutions

    task = list_tasks("terminal", "train")[0]
    monkeypatch.setitem(terminal_solutions.SOLUTIONS, task.id, [terminal_solutions.bash("true")])
    with pytest.raises(ScriptEnded):
        asyncio.run(demonstrate(tok, PromptRenderer(tok), task, max_turns=6, context_length=4096))
    second = list_tasks("terminal", "train")[1]
    monkeypatch.setitem(terminal_solutions.SOLUTIONS, second.id, [terminal_solutions.DONE])
    samples, skipped = demonstrations("terminal", tok, PromptRenderer(tok), limit=3)
    assert [s.label for s in samples] == [list_tasks("terminal", "train")[2].id]
    assert "ended before the episode" in skipped[task.id] and "earned -1.00" in skipped[second.id]


def test_read_demos_names_a_bad_line(tmp_path):
    bad = tmp_path / "d.jsonl"
    bad.write_text('{"tokens": [1, 2, 3], "response_length": 2, "loss_mask": [1, 1]}\n{"tokens": [1]}\n')
    with pytest.raises(ValueError, match="d.jsonl:2"):
        read_demos(bad)
    bad.write_text('{"tokens": [1, 2, 3], "response_length": 2, "loss_mask": [1]}\n')
    with pytest.raises(ValueError, match="do not fit"):
        read_demos(bad)
