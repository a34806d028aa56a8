"""Agents on one machine (the embedded backend): a warm start on scripted solutions, then RL from it, with
held-out evaluation around both. A readable top-to-bottom loop, like a torchtune recipe.

    evaluate(...)  the success rate of the base model or an adapter on a split (``repeat`` episodes per task)
    sft(...)       the warm start (``SftConfig``): the train split's demonstrations (``envs/demos.py``) ->
                   ``steps`` optimizer steps of NLL on the agent's tokens -> ``out_dir/adapter``
    train(...)     (``TrainConfig``) ``steps`` rounds of: ``episodes`` episodes on train tasks
                   (``episodes / group_size`` tasks, each played ``group_size`` times) -> GRPO advantages,
                   constant groups dropped -> one policy step (pi_old re-scored by the trainer first) -> the new
                   adapter swapped into the engine, then kept only if the check slice (train tasks RL never
                   samples, played greedily) does not drop by more than one task; ``init``: start from the warm
                   start's adapter

An episode *succeeds* when its reward is 1.0 (every check passed). Progress goes to stderr, one line per
step; ``sft`` and ``train`` write ``metrics.jsonl``, a plot and their adapters under ``out_dir``. The same
episodes and samples feed Slime through ``slime_ext.hooks.generate.generate``, and the same demonstrations
its SFT through ``slime_ext.hooks.sft``; only the trainer differs.

On a CPU with native bf16 ``sft`` and ``train`` run under bf16 autocast; elsewhere the trainer is float32. The
engine serves at ``auto``, so its recorded log-probs are not the trainer's own (bf16, int4 or a GPU's
kernels), so ``train`` re-scores each batch before its step (``rescore_samples``).

A step-wise judge (``RunSettings.step_judge``: off, heuristic or openai; ``--step-judge`` of ``env eval`` /
``env train``) is built once per run and scores every step; the reward is then ``combine_rewards(outcome,
step scores, step_weight)``, success still means an outcome of 1.0, and the summaries and metrics add
``mean_step_score`` and ``mean_outcome``.
"""

from __future__ import annotations

import asyncio
import copy
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
from slime_ext.types import Sample


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


BASELINES = ("group", "mean", "none")  # RL's advantage baseline: GRPO groups, the step's mean reward, none


@dataclass(frozen=True)
class SftConfig:
    """The warm start's learning settings; ``env sft``'s flags take their defaults from here."""

    steps: int = 12  # optimizer steps; the demonstrations are passed over in a new order each time
    lr: float = 5e-4
    lora_rank: int = 16
    batch_size: int = 8  # demonstrations per optimizer step

    def __post_init__(self) -> None:
        if min(self.steps, self.lora_rank, self.batch_size) < 1:
            raise ValueError("steps, lora_rank and batch_size must be >= 1")


@dataclass(frozen=True)
class TrainConfig:
    """RL's learning settings; ``env train``'s flags take their defaults from here (what they were measured
    against: ``experiments/agents/README.md``)."""

    steps: int = 8  # rounds of: play, one policy step, check
    episodes: int = 32  # episodes per step: episodes / group_size train tasks, each played group_size times
    lr: float = 1e-4  # with 16 episodes at 2e-4 RL lost held-out tool-call success on 3 seeds; this gained on 3
    lora_rank: int = 16  # of a new adapter (an --init adapter keeps its own)
    baseline: str = "group"  # group (GRPO), mean (the step's mean reward) or none
    group_size: int = 4
    policy_loss: str = "ppo"  # ppo, or module:attr (learning/objective.py: resolve_policy_loss)
    check: int | None = None  # train tasks in the check slice; None: default_check(number of train tasks)

    def __post_init__(self) -> None:
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        if min(self.steps, self.episodes, self.lora_rank, self.group_size) < 1 or (
                self.baseline == "group" and self.group_size < 2):
            raise ValueError("steps, episodes and lora_rank must be >= 1, and --group-size >= 2 with the group "
                             "baseline")
        if self.baseline == "group" and self.episodes % self.group_size:
            raise ValueError(f"episodes ({self.episodes}) must be a multiple of the group size ({self.group_size})")

    @property
    def tasks_per_step(self) -> int:
        return self.episodes // self.group_size if self.baseline == "group" else self.episodes


