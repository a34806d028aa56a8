"""Slime's custom generate function for the agent settings (terminal, toolcall, swe, gui):
``--custom-generate-function-path slime_ext.hooks.generate.generate``.

Slime calls ``generate(args, sample, sampling_params, evaluation=False)`` once per sample of its prompt
dataset, inside its default rollout. The sample names its task: ``sample.metadata["setting"]`` and
``["task_id"]`` (``openclaw-rl env export`` writes such a dataset), or ``sample.label`` as the task id with
``setting`` from the ``openclaw_rl_env:`` settings. We play one episode through the SGLang router
(``args.sglang_router_ip/port``, the same ``SGLangEngine`` client the live proxy uses) with the shared agent
loop, and return:

- ``samples: episode`` (default): the given sample filled in: the whole episode, observation tokens in the
  response with loss mask 0 and rollout log-prob 0.0, ``reward`` = the env's outcome (so Slime calls no
  reward model, unless ``--group-rm``: then use ``--custom-rm-path slime_ext.hooks.reward.known_reward``);
- ``samples: step``: one sample per step (fan-out), siblings sharing ``rollout_id`` = the sample's index.

An episode the engine could not finish (SGLang refused or failed) or the browser could not run (gui: no
Chromium on the node, or it died), or a sample that names no known task (logged as an error), comes back ``FAILED`` with ``remove_sample`` set and reward 0.0, never ``ABORTED``
(that status is Slime's, for its own aborts).

Settings (the ``openclaw_rl_env:`` mapping of ``--custom-config-path``): ``setting`` (default: from each
sample), ``max_turns`` (8), ``samples`` (episode | step), ``context_budget`` (tokens; default the engine's),
``run_dir`` (where a setting keeps debugging artifacts on the rollout node: gui screenshots; default none),
``setting_paths`` (settings of the user's own, loaded first: folders, ``.py`` files or modules, as
``openclaw-rl env --setting-path``; ``$OPENCLAW_RL_SETTINGS`` and installed packages' are loaded too),
``vision`` (false; true: the setting's images, gui screenshots, go to the model with its observations: the
checkpoint must be a Qwen-VL family model, ``slime_ext.chat.vision``; SGLang gets them as ``image_data`` and
each sample carries Slime's ``multimodal_inputs`` and ``multimodal_train_inputs`` for the images its tokens
show), ``step_judge`` (``off``; ``heuristic`` or ``openai``: every step is scored by a judge of its next state,
built once per event loop, and the reward becomes ``clip(outcome + step_weight * mean step score, -1, 1)``; the
mean score goes into the sample's ``metadata["step_score"]``, per step with ``samples: step``),
``step_judge_url`` and ``step_judge_model`` (``openai``: the OpenAI-compatible endpoint and its model; the key
from ``$OPENCLAW_RL_JUDGE_KEY`` on the rollout node, never a settings key), ``step_weight`` (in [0, 1]; 0.5
when a step judge is on and it is not given, and it must stay 0 with ``step_judge: off``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import weakref
from typing import Any

from slime_ext.types import Sample

log = logging.getLogger(__name__)

SETTINGS_KEY = "openclaw_rl_env"


@dataclasses.dataclass(frozen=True)
class EnvSettings:
    setting: str | None = None
    max_turns: int = 8
    samples: str = "episode"
    context_budget: int | None = None
    run_dir: str | None = None
    setting_paths: tuple[str, ...] = ()  # settings of the user's own to load first (envs/loader.py)
    vision: bool = False  # the setting's images go to a vision-language model (gui_qwen3vl_8b_rl.sh)
    step_judge: str = "off"  # off | heuristic | openai: a step-wise judge (envs/agent_loop.make_step_judge)
    step_judge_url: str | None = None  # openai: the OpenAI-compatible endpoint (key: $OPENCLAW_RL_JUDGE_KEY)
    step_judge_model: str | None = None  # openai: the judge model's name
    step_weight: float = 0.0  # weight of the mean step score in the reward; from_args: 0.5 with a judge if unset

    @classmethod
    def from_args(cls, args: Any) -> EnvSettings:
        data = getattr(args, SETTINGS_KEY, None) or {}
        if not isinstance(data, dict):
            raise ValueError(f"--custom-config-path: '{SETTINGS_KEY}' must be a mapping, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"--custom-config-path ({SETTINGS_KEY}:): unknown keys {unknown}; known: {sorted(known)}")
        paths = data.get("setting_paths") or ()  # a list, or one string of paths separated by os.pathsep
        paths = [p for p in paths.split(os.pathsep) if p.strip()] if isinstance(paths, str) else paths
        judged = _step_judge_settings(data)
        out = cls(**{**data, "setting_paths": tuple(paths), **judged})
        if out.samples not in ("episode", "step") or out.max_turns < 1 or not isinstance(out.vision, bool):
            raise ValueError(f"{SETTINGS_KEY}: samples must be episode or step, max_turns >= 1 and vision true or "
                             f"false, got {out}")
        return out


def _step_judge_settings(data: dict[str, Any]) -> dict[str, Any]:
    """The step-judge keys of the ``openclaw_rl_env:`` mapping, checked and resolved: YAML's unquoted ``off``
    (read as false) is ``off``; an unset ``step_weight`` is 0.5 with a judge and 0 without."""
    from slime_ext.envs.agent_loop import DEFAULT_STEP_WEIGHT, step_judge_problems

    kind = data.get("step_judge", "off")
    kind = "off" if kind is None or kind is False else kind
    weight = data.get("step_weight")
    names = {"kind": "step_judge", "url": "step_judge_url", "model": "step_judge_model", "weight": "step_weight"}
    problems = step_judge_problems(kind, data.get("step_judge_url"), data.get("step_judge_model"), weight, names)
    if problems:
        raise ValueError(f"--custom-config-path ({SETTINGS_KEY}:): " + "; ".join(problems))
    if weight is None:
        weight = DEFAULT_STEP_WEIGHT if kind != "off" else 0.0
    return {"step_judge": kind, "step_weight": float(weight)}


def task_of(sample: Sample, settings: EnvSettings) -> tuple[str, str]:
    """(setting, task id) named by the sample; ValueError says what is missing."""
    meta = sample.metadata or {}
    setting = meta.get("setting") or settings.setting
    task_id = meta.get("task_id") or sample.label
    if not setting or not task_id:
        raise ValueError("the sample names no task: set metadata {'setting', 'task_id'} (openclaw-rl env export) "
                         f"or label + {SETTINGS_KEY}.setting; got label={sample.label!r}, metadata={meta!r}")
    return str(setting), str(task_id)


def sampling_from_slime(params: dict[str, Any], stop_ids: tuple[int, ...]):
    """Our ``SamplingParams`` from Slime's sampling_params dict (temperature, top_p, max_new_tokens, stops, and
    ``sampling_seed``, which Slime sets for deterministic rollouts)."""
    from slime_ext.engines.base import SamplingParams

    stops = tuple(sorted(set(stop_ids) | set(params.get("stop_token_ids") or ())))
    seed = params.get("sampling_seed")
    return SamplingParams(temperature=float(params.get("temperature", 1.0)), top_p=float(params.get("top_p", 1.0)),
                          max_new_tokens=int(params.get("max_new_tokens", 256)), stop_token_ids=stops,
                          seed=None if seed is None else int(seed))


_CLIENTS: dict[tuple[int, str], Any] = {}  # (event loop, router url) -> SGLangEngine
_RENDERERS: dict[tuple[str, bool], Any] = {}  # (checkpoint, vision) -> its prompt renderer
# event loop -> {(kind, url, model): StepJudge}: one judge per loop (Slime's rollout runs one)
_JUDGES: weakref.WeakKeyDictionary[Any, dict[tuple[str, str | None, str | None], Any]] = weakref.WeakKeyDictionary()


async def _engine(url: str):
    from slime_ext.engines.sglang import SGLangEngine

    key = (id(asyncio.get_running_loop()), url)
    if key not in _CLIENTS:
        _CLIENTS[key] = await SGLangEngine.connect(url)
    return _CLIENTS[key]


def _step_judge(settings: EnvSettings):
    """The step-wise judge the settings name (``agent_loop.step_judge``), built once per event loop; None when off."""
    if settings.step_judge == "off":
        return None
    from slime_ext.envs.agent_loop import make_step_judge, step_judge

    judges = _JUDGES.setdefault(asyncio.get_running_loop(), {})
    key = (settings.step_judge, settings.step_judge_url, settings.step_judge_model)
    if key not in judges:
        judges[key] = step_judge(make_step_judge(*key))
    return judges[key]


def _renderer(path: str, vision: bool):
    """The checkpoint's prompt renderer: its chat template over text, or with images (``VisionRenderer``)."""
    if (path, vision) not in _RENDERERS:
        if vision:
            from slime_ext.chat.vision import VisionRenderer

            _RENDERERS[path, vision] = VisionRenderer.from_pretrained(path)
        else:
            from transformers import AutoTokenizer

            from slime_ext.chat.prompt import PromptRenderer

            _RENDERERS[path, vision] = PromptRenderer(AutoTokenizer.from_pretrained(path))
    return _RENDERERS[path, vision]


