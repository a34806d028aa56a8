"""Agent RL on one machine (the embedded backend): play episodes with the local engine, train a LoRA
adapter on them, swap it into the engine, repeat. A readable top-to-bottom loop, like a torchtune recipe.

    evaluate(...)  the success rate of the served model on a split (no training)
    train(...)     ``steps`` rounds of: ``episodes`` episodes on train tasks -> one Binary RL step on the
                   episode samples (the outcome reward, minus the round's mean reward as the baseline when
                   ``baseline="mean"``) -> the new adapter swapped into the engine as version ``step``

An episode *succeeds* when its reward is 1.0 (every check passed). Progress goes to stderr, one line per
round; ``train`` writes ``metrics.jsonl`` and the adapter of every round under ``out_dir``.
The same episodes and samples feed Slime through ``slime_generate.generate``; only the trainer differs.

A step-wise judge (``RunSettings.step_judge``: off, heuristic or openai; ``--step-judge`` of ``env eval`` /
``env train``) is built once per run and scores every step; the reward is then ``combine_rewards(outcome,
step scores, step_weight)``, success still means an outcome of 1.0, and the summaries and metrics add
``mean_step_score`` and ``mean_outcome``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from slime_ext.engines.base import SamplingParams
from slime_ext.envs.agent_loop import (
    DEFAULT_STEP_WEIGHT,
    Episode,
    close_step_judge,
    episode_sample,
    make_step_judge,
    mean_step_score,
    run_episodes,
    step_judge,
    step_judge_problems,
)
from slime_ext.envs.base import EnvTask, list_tasks, make_env


@dataclass
class RunSettings:
    setting: str
    model: str = "smollm2-135m"
    max_turns: int = 6
    max_new_tokens: int = 128
    temperature: float = 1.0
    concurrency: int = 4
    seed: int = 0
    threads: int | None = None
    run_dir: Path | None = None  # where settings keep debugging artifacts (the GUI setting's screenshots)
    device: str = "auto"  # engine and trainer: auto, cpu, cuda or cuda:N (engines/device.py)
    step_judge: str = "off"  # the step-wise judge: off, heuristic or openai (agent_loop.make_step_judge)
    step_judge_url: str | None = None  # openai: the OpenAI-compatible endpoint (key: $OPENCLAW_RL_JUDGE_KEY)
    step_judge_model: str | None = None  # openai: the judge model's name
    step_weight: float | None = None  # weight of the mean step score in the reward [0.5 with a judge, else 0]

    def __post_init__(self) -> None:
        names = {"kind": "step_judge", "url": "step_judge_url", "model": "step_judge_model", "weight": "step_weight"}
        problems = step_judge_problems(self.step_judge, self.step_judge_url, self.step_judge_model,
                                       self.step_weight, names)
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def judged(self) -> bool:
        return self.step_judge != "off"

    @property
    def weight(self) -> float:
        """The step-score weight in effect."""
        if self.step_weight is not None:
            return float(self.step_weight)
        return DEFAULT_STEP_WEIGHT if self.judged else 0.0


def _load(settings: RunSettings, exact_logprobs: bool = False):
    """The model, tokenizer, renderer, engine and sampling of a run. ``exact_logprobs``: the engine records the
    log-probs a float32 trainer computes (float32 on the CPU: ``train``'s PPO ratio is against them, with no
    re-scoring unlike serve's trainer, and a CPU's bf16 puts them ~3e-2 away); a GPU serves bf16 either way."""
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
    from slime_ext.engines.device import resolve_device
    from slime_ext.engines.local import LocalEngine
    from slime_ext.models import resolve_model

    device = resolve_device(settings.device)  # a GPU that is not there is refused before a model is converted or loaded
    model_dir = resolve_model(settings.model, progress=lambda m: print(m, file=sys.stderr))
    tok = AutoTokenizer.from_pretrained(model_dir)
    dtype = "float32" if exact_logprobs and device.type == "cpu" else "auto"
    engine = LocalEngine(model_dir, dtype=dtype, threads=settings.threads, device=settings.device)
    sampling = SamplingParams(temperature=settings.temperature, max_new_tokens=settings.max_new_tokens,
                              stop_token_ids=stop_token_ids(tok))
    return model_dir, tok, PromptRenderer(tok), engine, sampling


async def _play(settings: RunSettings, engine, tok, renderer, tasks: list[EnvTask], sampling,
                judge: Any = None) -> list[Episode]:
    """Play one episode per task; ``judge``: the step-wise judge (``make_step_judge``), None for none."""
    t0 = time.time()

    def progress(done: int, total: int, ep: Episode) -> None:
        scored = mean_step_score([ep])
        parts = "" if scored is None else f" (outcome {ep.outcome:+.2f}, step score {scored:+.2f})"
        print(f"[{settings.setting}] episode {done}/{total}: {ep.task.id} reward {ep.reward:+.2f}{parts} "
              f"({len(ep.steps)} steps, {ep.reason}) {time.time() - t0:.0f}s", file=sys.stderr, flush=True)

    judged = {} if judge is None else {"judge": step_judge(judge), "step_weight": settings.weight}
    return await run_episodes(engine, tok, renderer, lambda: make_env(settings.setting, max_turns=settings.max_turns,
                                                                     run_dir=settings.run_dir),
                              tasks, sampling, concurrency=settings.concurrency, max_turns=settings.max_turns,
                              on_episode=progress, **judged)


def _make_judge(settings: RunSettings):
    """The run's step-wise judge, built once (None when off)."""
    return make_step_judge(settings.step_judge, settings.step_judge_url, settings.step_judge_model)