def _load(settings: RunSettings):
    """The model directory, tokenizer, renderer, engine (``--dtype auto``) and sampling of a run."""
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
    from slime_ext.engines.device import resolve_device
    from slime_ext.engines.local import LocalEngine
    from slime_ext.models import resolve_model

    resolve_device(settings.device)  # a GPU that is not there is refused before a model is converted or loaded
    model_dir = resolve_model(settings.model, progress=lambda m: print(m, file=sys.stderr))
    tok = AutoTokenizer.from_pretrained(model_dir)
    engine = LocalEngine(model_dir, dtype="auto", threads=settings.threads, device=settings.device)
    sampling = SamplingParams(temperature=settings.temperature, max_new_tokens=settings.max_new_tokens,
                              stop_token_ids=stop_token_ids(tok))
    return model_dir, tok, PromptRenderer(tok), engine, sampling


async def _play(settings: RunSettings, engine, tok, renderer, tasks: list[EnvTask], sampling,
                judge: Any = None, label: str = "episode") -> list[Episode]:
    """Play one episode per task; ``judge``: the step-wise judge (``make_step_judge``), None for none."""
    t0 = time.time()

    def progress(done: int, total: int, ep: Episode) -> None:
        scored = mean_step_score([ep])
        parts = "" if scored is None else f" (outcome {ep.outcome:+.2f}, step score {scored:+.2f})"
        print(f"[{settings.setting}] {label} {done}/{total}: {ep.task.id} reward {ep.reward:+.2f}{parts} "
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


def _per_task(episodes: list[Episode]) -> dict[str, float]:
    """{task id: mean reward over its episodes} (one value per task, however often it was played)."""
    seen: dict[str, list[float]] = {}
    for e in episodes:
        seen.setdefault(e.task.id, []).append(e.reward)
    return {k: round(statistics.fmean(v), 4) for k, v in seen.items()}


def evaluate(settings: RunSettings, split: str = "heldout", limit: int | None = None, *, adapter: Path | None = None,
             repeat: int = 1) -> dict[str, Any]:
    """Play every task of ``split`` (the first ``limit``) ``repeat`` times with the served model (the base, or
    ``adapter``: a LoRA adapter of ``env sft`` or ``env train``); the summary."""
    if repeat < 1:
        raise ValueError(f"repeat must be >= 1, got {repeat}")
    tasks = list_tasks(settings.setting, split)[:limit]
    if not tasks:
        raise ValueError(f"setting {settings.setting!r} has no {split} tasks")
    _check_adapter(adapter)
    _, tok, renderer, engine, sampling = _load(settings)
    sampling = dataclasses.replace(sampling, seed=settings.seed)
    judge = _make_judge(settings)

    async def go():
        try:
            if adapter is not None:
                await engine.swap(adapter, 1)
            t0 = time.time()
            episodes = await _play(settings, engine, tok, renderer, [t for t in tasks for _ in range(repeat)],
                                   sampling, judge)
            return episodes, time.time() - t0
        finally:
            await close_step_judge(judge)
            await engine.close()

    episodes, wall = asyncio.run(go())
    judged = {"step_judge": settings.step_judge, "step_weight": settings.weight} if settings.judged else {}
    return {"setting": settings.setting, "split": split, "model": settings.model,
            "adapter": None if adapter is None else str(adapter), "repeat": repeat, "seed": settings.seed,
            "temperature": settings.temperature, **judged, **summarize(episodes, wall, judged=settings.judged),
            "per_task": _per_task(episodes)}


def _bf16_training(device: Any) -> bool:
    """Whether the recipe trains under bf16 autocast: on a CPU with native bf16 (AVX-512 BF16 or AMX), where a
    step is about 4x faster than float32 (15 s against 63 s for 8 tool-call demonstrations here). Elsewhere
    (AVX2-only CPUs, GPUs) the trainer is float32."""
    from slime_ext.engines.local import resolve_dtype

    return device.type == "cpu" and resolve_dtype("auto", device="cpu")[0] == "bfloat16"


def _train_step(bf16: bool, model: Any, optimizer: Any, samples: list[Sample], *, rescore: bool = False,
                **kwargs: Any) -> dict[str, Any]:
    """``trainers.step.train_step``, under bf16 autocast when ``bf16`` (autocast is per thread: entered here).
    ``rescore``: first replace each sample's recorded log-probs with the trainer's own, in its own precision
    (``rescore_samples``)."""
    import contextlib

    import torch

    from slime_ext.trainers.step import train_step

    with torch.autocast("cpu", dtype=torch.bfloat16) if bf16 else contextlib.nullcontext():
        if rescore:
            rescore_samples(model, samples, kwargs.get("pad_id", 0))
        return train_step(model, optimizer, samples, **kwargs)


def rescore_samples(model: Any, samples: list[Sample], pad_id: int = 0) -> None:
    """Set each sample's ``rollout_log_probs`` to the trainer's log-probs of its trained tokens (0 elsewhere),
    before the step. The episodes were just played by these weights, so this is pi_old in the trainer's numerics:
    the PPO ratio starts at exactly 1. Against the engine's recording instead (bf16 or int4 kernels), the ratio
    starts up to a few hundredths off, and clipping it cuts positive and negative advantages unevenly."""
    import torch

    from slime_ext.trainers.step import collate, response_logprobs

    device = next(model.parameters()).device
    with torch.no_grad():
        for s in samples:
            logp = response_logprobs(model, collate([s], pad_id).to(device))[0, : s.response_length].float()
            s.rollout_log_probs = [float(x) if m else 0.0 for x, m in zip(logp.tolist(), s.loss_mask)]


def _check_adapter(adapter: Path | None) -> None:
    if adapter is not None and not (Path(adapter) / "adapter_config.json").is_file():
        raise ValueError(f"{adapter} is not a LoRA adapter folder (no adapter_config.json): give the `adapter` "
                         "folder `env sft` or `env train` wrote")


def _trainable(model_dir: Path, device: Any, lora_rank: int, init: Path | None = None):
    """The float32 model the recipe trains: a new LoRA adapter of ``lora_rank``, or the adapter ``init`` (its own
    rank) trained further."""
    import torch
    from transformers import AutoModelForCausalLM

    from slime_ext.trainers.loop import TrainerConfig, recompute_activations, wrap_lora

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).to(device)
    # Agent episodes are long (a 6-turn GUI episode is ~4-5k tokens): 6.0 GB peak on smollm2 with this (and
    # train_step making logits at trained positions only), 14.5 GB without
    recompute_activations(base)
    base.config.use_cache = False  # this model only trains (the engine generates)
    if init is None:
        return wrap_lora(base, TrainerConfig(lora_rank=lora_rank))
    from peft import PeftModel

    return PeftModel.from_pretrained(base, init, is_trainable=True)