async def generate(args: Any, sample: Sample, sampling_params: dict[str, Any],
                   evaluation: bool = False) -> Sample | list[Sample]:
    from slime_ext.chat.prompt import stop_token_ids
    from slime_ext.engines.base import EngineError
    from slime_ext.envs import get_task, make_env
    from slime_ext.envs.agent_loop import ChatSegments, episode_sample, run_episode, step_samples
    from slime_ext.envs.browser import BrowserError
    from slime_ext.envs.loader import load_settings

    settings = EnvSettings.from_args(args)
    load_settings(settings.setting_paths)  # a setting that cannot load is a configuration error: raised
    try:
        setting, task_id = task_of(sample, settings)
        task = get_task(setting, task_id)
    except ValueError as e:  # a bad dataset row: say so, drop it, keep the rollout going
        log.error("sample %s: %s", sample.index, e)
        return _failed(sample, str(e))
    renderer = _renderer(args.hf_checkpoint, settings.vision)
    tok = renderer.tokenizer
    engine = await _engine(f"http://{args.sglang_router_ip}:{args.sglang_router_port}")
    env = make_env(setting, max_turns=settings.max_turns, run_dir=settings.run_dir, vision=settings.vision)
    try:
        ep = await run_episode(engine, tok, ChatSegments(renderer, env.tools), env, task,
                               sampling_from_slime(sampling_params, stop_token_ids(tok)),
                               max_turns=settings.max_turns, context_budget=settings.context_budget,
                               judge=_step_judge(settings), step_weight=settings.step_weight)
    except EngineError as e:
        log.warning("episode of %s/%s failed: %s", setting, task_id, e)
        return _failed(sample, str(e))
    except BrowserError as e:
        log.error("episode of %s/%s failed in the browser: %s", setting, task_id, e)
        return _failed(sample, str(e))
    if settings.samples == "step":
        siblings = step_samples(ep, rollout_id=sample.index)
        shown = _Shown(ep.images, renderer)
        for s, step in zip(siblings, ep.steps):
            s.group_index, s.index, s.prompt = sample.group_index, sample.index, sample.prompt
            s.response = tok.decode(s.tokens[-s.response_length:], skip_special_tokens=True)
            shown.attach(s, step.images)
        return siblings
    filled = episode_sample(ep, rollout_id=sample.index)
    for name in ("tokens", "response_length", "loss_mask", "rollout_log_probs", "reward", "status", "label",
                 "weight_versions", "rollout_id"):
        setattr(sample, name, getattr(filled, name))
    sample.metadata = {**(sample.metadata or {}), **filled.metadata}
    sample.response = tok.decode(ep.response_ids, skip_special_tokens=False)
    _Shown(ep.images, renderer).attach(sample, len(ep.images))
    return sample


class _Shown:
    """An episode's images, decoded and processed once, for each of its samples."""

    def __init__(self, images: list[bytes], renderer: Any) -> None:
        self.pil: list[Any] = []
        self.tensors: dict[str, Any] = {}
        if images:
            from slime_ext.chat.vision import load_images

            self.pil, self.tensors = load_images(images), renderer.train_inputs(images)

    def attach(self, sample: Sample, n: int) -> None:
        """Slime's multimodal fields for a sample whose tokens hold the first ``n`` images' placeholder runs: the
        images (``multimodal_inputs``) and the vision tower's inputs for them (``multimodal_train_inputs``)."""
        if n:
            from slime_ext.chat.vision import first_images

            sample.multimodal_inputs = {"images": self.pil[:n]}
            sample.multimodal_train_inputs = first_images(self.tensors, n)


def _failed(sample: Sample, error: str) -> Sample:
    """The sample back as FAILED, removed from training, reward 0.0, the reason in its metadata."""
    sample.status, sample.remove_sample, sample.reward = Sample.Status.FAILED, True, 0.0
    sample.response = sample.response or ""
    sample.metadata = {**(sample.metadata or {}), "error": error}
    return sample
