"""The agent loop on the real engine (tiny model) in the terminal setting (and every setting end to end): the episode's tokens are exactly
what the model saw and sampled, observations sit between them with loss mask 0, and the samples train."""

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
from slime_ext.engines import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.envs import get_task, list_tasks, make_env
from slime_ext.envs.agent_loop import (
    ChatSegments,
    combine_rewards,
    episode_sample,
    run_episodes,
    step_samples,
)
from slime_ext.models import resolve_model
from slime_ext.models.builtin import TOOL_CHAT_TEMPLATE
from slime_ext.trainers.step import train_step
from tests.conftest import require_chromium


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model("tiny")


def test_combine_rewards():
    assert combine_rewards(1.0, [], 0.5) == 1.0
    assert combine_rewards(-1.0, [1.0, None, 0.0], 0.5) == pytest.approx(-0.75)
    assert combine_rewards(0.8, [1.0], 1.0) == 1.0  # clipped
    assert combine_rewards(0.2, [1.0], 0.0) == 0.2


@pytest.mark.parametrize("template", ["qwen-style", "smollm2"])  # native tools, and the server's tool fallback
@pytest.mark.parametrize("role", ["user", "tool"])
def test_prompt_plus_sampled_plus_observation_tokens_equal_the_templates_rendering(template, role):
    """Sampled tokens followed by observation tokens form exactly the conversation the template renders."""
    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    if template == "qwen-style":  # the tiny model's template, with the newline a real Qwen generation prompt has
        tok.chat_template = TOOL_CHAT_TEMPLATE.replace("<|im_start|>assistant\n{%- endif %}",
                                                       "<|im_start|>assistant\n{% endif %}")
    renderer = PromptRenderer(tok)
    tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
    seg = ChatSegments(renderer, tools=tools if role == "tool" else [])
    first, answer, obs = "Count the files.", "ls | wc -l", "exit code: 0\nstdout:\n3"
    end = renderer.render([{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}], seg.tools,
                          add_generation_prompt=False)
    sampled = tok.encode(answer, add_special_tokens=False)
    end_token = next(t for t in reversed(end) if t in stop_token_ids(tok))
    built = seg.prompt_ids(first) + sampled + [end_token] + seg.observation_ids(obs, role, ended=True)
    conversation = [{"role": "user", "content": first}, {"role": "assistant", "content": answer},
                    {"role": role, "content": obs}]
    assert built == renderer.render(conversation, seg.tools)
    # a turn cut by max tokens is closed with the template's end token, which the model did not sample
    assert seg.observation_ids(obs, role, ended=False) == [end_token] + seg.observation_ids(obs, role, ended=True)


def test_episodes_record_exact_tokens_masks_and_logprobs_and_complete_a_training_step(model_dir):
    tok = AutoTokenizer.from_pretrained(model_dir)
    renderer = PromptRenderer(tok)
    tasks = [get_task("terminal", "term-make-dirs"), get_task("terminal", "term-find-large")]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=12, seed=3, stop_token_ids=stop_token_ids(tok))

    async def play():
        engine = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            eps = await run_episodes(engine, tok, renderer, lambda: make_env("terminal", max_turns=3), tasks,
                                     sampling, concurrency=2, max_turns=3)
            rescored = [await engine.score(e.prompt_ids + e.response_ids, len(e.prompt_ids)) for e in eps]
            return eps, rescored
        finally:
            await engine.close()

    eps, rescored = asyncio.run(play())
    for ep, teacher_forced in zip(eps, rescored):
        assert ep.task in tasks and len(ep.steps) == 3 and ep.reason == "max_turns" and ep.truncated
        assert ep.outcome == -1.0 and ep.reward == -1.0  # random tokens solve nothing
        n = len(ep.response_ids)
        assert len(ep.loss_mask) == len(ep.logprobs) == n
        model_pos = [i for i in range(n) if ep.loss_mask[i] == 1]
        assert sorted(model_pos) == [i for st in ep.steps for i in range(st.start, st.end)]
        # the recorded log-probs are what the model gives these very tokens in this very context
        assert torch.allclose(torch.tensor([teacher_forced[i] for i in model_pos]),
                              torch.tensor([ep.logprobs[i] for i in model_pos]), atol=1e-4)
        assert all(ep.logprobs[i] == 0.0 for i in range(n) if ep.loss_mask[i] == 0)
        for st, nxt in zip(ep.steps, ep.steps[1:]):  # between two steps: the observation, untrainable
            between = tok.decode(ep.response_ids[st.end:nxt.start])
            assert st.observation in between and between.rstrip().endswith("<|im_start|>assistant")
            assert set(ep.loss_mask[st.end:nxt.start]) == {0}

        sample = episode_sample(ep, rollout_id=7)
        assert sample.tokens == ep.prompt_ids + ep.response_ids and sample.response_length == n
        assert sample.loss_mask == ep.loss_mask and sample.reward == -1.0 and sample.label == ep.task.id
        assert sample.status == sample.Status.TRUNCATED and sample.metadata["reason"] == "max_turns"
        steps = step_samples(ep, rollout_id=7)
        assert len(steps) == 3 and {s.rollout_id for s in steps} == {7}
        for st, s in zip(ep.steps, steps):
            assert s.tokens[-s.response_length:] == ep.response_ids[st.start:st.end]
            assert s.tokens == ep.prompt_ids + ep.response_ids[:st.end] and set(s.loss_mask) == {1}

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    metrics = train_step(model, opt, [episode_sample(e) for e in eps], pad_id=tok.pad_token_id or 0)
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_step_judge_scores_steps_from_the_next_state_and_combines_with_the_outcome():
    from slime_ext.envs.agent_loop import step_judge
    from slime_ext.judge import HeuristicBackend, Judge

    score = step_judge(Judge(HeuristicBackend()))
    good = asyncio.run(score("Fix the bug.", "edit", "thanks, that works perfectly!", "user"))
    bad = asyncio.run(score("Fix the bug.", "edit", "No, that's wrong, it still fails.", "user"))
    assert good == 1.0 and bad == -1.0
    assert combine_rewards(1.0, [good, bad, bad], 0.5) == pytest.approx(1.0 - 0.5 / 3)