def write_demonstrations(settings: RunSettings, path: Path) -> tuple[Path, Any, list[Sample]]:
    """The train split's demonstrations in ``settings.model``'s chat template (``envs/demos.py``), written to
    ``path`` (``env demos``, and the data of ``sft``): (model directory, tokenizer, samples). ValueError when no
    script earned +1."""
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.envs.demos import demonstrations, write_demos
    from slime_ext.models import resolve_model

    model_dir = resolve_model(settings.model, progress=lambda m: print(m, file=sys.stderr))
    tok = AutoTokenizer.from_pretrained(model_dir)
    samples, skipped = demonstrations(settings.setting, tok, PromptRenderer(tok), max_turns=settings.max_turns,
                                      progress=lambda m: print(m, file=sys.stderr, flush=True))
    if not samples:
        raise ValueError(f"no scripted solution of {settings.setting!r} earned +1; nothing to learn from")
    write_demos(samples, path)
    print(f"[{settings.setting}] {len(samples)} demonstrations of the train split ({len(skipped)} left out) in "
          f"{path}", file=sys.stderr, flush=True)
    return model_dir, tok, samples


def sft(settings: RunSettings, out_dir: Path, config: SftConfig = SftConfig()) -> list[dict[str, Any]]:
    """The warm start: the train split's scripted solutions, played through the environment (``envs/demos.py``,
    written to ``demos.jsonl``), ``config.steps`` optimizer steps of ``config.batch_size`` of them (passes in a new
    order each), the loss on the agent's tokens only; the LoRA adapter goes to ``out_dir/adapter`` (what ``env
    train --init`` and ``env eval --adapter`` take). One metrics dict per optimizer step (``metrics.jsonl``)."""
    import torch

    from slime_ext.algorithms import sft_loss
    from slime_ext.engines.device import resolve_device

    steps, batch_size = config.steps, config.batch_size
    device = resolve_device(settings.device)
    out_dir.mkdir(parents=True, exist_ok=True)
    model_dir, tok, samples = write_demonstrations(settings, out_dir / "demos.jsonl")
    if settings.threads:
        torch.set_num_threads(settings.threads)
    model = _trainable(model_dir, device, config.lora_rank)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    bf16 = _bf16_training(device)
    rng = random.Random(settings.seed)
    torch.manual_seed(settings.seed)
    history: list[dict[str, Any]] = []
    (out_dir / "metrics.jsonl").unlink(missing_ok=True)
    order: list[Sample] = []
    t0 = time.time()
    for step in range(1, steps + 1):
        if len(order) < batch_size:  # a new pass over the demonstrations, in a new order
            order += rng.sample(samples, len(samples))
        batch, order = order[:batch_size], order[batch_size:]
        metrics = _train_step(bf16, model, opt, batch, pad_id=tok.pad_token_id or 0, micro_batch_size=4,
                              loss_fn=sft_loss)
        row = {"step": step, "epoch": round(step * batch_size / len(samples), 2), "nll": round(metrics["nll"], 4),
               "grad_norm": round(metrics["grad_norm"], 4), "elapsed_s": round(time.time() - t0, 1)}
        history.append(row)
        with open(out_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"[{settings.setting}] sft step {step}/{steps} (epoch {row['epoch']:.2f}): loss {row['nll']:.4f}, "
              f"{row['elapsed_s']:.0f}s", file=sys.stderr, flush=True)
    model.save_pretrained(out_dir / "adapter")
    _plot(out_dir / "sft.png", f"{settings.setting}: warm start", [r["step"] for r in history],
          {"loss (nll of the agent's tokens)": [r["nll"] for r in history]}, "optimizer step")
    return history