def summarize(episodes: list[Episode], wall_s: float, judged: bool = False) -> dict[str, Any]:
    """Mean reward, success rate (reward 1.0), turns per episode and episodes per minute. With ``judged``
    (the rewards hold step scores) success is an outcome of 1.0, and the mean outcome and mean step score
    (``agent_loop.mean_step_score``; None when no step was scored) are added."""
    rewards = [e.reward for e in episodes]
    won = [e.outcome if judged else e.reward for e in episodes]
    out = {"episodes": len(episodes), "mean_reward": round(statistics.fmean(rewards), 4) if rewards else None,
           "success_rate": round(sum(r >= 1.0 for r in won) / len(won), 4) if won else None,
           "turns_per_episode": round(statistics.fmean(len(e.steps) for e in episodes), 2) if episodes else None,
           "episodes_per_min": round(60 * len(episodes) / wall_s, 2) if wall_s > 0 else None,
           "wall_s": round(wall_s, 2)}
    if judged:
        scored = mean_step_score(episodes)
        out.update(mean_outcome=round(statistics.fmean(won), 4) if won else None,
                   mean_step_score=None if scored is None else round(scored, 4))
    return out


def evaluate(settings: RunSettings, split: str = "heldout", limit: int | None = None) -> dict[str, Any]:
    """Play every task of ``split`` (the first ``limit``) once with the served model; the summary."""
    tasks = list_tasks(settings.setting, split)[:limit]
    if not tasks:
        raise ValueError(f"setting {settings.setting!r} has no {split} tasks")
    _, tok, renderer, engine, sampling = _load(settings)
    sampling = dataclasses.replace(sampling, seed=settings.seed)
    judge = _make_judge(settings)

    async def go():
        try:
            t0 = time.time()
            episodes = await _play(settings, engine, tok, renderer, tasks, sampling, judge)
            return episodes, time.time() - t0
        finally:
            await close_step_judge(judge)
            await engine.close()

    episodes, wall = asyncio.run(go())
    judged = {"step_judge": settings.step_judge, "step_weight": settings.weight} if settings.judged else {}
    out = {"setting": settings.setting, "split": split, "model": settings.model, **judged,
           **summarize(episodes, wall, judged=settings.judged), "per_task": {e.task.id: e.reward for e in episodes}}
    return out


