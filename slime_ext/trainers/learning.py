"""The learning settings, declared once (issue #15 item 9): what the trainer learns and how.

``ServeConfig`` (the CLI, ``serve --config``, Slime's ``openclaw_rl:`` mapping) and the trainer's
``TrainerConfig`` both inherit these fields, so each is written once, with one default (the
product's, chosen by the personalization experiment v2: ``experiments/personalization/README.md``)
and one validation. Settings with a nested config of their own (the canary, the teacher check, the
policy loss) are mapped by ``ServeConfig`` onto the trainer's nested configs. Torch-free: the CLI
imports it for its choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from slime_ext.trainers.replay import ReplayConfig
from slime_ext.types import ESTIMATORS, SELECT_RULES, VERDICT_CREDIT, Method

if TYPE_CHECKING:
    from slime_ext.algorithms import AdvantageWeights

TEACHERS = ("base", "policy")  # who scores the hinted prompt: the initial model, or the current policy
BASELINES = ("none", "running")  # advantage = verdict, or verdict - EMA of earlier verdicts
DISTILL = ("token", "topk", "forward_kl", "jsd", "topk_select")  # the teacher term (docs/learning.md)
TOPK_SUPPORTS = ("teacher", "student", "overlap")  # whose top-k (overlap: topk_select only)
POLICY_LOSSES = ("ppo",)  # the built-in policy loss (algorithms/ppo.py); else the user's, module:attr


@dataclass(frozen=True)
class GroupConfig:
    """The trainer's groups of fresh samples per hinted turn (``trainers/groups.py``)."""

    size: int = 1  # members per judged turn, the recorded response included; 1: no groups
    temperature: float = 0.7  # the trainer's own sampling temperature for fresh samples (0: greedy)
    max_new_tokens: int = 64
    estimator: str = "grpo"  # "grpo" or "drgrpo" (algorithms/groups.py)
    reward_scale: float = 1.0  # nats of mean teacher gap per unit of implicit reward (before tanh)


