"""Each agent setting end to end on the real smollm2-135m: an episode through the agent loop gives a
sample whose masks and log-probs are right, and the samples complete a LoRA training step."""

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
from slime_ext.engines import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.envs import known_settings, list_tasks, make_env
from slime_ext.envs.agent_loop import episode_sample, run_episodes
from slime_ext.models import resolve_model
from slime_ext.trainers.loop import TrainerConfig, wrap_lora
from slime_ext.trainers.step import train_step
from tests.conftest import require_chromium

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("setting", ["terminal", "toolcall", "swe", "gui"])
def test_smollm2_episode_samples_have_the_right_masks_and_train(setting):
    if setting not in known_settings():
        pytest.skip(f"setting {setting!r} is not registered in this checkout")
    if setting == "gui":
        require_chromium()
    model_dir = resolve_model("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(model_dir)
    task = list_tasks(setting, "heldout")[0]
    sampling = SamplingParams(temperature=1.0, max_new_tokens=48, seed=0, stop_token_ids=stop_token_ids(tok))

    async def play():
        engine = LocalEngine(model_dir, dtype="float32", threads=2)
        try:
            eps = await run_episodes(engine, tok, PromptRenderer(tok), lambda: make_env(setting, max_turns=2), [task],
                                     sampling, max_turns=2)
            ep = eps[0]
            return ep, await engine.score(ep.prompt_ids + ep.response_ids, len(ep.prompt_ids))
        finally:
            await engine.close()

    ep, teacher_forced = asyncio.run(play())
    sample = episode_sample(ep)
    assert -1.0 <= sample.reward <= 1.0 and sample.label == task.id
    mask = sample.loss_mask
    assert len(mask) == len(sample.rollout_log_probs) == sample.response_length == len(ep.response_ids)
    assert mask[0] == 1 and mask[-1] == 1  # the response starts and ends with the model's own tokens
    model_pos = [i for i, m in enumerate(mask) if m == 1]
    assert torch.allclose(torch.tensor([teacher_forced[i] for i in model_pos]),
                          torch.tensor([sample.rollout_log_probs[i] for i in model_pos]), atol=2e-3)
    assert all(sample.rollout_log_probs[i] == 0.0 for i, m in enumerate(mask) if m == 0)
    if len(ep.steps) > 1:  # the observation between the steps is in the sequence and masked out
        first, second = ep.steps[0], ep.steps[1]
        assert set(mask[first.end:second.start]) == {0}
        assert first.observation.strip()[:20] in tok.decode(ep.response_ids[first.end:second.start])

    model = wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), TrainerConfig(lora_rank=4))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    sample.reward = 1.0  # a signal to learn from, whatever the model did
    metrics = train_step(model, opt, [sample], pad_id=tok.pad_token_id or 0)
    assert torch.isfinite(torch.tensor(metrics["loss"])) and metrics["grad_norm"] > 0