def default_check(train_tasks: int) -> int:
    """The check slice's default size: 16 train tasks, or a quarter of them when that is fewer."""
    return min(16, train_tasks // 4)


def check_slice(tasks: list[EnvTask], size: int) -> tuple[list[EnvTask], list[EnvTask]]:
    """(the check slice, the rest): ``size`` train tasks RL never samples, on which each new adapter is checked
    before it is kept; a fixed choice (by id) so runs with different seeds check the same tasks."""
    if size <= 0:
        return [], tasks
    if size >= len(tasks):
        raise ValueError(f"the check slice ({size}) must leave train tasks to learn from (there are {len(tasks)})")
    picked = set(random.Random(f"check:{tasks[0].setting}").sample([t.id for t in tasks], size))
    return [t for t in tasks if t.id in picked], [t for t in tasks if t.id not in picked]


MICRO_BATCH_TOKENS = 4096


def micro_batch(samples: list[Sample]) -> int:
    """Episodes per micro-batch: as many of the longest as fit ``MICRO_BATCH_TOKENS`` (at least one). A long GUI
    episode (4-5k tokens) goes alone: its activations at four at once exhausted 24 GiB; eight 500-token tool-call
    episodes go together (fewer, larger matrix products)."""
    return max(1, MICRO_BATCH_TOKENS // max(len(s.tokens) for s in samples))


def passes_check(success: float, best: float, size: int) -> bool:
    """Whether an adapter whose check-slice success is ``success`` is kept: it solves at most one task fewer than
    the best adapter so far (``best``) of the ``size`` checked (greedy play is deterministic, so one task is the
    noise of a changed policy, not of sampling)."""
    return success >= best - 1.5 / size


def group_samples(episodes: list[Episode], group_size: int, rollout_id: int) -> tuple[list[Sample], int]:
    """The samples of ``episodes`` (consecutive groups of ``group_size`` episodes of one task) with their GRPO
    advantage in ``metadata["group_advantage"]``, and how many groups were dropped for constant rewards (no
    relative signal: Slime's ``check_reward_nonzero_std``)."""
    from slime_ext.learning.groups import set_group_advantages

    kept, dropped = [], 0
    for i in range(0, len(episodes), group_size):
        group = [episode_sample(e, rollout_id=rollout_id) for e in episodes[i:i + group_size]]
        if set_group_advantages(group):
            dropped += 1
        else:
            kept += group
    return kept, dropped


def train(settings: RunSettings, out_dir: Path, config: TrainConfig = TrainConfig(),
          init: Path | None = None) -> list[dict[str, Any]]:
    """The training loop (see the module docstring); one metrics dict per round. ``init``: the warm start's
    adapter (None: a new one on the base model)."""
    import torch

    from slime_ext.engines.device import resolve_device
    from slime_ext.learning.objective import resolve_policy_loss

    steps, baseline, group_size = config.steps, config.baseline, config.group_size
    _check_adapter(init)
    loss_fn = resolve_policy_loss(config.policy_loss)  # before minutes of loading: a loss that cannot load says so now
    tasks = list_tasks(settings.setting, "train")
    if not tasks:
        raise ValueError(f"setting {settings.setting!r} has no train tasks")
    checked, tasks = check_slice(tasks, default_check(len(tasks)) if config.check is None else config.check)
    out_dir.mkdir(parents=True, exist_ok=True)
    bf16 = _bf16_training(resolve_device(settings.device))
    model_dir, tok, renderer, engine, sampling = _load(settings)
    judge = _make_judge(settings)  # once for the run: every round's episodes share it
    model = _trainable(model_dir, engine.device, config.lora_rank, init)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=config.lr)
    rng = random.Random(settings.seed)
    history: list[dict[str, Any]] = []
    (out_dir / "metrics.jsonl").unlink(missing_ok=True)
    greedy = dataclasses.replace(sampling, temperature=0.0)

    async def check_success() -> float:
        eps = await _play(settings, engine, tok, renderer, checked, greedy, None, label="check")
        return summarize(eps, 1.0)["success_rate"]

    async def go() -> None:
        start = init
        if start is None:  # a fresh adapter (B = 0: the base model), what a rejected first step goes back to
            start = out_dir / "v0"
            model.save_pretrained(start)
        kept = {"path": start, "weights": _lora_state(model), "opt": copy.deepcopy(opt.state_dict())}
        await engine.swap(start, 0)
        best = await check_success() if checked else None
        if checked:
            print(f"[{settings.setting}] check slice ({len(checked)} train tasks RL never samples, greedy): "
                  f"success {best:.2f} before training", file=sys.stderr, flush=True)
        for step in range(1, steps + 1):
            picked = [rng.choice(tasks) for _ in range(config.tasks_per_step)]
            batch = [t for t in picked for _ in range(group_size)] if baseline == "group" else picked
            params = dataclasses.replace(sampling, seed=rng.randrange(2**31))
            t0 = time.time()
            eps = await _play(settings, engine, tok, renderer, batch, params, judge)
            play_s = time.time() - t0
            if baseline == "group":
                samples, dropped = group_samples(eps, group_size, step)
            else:
                samples, dropped = [episode_sample(e, rollout_id=step) for e in eps], 0
            base = statistics.fmean(s.reward for s in samples) if baseline == "mean" and samples else 0.0
            no_signal = not samples or (baseline == "mean" and len({s.reward for s in samples}) == 1)
            row = {"step": step, **summarize(eps, play_s, judged=settings.judged), "groups_dropped": dropped,
                   "no_signal": no_signal, "trained_tokens": sum(sum(s.loss_mask) for s in samples),
                   "masked_tokens": sum(len(s.loss_mask) - sum(s.loss_mask) for s in samples)}
            if not no_signal:
                t1 = time.time()
                metrics = await asyncio.to_thread(_train_step, bf16, model, opt, samples, rescore=True, baseline=base,
                                                  pad_id=tok.pad_token_id or 0, micro_batch_size=micro_batch(samples),
                                                  loss_fn=loss_fn)
                adapter = out_dir / f"v{step}"
                model.save_pretrained(adapter)
                await engine.swap(adapter, step)
                row.update(loss=round(metrics["loss"], 4), grad_norm=round(metrics["grad_norm"], 4),
                           train_s=round(time.time() - t1, 2), kept=True)
                if checked:
                    score = await check_success()
                    row["check_success"] = score
                    if not passes_check(score, best, len(checked)):
                        row["kept"] = False
                        model.load_state_dict(kept["weights"], strict=False)
                        opt.load_state_dict(kept["opt"])
                        await engine.swap(kept["path"], step)
                    best = max(best, score)
                if row["kept"]:
                    kept = {"path": adapter, "weights": _lora_state(model), "opt": copy.deepcopy(opt.state_dict())}
            history.append(row)
            with open(out_dir / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(_step_line(settings.setting, row, steps), file=sys.stderr, flush=True)
        model.load_state_dict(kept["weights"], strict=False)
        model.save_pretrained(out_dir / "adapter")  # the last adapter the check kept

    async def run() -> None:
        try:
            await go()
        finally:
            await close_step_judge(judge)
            await engine.close()

    asyncio.run(run())
    _plot(out_dir / "train.png", f"{settings.setting}: RL", [r["step"] for r in history],
          {"train success (sampled)": [r["success_rate"] for r in history],
           "check slice success (greedy)": [r.get("check_success") for r in history]}, "step")
    return history


def _lora_state(model) -> dict[str, Any]:
    """A copy of the trainable (LoRA) weights."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if "lora_" in k}


def _step_line(setting: str, row: dict[str, Any], steps: int) -> str:
    """One step's progress line (stderr)."""
    line = (f"[{setting}] step {row['step']}/{steps}: mean reward {row['mean_reward']:+.3f}, success "
            f"{row['success_rate']:.2f}, {row['episodes_per_min']:.1f} episodes/min")
    if row.get("mean_step_score") is not None:
        line += f", mean step score {row['mean_step_score']:+.3f}"
    if row["groups_dropped"]:
        line += f", {row['groups_dropped']} constant group(s) dropped"
    if row["no_signal"]:
        return line + " (no signal: every episode got the same reward, so nothing was learned)"
    line += f", loss {row['loss']:+.4f}, train {row['train_s']:.1f} s"
    if "check_success" in row:
        line += f", check {row['check_success']:.2f}" + ("" if row["kept"] else " (worse: not kept, reverted)")
    return line


def _plot(path: Path, title: str, xs: list[int], series: dict[str, list[float | None]], xlabel: str) -> None:
    """A line plot of ``series`` over ``xs`` (points that are None left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, ys in series.items():
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None]
        if pts:
            ax.plot(*zip(*pts), marker="o", label=name)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
