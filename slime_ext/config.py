"""One typed settings object for serving. The CLI flags and a YAML file (``--config``) both map
onto it; later issues add the trainer's and Slime's settings here, never as scattered env reads."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_ext.trainers.canary import CanaryConfig
from slime_ext.trainers.replay import ReplayConfig
from slime_ext.trainers.teachability import TeachabilityConfig
from slime_ext.types import Method

if TYPE_CHECKING:
    from slime_ext.trainers.loop import TrainerConfig

_CANARY = CanaryConfig()
_TEACH = TeachabilityConfig()
_REPLAY = ReplayConfig()


@dataclass
class ServeConfig:
    model: str = "smollm2-135m"
    host: str = "127.0.0.1"
    port: int = 30000
    run_dir: str = ""  # default: runs/<timestamp>
    api_key: str = ""  # also OPENCLAW_RL_API_KEY or SGLANG_API_KEY
    user_keys: dict[str, str] = field(default_factory=dict)  # per-user API keys: {user name: key}
    served_model_name: str = ""  # the id /v1/models reports; default: the --model value
    dtype: str = "auto"  # auto = float32 on CPUs (see docs/engine.md, the dtype section)
    threads: int = 0  # 0: all cores
    max_batch_size: int = 32
    prefix_cache_tokens: int = 32768  # KV of recent prompts kept for reuse; 0 turns it off
    context_length: int = 0  # 0: the model's own
    max_tokens_cap: int = 1024
    default_max_tokens: int = 512
    sampling_defaults: str = "model"  # temperature / top_p of a request naming none: "model" (its generation_config.json) or "openai" (1.0 / 1.0)
    max_body_mb: float = 8.0
    # HTTP hardening (docs/security.md)
    header_timeout_s: float = 10.0  # a request head (line and headers) must arrive within this
    body_timeout_s: float = 60.0  # a request body must arrive within this after its head (else 408)
    keepalive_timeout_s: float = 75.0  # idle keep-alive connections are closed after this
    max_connections: int = 1000  # past it, a new connection closes the longest-waiting idle one
    allowed_origins: list[str] = field(default_factory=list)  # web origins allowed to call the API (CORS)
    allowed_hosts: list[str] = field(default_factory=list)  # Host names accepted besides loopback ones
    session_idle_timeout_s: float = 1800.0
    max_open_sessions: int = 10000
    ephemeral_markers: list[str] = field(default_factory=lambda: ["<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>"])
    log_level: str = "info"
    status_interval_s: float = 5.0  # live status line (a terminal) or a status log line when it changes; 0: off
    # judging: "heuristic", "self" (the served model with its adapter disabled), "openai" (any
    # OpenAI-compatible endpoint) or "off"
    judge: str = "heuristic"
    judge_url: str = ""
    judge_model: str = ""
    judge_key: str = ""  # also OPENCLAW_RL_JUDGE_KEY; never logged
    judge_votes: int = 0  # 0: the backend's default (3 for model judges, 1 for the heuristic)
    judge_timeout_s: float = 60.0
    judge_concurrency: int = 4
    # learning: "combine" (verdicts and hints), "binary" (verdicts: Binary RL), "opd" (hints: On-Policy
    # Distillation), all in a trainer process; or "none" (serve and record only)
    method: str = Method.COMBINE.value
    batch_size: int = 4
    lora_rank: int = 16  # 0: full weights
    lr: float = 5e-4  # chosen by the personalization experiment v2 (experiments/personalization/README.md)
    max_staleness: int = 4
    kl_coef: float = 0.0  # KL to the initial policy (the base model); 0: off
    baseline: str = "none"  # advantage baseline: "none" (advantage = verdict) or "running" (EMA of verdicts)
    keep_checkpoints: int = 3  # versions kept with their weights; older ones keep their trainer state only; 0: all
    # OPD / Combine
    teacher: str = "base"  # who scores the hinted prompt: "base" (the initial model) or "policy" (the current one)
    w_rl: float = 1.0  # Combine: weight of the verdict term
    w_opd: float = 1.0  # Combine / OPD: weight of the teacher term
    opd_clip: float = 5.0  # bound on |teacher - rollout| log-prob per token
    # "token" (teacher - rollout in the advantage), or at every position over the teacher's top-k plus a tail
    # bin: "topk" (reverse KL), "forward_kl" or "jsd" (JSD(jsd_beta)); see docs/learning.md
    distill: str = "token"
    topk: int = 20  # k >= 20, as the top-k OPD recipes use
    topk_support: str = "teacher"  # the teacher's top-k, or the student's (topk_select: or their overlap)
    # distill "topk_select" (upstream's recipe; docs/learning.md): candidate hints per turn, and how one is chosen
    hint_m: int = 1
    topk_select_rule: str = "sequence_optimal"
    # the canary (trainers/canary.py): a new version that regresses on it is not served
    canary: bool = _CANARY.enabled
    canary_max_nll_rise: float = _CANARY.max_nll_rise  # nats/token of the reference answers
    canary_min_distinct_ratio: float = _CANARY.min_distinct_ratio  # x the served version's distinct-2
    canary_max_eos_drop: float = _CANARY.max_eos_drop  # fall of the fraction of generations that stop
    canary_max_length_ratio: float = _CANARY.max_length_ratio  # x the served version's mean length
    canary_max_answered_drop: float = _CANARY.max_answered_drop  # canary questions answered, since the first version
    jsd_beta: float = 0.5
    # groups of fresh on-policy samples per hinted turn, drawn by the trainer (1: the recorded response alone)
    group_size: int = 1
    group_temperature: float = 0.7
    group_max_new_tokens: int = 64
    group_estimator: str = "grpo"  # "grpo" or "drgrpo"
    implicit_reward_scale: float = 1.0  # a fresh sample's reward: tanh(mean hinted-teacher gap / this)
    sft_coef: float = 0.0  # context distillation: SFT on the hinted teacher's own answers (0: off)
    sft_samples: int = 1  # the teacher's answers per hinted turn
    # does the hinted teacher follow each hint (trainers/teachability.py; docs/learning.md)
    teacher_check: bool = _TEACH.enabled
    teacher_min_gap: float = _TEACH.min_gap  # nats/token the hint must add to the teacher's own answer
    teacher_check_tokens: int = _TEACH.max_new_tokens  # length of the teacher's greedy answer
    teacher_checks_per_hint: int = _TEACH.per_hint  # prompts a hint is measured on, then its median is reused
    unfollowed_hints: str = "drop"  # "drop" (not trained), "skip" (no teacher term) or "train"; by the experiment v2
    # preference replay (trainers/replay.py; docs/learning.md): earlier turns per user re-taught under all
    # of the user's standing preferences, and optimizer passes per step within a time budget
    replay_turns: int = _REPLAY.turns
    replay_steps: int = _REPLAY.steps
    replay_budget_s: float = _REPLAY.budget_s

    def trainer_config(self) -> TrainerConfig:
        """The trainer's settings, taken from these: every setting of the same name, and the nested ones."""
        from slime_ext.algorithms import PolicyLossConfig
        from slime_ext.trainers.loop import TrainerConfig

        nested = {"canary": self.canary_config(), "teacher_check": self.teacher_check_config(),
                  "loss": PolicyLossConfig(kl_coef=self.kl_coef)}
        mine = {f.name for f in dataclasses.fields(self)}
        same = {f.name: getattr(self, f.name) for f in dataclasses.fields(TrainerConfig)
                if f.name in mine and f.name not in nested}
        return TrainerConfig(**same, **nested)

    def teacher_check_config(self) -> TeachabilityConfig:
        """The trainer's teacher-check settings, taken from these."""
        return TeachabilityConfig(self.teacher_check, self.teacher_min_gap, self.teacher_check_tokens,
                                  self.teacher_checks_per_hint, self.unfollowed_hints)

    def canary_config(self) -> CanaryConfig:
        """The trainer's canary settings, taken from these."""
        return CanaryConfig(enabled=self.canary, max_nll_rise=self.canary_max_nll_rise,
                            min_distinct_ratio=self.canary_min_distinct_ratio, max_eos_drop=self.canary_max_eos_drop,
                            max_length_ratio=self.canary_max_length_ratio,
                            max_answered_drop=self.canary_max_answered_drop)

    def resolved_run_dir(self) -> Path:
        return Path(self.run_dir or os.path.join("runs", time.strftime("%Y%m%d-%H%M%S")))

    def api_keys(self) -> tuple[str, ...]:
        key = self.api_key or os.environ.get("OPENCLAW_RL_API_KEY") or os.environ.get("SGLANG_API_KEY") or ""
        return (key,) if key else ()

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str) -> ServeConfig:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"{source}: unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(names))}")
        return cls(**data).validated()

    def validated(self) -> ServeConfig:
        """Return self, or raise ValueError naming the setting that cannot work."""
        if self.judge not in ("heuristic", "self", "openai", "off"):
            raise ValueError(f"judge {self.judge!r}: expected heuristic, self, openai or off")
        if self.judge == "openai" and (not self.judge_url or not self.judge_model):
            raise ValueError("judge openai needs judge_url and judge_model (--judge-url, --judge-model)")
        Method.parse(self.method)
        from slime_ext.models.generation import CHOICES

        if self.sampling_defaults not in CHOICES:
            raise ValueError(f"sampling_defaults {self.sampling_defaults!r}: expected {' or '.join(CHOICES)}")
        trainer = self.trainer_config()
        trainer.validate()  # every trainer setting, named (TrainerConfig.validate)
        if self.judge == "self" and self.method != "none" and self.lora_rank <= 0:
            raise ValueError("judge self needs LoRA training (--lora-rank > 0): the frozen judge is the base model "
                             "with the adapter disabled, and full-weight training leaves no frozen base; use "
                             "--judge openai with a separate judge server, or --judge heuristic")
        if self.judge_concurrency < 1:
            raise ValueError(f"judge_concurrency must be at least 1, got {self.judge_concurrency}")
        if not isinstance(self.user_keys, dict) or not all(isinstance(k, str) and isinstance(v, str) and k and v
                                                           for k, v in self.user_keys.items()):
            raise ValueError("user_keys must map user names to non-empty API keys")
        trainer.canary.validate()
        self._validate_http()
        return self

    def _validate_http(self) -> None:
        from slime_ext.api.policy import normalize_origin

        for name in ("header_timeout_s", "body_timeout_s", "keepalive_timeout_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_connections < 16:
            raise ValueError(f"max_connections must be at least 16, got {self.max_connections}")
        for name in ("allowed_origins", "allowed_hosts"):
            value = getattr(self, name)
            if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
                raise ValueError(f"{name} must be a list of non-empty strings")
        for origin in self.allowed_origins:
            normalize_origin(origin)  # raises ValueError naming the origin


def load_yaml(path: str) -> dict[str, Any]:
    import yaml

    with open(path) as f:
        data = yaml.safe_load(f) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of settings")
    return {k.replace("-", "_"): v for k, v in data.items()}