def train(settings: RunSettings, out_dir: Path, steps: int = 4, episodes: int = 8, lr: float = 1e-4,
          lora_rank: int = 16, baseline: str = "mean", policy_loss: str = "ppo") -> list[dict[str, Any]]:
    """The training loop (see the module docstring); one metrics dict per round. ``policy_loss``: ``ppo`` or
    the user's (``learning/objective.py: resolve_policy_loss``)."""
    import torch
    from transformers import AutoModelForCausalLM

    from slime_ext.learning.objective import resolve_policy_loss
    from slime_ext.trainers.loop import TrainerConfig, recompute_activations, wrap_lora
    from slime_ext.trainers.step import train_step

    if baseline not in ("mean", "none"):
        raise ValueError(f"baseline must be mean or none, got {baseline!r}")
    if min(steps, episodes, lora_rank) < 1:
        raise ValueError("steps, episodes and lora_rank must be >= 1")
    loss_fn = resolve_policy_loss(policy_loss)  # before minutes of loading: a loss that cannot load says so now
    tasks = list_tasks(settings.setting, "train")
    if not tasks:
        raise ValueError(f"setting {settings.setting!r} has no train tasks")
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir, tok, renderer, engine, sampling = _load(settings, exact_logprobs=True)
    judge = _make_judge(settings)  # once for the run: every round's episodes share it
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(engine.device)
    # Agent episodes are long (a 6-turn GUI episode is ~4-5k tokens): 6.0 GB peak on smollm2 with this (and
    # train_step making logits at trained positions only), 14.5 GB without
    recompute_activations(base)
    base.config.use_cache = False  # this model only trains (the engine generates)
    model = wrap_lora(base, TrainerConfig(lora_rank=lora_rank))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    rng = random.Random(settings.seed)
    history: list[dict[str, Any]] = []

    async def go() -> None:
        for step in range(1, steps + 1):
            batch = [rng.choice(tasks) for _ in range(episodes)]
            params = dataclasses.replace(sampling, seed=rng.randrange(2**31))
            t0 = time.time()
            eps = await _play(settings, engine, tok, renderer, batch, params, judge)
            play_s = time.time() - t0
            samples = [episode_sample(e, rollout_id=step) for e in eps]
            base = statistics.fmean(s.reward for s in samples) if baseline == "mean" else 0.0
            t1 = time.time()
            # one episode per micro-batch: an episode's response holds its observations too, and the fp32
            # logits over it ([T, vocab]) are gigabytes for a long GUI episode; four at once exhausted 24 GiB
            metrics = await asyncio.to_thread(train_step, model, opt, samples, baseline=base,
                                              pad_id=tok.pad_token_id or 0, micro_batch_size=1, loss_fn=loss_fn)
            adapter = out_dir / f"v{step}"
            model.save_pretrained(adapter)
            await engine.swap(adapter, step)
            no_signal = baseline == "mean" and len({s.reward for s in samples}) == 1
            row = {"step": step, **summarize(eps, play_s, judged=settings.judged), "loss": round(metrics["loss"], 4),
                   "no_signal": no_signal, "grad_norm": round(metrics["grad_norm"], 4),
                   "train_s": round(time.time() - t1, 2),
                   "masked_tokens": sum(len(s.loss_mask) - sum(s.loss_mask) for s in samples),
                   "trained_tokens": sum(sum(s.loss_mask) for s in samples)}
            history.append(row)
            with open(out_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(f"[{settings.setting}] step {step}/{steps}: mean reward {row['mean_reward']:+.3f}, success "
                  f"{row['success_rate']:.2f}, {row['episodes_per_min']:.1f} episodes/min, loss {row['loss']:+.4f}, "
                  f"train {row['train_s']:.1f} s"
                  + (f", mean step score {row['mean_step_score']:+.3f}" if row.get("mean_step_score") is not None
                     else "")
                  + (" (no signal: every episode got the same reward, so nothing was learned)" if no_signal else ""),
                  file=sys.stderr, flush=True)

    async def run() -> None:
        try:
            await go()
        finally:
            await close_step_judge(judge)
            await engine.close()

    asyncio.run(run())
    return history
