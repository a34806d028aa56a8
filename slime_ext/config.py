"""One typed settings object for serving and learning. The CLI flags, a YAML file (``--config``) and
Slime's ``openclaw_rl:`` mapping all map onto it; its learning settings are ``LearningConfig``'s
(``trainers/learning.py``), inherited, so each is declared once, never as scattered env reads."""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from slime_ext.engines.device import check_device_spec
from slime_ext.trainers.canary import CanaryConfig
from slime_ext.trainers.learning import POLICY_LOSSES, LearningConfig
from slime_ext.trainers.teachability import TeachabilityConfig
from slime_ext.types import Method

if TYPE_CHECKING:
    from slime_ext.trainers.loop import TrainerConfig

_CANARY = CanaryConfig()
_TEACH = TeachabilityConfig()


BUILTIN_JUDGES = ("heuristic", "self", "openai", "off")


@dataclass
class ServeConfig(LearningConfig):
    model: str = "smollm2-135m"
    host: str = "127.0.0.1"
    port: int = 30000
    run_dir: str = ""  # default: runs/<timestamp>
    api_key: str = ""  # also OPENCLAW_RL_API_KEY or SGLANG_API_KEY
    user_keys: dict[str, str] = field(default_factory=dict)  # per-user API keys: {user name: key}
    served_model_name: str = ""  # the id /v1/models reports; default: the --model value
    dtype: str = "auto"  # auto = float32 on CPUs, bfloat16 on CUDA (see docs/engine.md, the dtype section)
    device: str = "auto"  # engine and trainer: auto (the first CUDA GPU, else the CPU), cpu, cuda or cuda:N
    # who serves: "local" (the embedded engine) or "sglang" (an SGLang server at sglang_url, started with
    # --enable-lora, on the same model; the trainer's LoRA adapters are loaded into it in place)
    engine: str = "local"
    sglang_url: str = ""
    threads: int = 0  # 0: all cores
    max_batch_size: int = 32
    prefix_cache_tokens: int = 32768  # KV of recent prompts kept for reuse; 0 turns it off
    context_length: int = 0  # 0: the model's own
    # a prompt past the context: "trim" (cut the middle of the longest system message; chat/overflow.py) or "error"
    context_overflow: str = "trim"
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
    # OpenAI-compatible endpoint), "off", or a user's backend: module:attr, or an installed package's name
    judge: str = "heuristic"
    judge_url: str = ""
    judge_model: str = ""
    judge_key: str = ""  # also OPENCLAW_RL_JUDGE_KEY; never logged
    judge_votes: int = 0  # 0: the backend's default (3 for model judges, 1 for the heuristic)
    judge_timeout_s: float = 60.0
    judge_concurrency: int = 4
    # learning: every setting of trainers/learning.py's LearningConfig (inherited: declared there once), and
    # these, mapped onto the trainer's nested configs
    kl_coef: float = 0.0  # KL to the initial policy (the base model); 0: off
    # the canary (trainers/canary.py): a new version that regresses on it is not served
    canary: bool = _CANARY.enabled
    canary_max_nll_rise: float = _CANARY.max_nll_rise  # nats/token of the reference answers
    canary_min_distinct_ratio: float = _CANARY.min_distinct_ratio  # x the served version's distinct-2
    canary_max_eos_drop: float = _CANARY.max_eos_drop  # fall of the fraction of generations that stop
    canary_max_length_ratio: float = _CANARY.max_length_ratio  # x the served version's mean length
    canary_max_answered_drop: float = _CANARY.max_answered_drop  # canary questions answered, since the first version
    canary_max_forgotten: float = _CANARY.max_forgotten  # of the facts the first version recalled
    # does the hinted teacher follow each hint (trainers/teachability.py; docs/learning.md)
    teacher_check: bool = _TEACH.enabled
    teacher_min_gap: float = _TEACH.min_gap  # nats/token the hint must add to the teacher's own answer
    teacher_check_tokens: int = _TEACH.max_new_tokens  # length of the teacher's greedy answer
    teacher_checks_per_hint: int = _TEACH.per_hint  # prompts a hint is measured on, then its median is reused
    unfollowed_hints: str = _TEACH.unfollowed  # "drop" (not trained), "skip" (no teacher term) or "train"

    def trainer_config(self) -> TrainerConfig:
        """The trainer's settings, taken from these: the learning settings as they are, and the nested ones."""
        from slime_ext.algorithms import PolicyLossConfig
        from slime_ext.trainers.loop import TrainerConfig

        learning = {f.name: getattr(self, f.name) for f in dataclasses.fields(LearningConfig)}
        return TrainerConfig(**learning, canary=self.canary_config(), teacher_check=self.teacher_check_config(),
                             loss=PolicyLossConfig(kl_coef=self.kl_coef))

    def teacher_check_config(self) -> TeachabilityConfig:
        """The trainer's teacher-check settings, taken from these."""
        return TeachabilityConfig(self.teacher_check, self.teacher_min_gap, self.teacher_check_tokens,
                                  self.teacher_checks_per_hint, self.unfollowed_hints)

    def canary_config(self) -> CanaryConfig:
        """The trainer's canary settings, taken from these."""
        return CanaryConfig(enabled=self.canary, max_nll_rise=self.canary_max_nll_rise,
                            min_distinct_ratio=self.canary_min_distinct_ratio, max_eos_drop=self.canary_max_eos_drop,
                            max_length_ratio=self.canary_max_length_ratio,
                            max_answered_drop=self.canary_max_answered_drop,
                            max_forgotten=self.canary_max_forgotten)

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
        self._validate_plugins()
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
        check_device_spec(self.device)
        if self.context_overflow not in ("trim", "error"):
            raise ValueError(f"context_overflow {self.context_overflow!r}: expected trim or error")
        self._validate_engine()
        self._validate_http()
        return self

    def _validate_engine(self) -> None:
        """``engine: sglang`` needs its URL, and LoRA training (SGLang loads adapters, not whole weights)."""
        if self.engine not in ("local", "sglang"):
            raise ValueError(f"engine {self.engine!r}: expected local or sglang")
        if self.engine == "sglang" and not self.sglang_url.startswith(("http://", "https://")):
            raise ValueError("engine sglang needs sglang_url, the SGLang server's http:// address (--sglang-url)")
        if self.engine == "sglang" and self.method != "none" and self.lora_rank <= 0:
            raise ValueError("engine sglang trains LoRA adapters (it loads them into SGLang in place): lora_rank "
                             "must be > 0")

    def _validate_plugins(self) -> None:
        """Built-in judge and policy loss, or the user's that load (``slime_ext.plugins``: the error says why not)."""
        from slime_ext.plugins import check_choice

        check_choice(self.judge, "judge", BUILTIN_JUDGES, "it must make the backend from the settings")
        check_choice(self.policy_loss, "loss", POLICY_LOSSES, "it is called like algorithms/ppo.py's policy_loss")

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