@dataclass
class LearningConfig:
    # "combine" (verdicts and hints), "binary" (verdicts: Binary RL), "opd" (hints: On-Policy Distillation),
    # or "none" (serve and record only)
    method: str = Method.COMBINE.value
    batch_size: int = 4
    lr: float = 5e-4  # chosen by the personalization experiment v2
    lora_rank: int = 16  # 0: full weights
    max_staleness: int = 4  # a backlog is taken in steps large enough that no turn waits longer (versions)
    baseline: str = "none"  # "none" or "running" (EMA of earlier verdicts; see algorithms/advantages.py)
    keep_checkpoints: int = 3  # newest versions kept whole; older ones keep only trainer_state.json (0: all)
    # the policy-gradient loss: "ppo" (algorithms/ppo.py: clipped ratio, dual clip) or the user's, named by
    # module:attr or an installed openclaw_rl.losses name, called like policy_loss (docs/extending.md)
    policy_loss: str = POLICY_LOSSES[0]
    # OPD / Combine
    teacher: str = "base"  # "base" (frozen initial model) or "policy" (the current policy: self-distillation)
    w_rl: float = 1.0  # Combine: weight of the verdict term
    w_opd: float = 1.0  # Combine / OPD: weight of the teacher term
    opd_clip: float = 5.0  # bound on |teacher - rollout| log-prob per token
    # where a -1 lands on a turn the teacher scored: "uniform" (every token) or "teacher" (where the hinted
    # teacher disagrees; algorithms/advantages.py)
    verdict_credit: str = "uniform"
    # "token": the teacher term in the advantage; at every position over the teacher's top-k plus a
    # tail bin: "topk" (reverse KL), "forward_kl" or "jsd" (JSD(jsd_beta)); see algorithms/divergence.py;
    # "topk_select": upstream's recipe (algorithms/topk_select.py), opd_clip its log-prob-difference clip
    distill: str = "token"
    topk: int = 20  # k of the top-k distillation (>= 20, as the top-k OPD recipes use)
    # whose top-k: the teacher's, or the student's (keeps the teacher's full log-probs); topk_select: or "overlap"
    topk_support: str = "teacher"
    hint_m: int = 1  # topk_select: candidate hints per turn, from the hint judge's votes
    topk_select_rule: str = "sequence_optimal"  # topk_select: "shortest", "token_optimal" or "sequence_optimal"
    jsd_beta: float = 0.5  # distill jsd: 0 is forward KL, 1 reverse KL
    # groups of fresh on-policy samples per hinted turn (trainers/groups.py); 1: the recorded response alone
    group_size: int = GroupConfig.size
    group_temperature: float = GroupConfig.temperature  # the trainer's sampling temperature for fresh samples
    group_max_new_tokens: int = GroupConfig.max_new_tokens
    group_estimator: str = GroupConfig.estimator  # "grpo" ((r - mean) / std) or "drgrpo" (r - mean)
    implicit_reward_scale: float = GroupConfig.reward_scale  # a fresh sample's reward: tanh(gap / this)
    # context distillation: SFT on sft_samples answers of the hinted teacher per hinted turn, weight sft_coef (0: off)
    sft_coef: float = 0.0
    sft_samples: int = 1
    # earlier turns replayed under each user's standing preferences, K passes per step (trainers/replay.py)
    replay_turns: int = ReplayConfig.turns
    replay_steps: int = ReplayConfig.steps
    replay_budget_s: float = ReplayConfig.budget_s

    @property
    def topk_coef(self) -> float:
        """Weight of the top-k distillation loss (``w_opd``, when it replaces the token term)."""
        from slime_ext.algorithms import AdvantageWeights

        if self.distill == "token":
            return 0.0
        return AdvantageWeights.for_method(self.method, self.w_rl, self.w_opd, self.opd_clip, self.verdict_credit).w_opd

    @property
    def divergence(self) -> str:
        """The divergence of the distillation loss (``algorithms/divergence.py``)."""
        return "reverse_kl" if self.distill in ("token", "topk") else self.distill

    @property
    def weights(self) -> AdvantageWeights:
        """The advantage weights; with top-k distillation the teacher term is the separate loss."""
        from slime_ext.algorithms import AdvantageWeights

        w = AdvantageWeights.for_method(self.method, self.w_rl, self.w_opd, self.opd_clip, self.verdict_credit)
        return AdvantageWeights(w.w_rl, 0.0, w.opd_clip, w.verdict_credit) if self.distill != "token" else w

    @property
    def replay(self) -> ReplayConfig:
        return ReplayConfig(self.replay_turns, self.replay_steps, self.replay_budget_s)

    @property
    def groups(self) -> GroupConfig:
        return GroupConfig(self.group_size, self.group_temperature, self.group_max_new_tokens, self.group_estimator,
                           self.implicit_reward_scale)

    def validate(self) -> None:
        """Raise ValueError naming the setting that cannot work (``method`` may be "none": serving only)."""
        Method.parse(self.method)
        for name, choices in (("teacher", TEACHERS), ("topk_support", TOPK_SUPPORTS), ("baseline", BASELINES),
                              ("distill", DISTILL), ("group_estimator", ESTIMATORS),
                              ("verdict_credit", VERDICT_CREDIT)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} {getattr(self, name)!r}: expected one of {', '.join(choices)}")
        if self.topk < 1 or self.batch_size < 1:
            raise ValueError(f"topk and batch_size must be at least 1, got {self.topk} and {self.batch_size}")
        if self.w_rl < 0 or self.w_opd < 0 or self.opd_clip <= 0:
            raise ValueError("w_rl and w_opd must be >= 0 and opd_clip > 0")
        if self.lora_rank < 0 or self.max_staleness < 0 or self.lr <= 0:
            raise ValueError("lora_rank and max_staleness must be >= 0 and lr > 0")
        self._validate_topk_select()
        if not 0.0 <= self.jsd_beta <= 1.0:
            raise ValueError(f"jsd_beta must be in [0, 1], got {self.jsd_beta}")
        if self.group_size < 1 or self.group_max_new_tokens < 1 or self.group_temperature < 0:
            raise ValueError("group_size and group_max_new_tokens must be >= 1 and group_temperature >= 0")
        if self.implicit_reward_scale <= 0:
            raise ValueError(f"implicit_reward_scale must be > 0, got {self.implicit_reward_scale}")
        if self.sft_coef < 0 or self.sft_samples < 1:
            raise ValueError(f"sft_coef must be >= 0 and sft_samples >= 1; got {self.sft_coef} and {self.sft_samples}")
        if (self.group_size > 1 or self.sft_coef) and not Method.parse(self.method).uses_hints:
            raise ValueError("group_size > 1 and sft_coef need method opd or combine: they need the hinted teacher, "
                             "and binary judges no hints")
        self.replay.validate(self.method, self.distill)

    def _validate_topk_select(self) -> None:
        """The settings only ``distill: topk_select`` uses (``hint_m``, ``topk_select_rule``, support ``overlap``)."""
        if self.topk_select_rule not in SELECT_RULES:
            raise ValueError(f"topk_select_rule {self.topk_select_rule!r}: expected one of {', '.join(SELECT_RULES)}")
        if self.hint_m < 1:
            raise ValueError(f"hint_m must be >= 1; got {self.hint_m}")
        if self.distill != "topk_select" and (self.hint_m > 1 or self.topk_support == "overlap"):
            raise ValueError(f"hint_m > 1 and topk_support overlap need distill topk_select (distill is {self.distill})")
        if self.distill == "topk_select" and not Method.parse(self.method).uses_hints:
            raise ValueError("distill topk_select needs method opd or combine: it distills hinted teachers, and "
                             "binary judges no hints")