def test_run_episode_scores_each_step_with_the_judge_and_weights_it_into_the_reward(model_dir):
    from slime_ext.envs.agent_loop import run_episode

    tok = AutoTokenizer.from_pretrained(model_dir)
    seen = []

    async def judge(first, action, next_state, role):
        seen.append((first, action, next_state, role))
        return 1.0

    async def play():
        engine = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            env = make_env("terminal", max_turns=2)
            sampling = SamplingParams(max_new_tokens=4, seed=1, stop_token_ids=stop_token_ids(tok))
            return await run_episode(engine, tok, ChatSegments(PromptRenderer(tok)), env,
                                     get_task("terminal", "term-make-dirs"), sampling, max_turns=2, judge=judge,
                                     step_weight=0.5)
        finally:
            await engine.close()

    ep = asyncio.run(play())
    assert [s.score for s in ep.steps] == [1.0, 1.0] and len(seen) == 2
    assert seen[0][0].startswith(get_task("terminal", "term-make-dirs").instruction[:30]) and seen[0][3] == "user"
    assert seen[0][2] == ep.steps[0].next_state
    assert ep.outcome == -1.0 and ep.reward == pytest.approx(-0.5)


@pytest.mark.parametrize("setting", ["terminal", "toolcall", "swe", "gui"])
def test_every_setting_end_to_end_on_tiny_gives_right_masks_and_trains(model_dir, setting):
    if setting == "gui":
        require_chromium()
    tok = AutoTokenizer.from_pretrained(model_dir)
    task = list_tasks(setting, "train")[0]
    sampling = SamplingParams(max_new_tokens=8, seed=5, stop_token_ids=stop_token_ids(tok))

    async def play():
        engine = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            eps = await run_episodes(engine, tok, PromptRenderer(tok), lambda: make_env(setting, max_turns=2), [task],
                                     sampling, max_turns=2)
            return eps[0], await engine.score(eps[0].prompt_ids + eps[0].response_ids, len(eps[0].prompt_ids))
        finally:
            await engine.close()

    ep, teacher_forced = asyncio.run(play())
    sample = episode_sample(ep)
    assert 1 <= len(ep.steps) <= 2 and -1.0 <= sample.reward <= 1.0 and sample.metadata["setting"] == setting
    model_pos = [i for i, m in enumerate(sample.loss_mask) if m == 1]
    assert model_pos == [i for st in ep.steps for i in range(st.start, st.end)]
    assert torch.allclose(torch.tensor([teacher_forced[i] for i in model_pos]),
                          torch.tensor([sample.rollout_log_probs[i] for i in model_pos]), atol=1e-4)
    assert all(sample.rollout_log_probs[i] == 0.0 for i, m in enumerate(sample.loss_mask) if m == 0)
    if len(ep.steps) == 2:
        assert set(sample.loss_mask[ep.steps[0].end:ep.steps[1].start]) == {0}
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    sample.reward = 1.0
    metrics = train_step(model, torch.optim.SGD(model.parameters(), lr=0.1), [sample], pad_id=tok.pad_token_id or 0)
    assert metrics["grad_norm"] > 0


def test_a_seeded_run_samples_the_same_task_twice_as_two_samples(model_dir):
    """A GRPO group (and a repeated evaluation) plays one task several times in one seeded run: each episode
    gets its own seed, so the group holds different samples; the run as a whole still replays exactly."""
    tok = AutoTokenizer.from_pretrained(model_dir)
    task = get_task("terminal", "term-make-dirs")
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16, seed=11, stop_token_ids=stop_token_ids(tok))

    async def play():
        engine = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            runs = []
            for _ in range(2):
                eps = await run_episodes(engine, tok, PromptRenderer(tok), lambda: make_env("terminal", max_turns=1),
                                         [task] * 4, sampling, concurrency=2, max_turns=1)
                runs.append([e.response_ids for e in eps])
            return runs
        finally:
            await engine.close()

    first, again = asyncio.run(play())
    assert len({tuple(r) for r in first}) == 4  # four samples, not one sample four times
    assert first == again  # the same seed replays the same group
