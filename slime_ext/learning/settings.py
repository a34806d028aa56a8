"""The learning settings, each declared once (``slime_ext.settings``): what the trainer learns and how.

``LearningConfig`` holds them; ``ServeConfig`` (``config.py``: the CLI, ``serve --config``, Slime's
``openclaw_rl:`` mapping) adds the serving ones, and the embedded trainer's ``TrainerConfig`` adds
what only it has. A component is built from its own section: the groups of fresh samples
(``GroupConfig``), preference replay (``ReplayConfig``), the teacher check (``TeacherCheckConfig``)
and the canary (``CanaryConfig``). The defaults are the product's, chosen by the personalization
experiment v2 (``experiments/personalization/README.md``). Torch-free: the CLI imports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from slime_ext.settings import Driver, flat_keys, section, setting
from slime_ext.types import (
    Baseline,
    Distill,
    Estimator,
    Method,
    SelectRule,
    Teacher,
    TopkSupport,
    Unfollowed,
    VerdictCredit,
)

LEARNING, DISTILLATION = "learning", "distillation and groups"
EMBEDDED = Driver.EMBEDDED
BUILTIN_POLICY_LOSS = "ppo"  # algorithms/ppo.py's policy_loss; anything else is the user's, module:attr


@flat_keys
@dataclass(frozen=True)
class GroupConfig:
    """Groups of fresh on-policy samples per hinted turn (``learning/groups.py``)."""

    size: int = setting(1, "samples per hinted turn: the recorded response plus this minus 1 fresh samples of "
                           "the current policy drawn by the trainer, with group-normalized advantages; 1: no groups",
                        key="group_size", group=DISTILLATION)
    temperature: float = setting(0.7, "the trainer's sampling temperature for fresh group samples (0: greedy)",
                                 key="group_temperature", group=DISTILLATION)
    max_new_tokens: int = setting(64, "most tokens of a fresh group sample", key="group_max_new_tokens",
                                  group=DISTILLATION)
    estimator: Estimator = setting(Estimator.GRPO, "group advantage: grpo ((r - mean) / std) or drgrpo (r - mean)",
                                   key="group_estimator", group=DISTILLATION)
    reward_scale: float = setting(1.0, "a fresh sample's reward is tanh(mean hinted-teacher minus student log-prob "
                                       "per token / this)", key="implicit_reward_scale", group=DISTILLATION)

    def validate(self) -> None:
        if self.size < 1 or self.max_new_tokens < 1 or self.temperature < 0:
            raise ValueError("group_size and group_max_new_tokens must be >= 1 and group_temperature >= 0")
        if self.reward_scale <= 0:
            raise ValueError(f"implicit_reward_scale must be > 0, got {self.reward_scale}")


@flat_keys
@dataclass(frozen=True)
class ReplayConfig:
    """Preference replay (``learning/replay.py``)."""

    _SLIME = "replayed turns are extra samples, and Slime's step takes a fixed number of them"
    turns: int = setting(0, "preference replay (opd / combine): per user of a training step, this many of the "
                            "user's earlier turns re-taught by the teacher shown all of the user's standing "
                            "preferences (docs/learning.md, 'Preferences persist'); 0: off",
                         key="replay_turns", group=DISTILLATION, drivers=EMBEDDED, slime=_SLIME)
    steps: int = setting(1, "optimizer passes over the step's samples (and replayed turns) per training step",
                         key="replay_steps", group=DISTILLATION, drivers=EMBEDDED,
                         slime="Slime runs one optimizer step per rollout (--global-batch-size)")
    budget_s: float = setting(5.0, "no further pass starts once a step's passes took this many seconds",
                              key="replay_budget_s", group=DISTILLATION, drivers=EMBEDDED,
                              slime="Slime runs one optimizer step per rollout")

    def validate(self, method: str, distill: str = Distill.TOKEN) -> None:
        method, distill = Method.parse(method), Distill.parse(distill, "distill")
        if self.turns < 0 or self.steps < 1 or self.budget_s <= 0:
            raise ValueError(f"replay_turns must be >= 0, replay_steps >= 1 and replay_budget_s > 0; got "
                             f"{self.turns}, {self.steps} and {self.budget_s}")
        if self.turns and not method.uses_hints:
            raise ValueError("replay_turns > 0 needs method opd or combine: a replayed turn is taught by the "
                             "teacher under the user's preferences, and binary has no teacher")
        if self.turns and distill is Distill.TOPK_SELECT:
            raise ValueError("replay_turns > 0 does not work with distill topk_select: a replayed turn has one "
                             "teacher (all the user's preferences), not candidate hints to select among")


@flat_keys
@dataclass(frozen=True)
class TeacherCheckConfig:
    """Does the hinted teacher follow each hint (``learning/teachability.py``)."""

    enabled: bool = setting(True, "measure whether the hinted teacher follows each hint (its own greedy answer "
                                  "with vs without the hint; docs/learning.md, 'What the teacher can teach')",
                            key="teacher_check", group=DISTILLATION)
    min_gap: float = setting(0.15, "a hint is followed when it adds at least this many nats/token to the teacher's "
                                   "own answers (median over its prompts) and changes the answer",
                             key="teacher_min_gap", group=DISTILLATION)
    max_new_tokens: int = setting(48, "length of the teacher's greedy answer", key="teacher_check_tokens",
                                  group=DISTILLATION)
    per_hint: int = setting(4, "distinct prompts a hint is measured on; later turns with it reuse its median; "
                               "0: every prompt", key="teacher_checks_per_hint", group=DISTILLATION)
    unfollowed: Unfollowed = setting(Unfollowed.DROP, "a turn whose hint the teacher does not follow (shown in "
                                                      "records, /healthz, /metrics): drop (not trained, nor replayed), "
                                                      "skip (no teacher term; its verdict still trains) or train "
                                                      "(distilled anyway)", key="unfollowed_hints", group=DISTILLATION)

    def validate(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"teacher_check_tokens must be >= 1, got {self.max_new_tokens}")
        if self.per_hint < 0:
            raise ValueError(f"teacher_checks_per_hint must be >= 0, got {self.per_hint}")
        if self.min_gap != self.min_gap:  # NaN
            raise ValueError("teacher_min_gap must be a number")


@flat_keys
@dataclass(frozen=True)
class CanaryConfig:
    """When a new version is refused (``trainers/canary.py: regressions``), and what the probe costs."""

    _SLIME = ("Slime's train.py pushes every step's weights to SGLang (actor_model.update_weights()) and no hook can "
              "hold a version back (docs/slime.md); set canary: false")
    enabled: bool = setting(True, "probe each trained version on a held-out canary set before it is served and keep "
                                  "the previous one if it regresses (docs/learning.md, 'Never worse')",
                            key="canary", group=LEARNING, drivers=EMBEDDED, slime=_SLIME)
    max_nll_rise: float = setting(0.25, "refuse a version whose reference-answer NLL rose more than this (nats/token)",
                                  key="canary_max_nll_rise", group=LEARNING, drivers=EMBEDDED, slime=_SLIME)
    min_distinct_ratio: float = setting(0.75, "refuse a version whose distinct-2 fell below this x the served one's",
                                        key="canary_min_distinct_ratio", group=LEARNING, drivers=EMBEDDED, slime=_SLIME)
    max_eos_drop: float = setting(0.25, "refuse a version whose fraction of generations that stop fell by more "
                                        "than this", key="canary_max_eos_drop", group=LEARNING, drivers=EMBEDDED,
                                  slime=_SLIME)
    max_length_ratio: float = setting(1.5, "refuse a version whose mean generated length grew past this x the "
                                           "served one's", key="canary_max_length_ratio", group=LEARNING,
                                      drivers=EMBEDDED, slime=_SLIME)
    max_answered_drop: float = setting(0.25, "refuse a version that answers this much smaller a fraction of the "
                                             "canary questions than the first version did",
                                       key="canary_max_answered_drop", group=LEARNING, drivers=EMBEDDED, slime=_SLIME)
    max_forgotten: float = setting(0.1, "refuse a version that no longer recalls more than this fraction of the "
                                        "canary facts the first version recalled", key="canary_max_forgotten",
                                   group=LEARNING, drivers=EMBEDDED, slime=_SLIME)
    # what the probe costs (not settings: fixed by the canary's measurements, docs/learning.md)
    prompts: int = 8  # canary questions generated for (all are scored for the NLL)
    user_prompts: int = 2  # the user's own recent prompts generated for
    max_new_tokens: int = 24
    max_prompt_tokens: int = 256  # longer user prompts are not used (their prefill would dominate the probe)
    refresh_every: int = 8  # re-choose the user's prompts after this many accepted versions

    def validate(self) -> None:
        """Raise ValueError naming a setting that cannot work."""
        for name in ("max_nll_rise", "min_distinct_ratio", "max_eos_drop", "max_length_ratio", "max_answered_drop",
                     "max_forgotten"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"canary_{name} must be >= 0, got {getattr(self, name)}")
        for name in ("prompts", "max_new_tokens", "max_prompt_tokens", "refresh_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"canary_{name} must be at least 1, got {getattr(self, name)}")
        if self.user_prompts < 0:
            raise ValueError(f"canary_user_prompts must be >= 0, got {self.user_prompts}")


_TOPK_SLIME = "Slime carries one teacher log-prob per response token to its loss, not the teacher's top-k"


@flat_keys
@dataclass
class LearningConfig:
    method: Method = setting(Method.COMBINE, "learn from judged turns: combine (verdicts and hints), binary (verdicts: "
                                             "Binary RL), opd (hints: On-Policy Distillation) or none (record only)",
                             group=LEARNING)
    teacher: Teacher = setting(Teacher.BASE, "OPD teacher: the initial model (base) or the current policy, shown "
                                             "the hint", group=LEARNING)
    w_rl: float = setting(1.0, "Combine: weight of the verdict term", group=LEARNING)
    w_opd: float = setting(1.0, "Combine / OPD: weight of the teacher term", group=LEARNING)
    batch_size: int = setting(4, "judged turns per training step", group=LEARNING, drivers=EMBEDDED,
                              slime="Slime's step takes --rollout-batch-size turns (ROLLOUT_BATCH_SIZE)")
    lora_rank: int = setting(16, "LoRA rank; 0 trains full weights", group=LEARNING, drivers=EMBEDDED,
                             slime="Slime trains full weights with Megatron")
    lr: float = setting(5e-4, "learning rate", group=LEARNING, drivers=EMBEDDED,
                        slime="Slime's optimizer takes --lr (LR in the launch scripts)")
    max_staleness: int = setting(4, "take a backlog in steps large enough that no turn is trained more than this "
                                    "many versions after it was sampled; turns are never dropped for their age",
                                 group=LEARNING, drivers=EMBEDDED,
                                 slime="Slime's step size is fixed (--rollout-batch-size): an older turn trains with "
                                       "the capped ratio whatever its age")
    policy_loss: str = setting(BUILTIN_POLICY_LOSS, "the policy-gradient loss: ppo (clipped ratio with a dual clip), "
                                                    "or your own as module:attr or an installed name, called like "
                                                    "algorithms/ppo.py's policy_loss (docs/extending.md)",
                               group=LEARNING, metavar="LOSS")
    baseline: Baseline = setting(Baseline.NONE, "advantage baseline: none (advantage = verdict) or running (minus an "
                                                "EMA of earlier verdicts)", group=LEARNING)
    keep_checkpoints: int = setting(3, "newest versions kept with weights and optimizer state; older ones keep only "
                                       "their trainer_state.json; 0: keep all", group=LEARNING, drivers=EMBEDDED,
                                    slime="Slime keeps its own checkpoints (--save-interval)")
    kl_coef: float = setting(0.0, "weight of the KL penalty to the initial policy; 0: off (on Slime it needs "
                                  "--use-kl-loss, which makes Slime load the reference model: KL_COEF sets both)",
                             group=LEARNING)
    tis_cap: float = setting(0.0, "truncated importance sampling: the PPO ratio is taken against the trainer's own "
                                  "log-probs before the step, each token weighted by min(their ratio to the "
                                  "recorded log-probs, this); corrects an engine whose numerics differ from the "
                                  "trainer's (on Slime it needs --get-mismatch-metrics: TIS_CAP sets both); 0: off",
                             group=LEARNING)
    canary: CanaryConfig = section(CanaryConfig)
    distill: Distill = setting(Distill.TOKEN, "OPD signal: token (teacher - rollout log-prob as the advantage), or at "
                                              "every position over the teacher's top-k tokens plus a tail bin: topk "
                                              "(reverse KL), forward_kl, or jsd (JSD(--jsd-beta)); or topk_select, "
                                              "upstream's recipe: --hint-m candidate teachers chosen by top-k overlap, "
                                              "PPO-clipped top-k OPD with --opd-clip as its clip; or topk_select_token, "
                                              "its reduction to the sampled token: the teacher term PPO-clipped on "
                                              "its own and added to the verdict's loss", group=DISTILLATION)
    hint_m: int = setting(0, "--distill topk_select: candidate hints per turn from the hint judge's votes (the "
                             "heuristic casts one vote: one candidate); 0: the kind's own (topk_select: 3, "
                             "upstream's)", group=DISTILLATION, drivers=EMBEDDED, slime=_TOPK_SLIME)
    topk_select_rule: SelectRule = setting(SelectRule.SEQUENCE_OPTIMAL,
                                           "--distill topk_select: the candidate that teaches: the shortest, the best "
                                           "top-k overlap per position, or over the response", group=DISTILLATION,
                                           drivers=EMBEDDED, slime=_TOPK_SLIME)
    jsd_beta: float = setting(0.5, "--distill jsd: 0 is forward KL, 1 reverse KL", group=DISTILLATION,
                              drivers=EMBEDDED, slime=_TOPK_SLIME)
    groups: GroupConfig = section(GroupConfig)
    sft_coef: float = setting(0.0, "context distillation: weight of SFT on the hinted teacher's own answers to the "
                                   "hinted prompt (sampled like group members, EOS kept); 0: off", group=DISTILLATION,
                              drivers=EMBEDDED, slime="a demonstration is one more sample per hinted turn, and Slime's "
                                                      "groups have a fixed size")
    sft_samples: int = setting(1, "the hinted teacher's answers per hinted turn", group=DISTILLATION, drivers=EMBEDDED,
                               slime="context distillation (sft_coef) runs on the embedded backend")
    teacher_check: TeacherCheckConfig = section(TeacherCheckConfig)
    replay: ReplayConfig = section(ReplayConfig)
    topk: int = setting(0, "k of the top-k distillation kinds; 0: the kind's own (topk_select: 4, upstream's; the "
                           "others 20)", group=DISTILLATION, drivers=EMBEDDED, slime=_TOPK_SLIME)
    topk_support: TopkSupport = setting(TopkSupport.AUTO, "whose top-k tokens the distillation runs over: the "
                                                          "teacher's, the student's (topk_select: or their overlap); "
                                                          "auto: the kind's own (topk_select: student, upstream's; "
                                                          "the others teacher)",
                                        group=DISTILLATION, drivers=EMBEDDED, slime=_TOPK_SLIME)
    opd_clip: float = setting(0.0, "bound on the per-token teacher - rollout log-prob gap; 0: the kind's own "
                                   "(topk_select and topk_select_token: 1.0, upstream's; the others 5)",
                              group=DISTILLATION)
    verdict_credit: VerdictCredit = setting(VerdictCredit.UNIFORM, "where a -1 verdict lands on a turn the teacher "
                                                                   "scored: every token (uniform), or where the hinted "
                                                                   "teacher disagrees with the answer (teacher)",
                                            group=DISTILLATION)

    # the distillation settings whose default is the kind's own (0 / auto): upstream's recipe for topk_select
    # (run_qwen3_4b_openclaw_topk_select.sh: K 4, the student's support, clip 1.0, MAX_CAND 3), and what the other
    # kinds were measured with here
    @property
    def distill_topk(self) -> int:
        return self.topk or (4 if self.distill is Distill.TOPK_SELECT else 20)

    @property
    def distill_support(self) -> TopkSupport:
        if self.topk_support is not TopkSupport.AUTO:
            return self.topk_support
        return TopkSupport.STUDENT if self.distill is Distill.TOPK_SELECT else TopkSupport.TEACHER

    @property
    def distill_clip(self) -> float:
        return self.opd_clip or (1.0 if self.distill in (Distill.TOPK_SELECT, Distill.TOPK_SELECT_TOKEN) else 5.0)

    @property
    def hint_candidates(self) -> int:
        return self.hint_m or (3 if self.distill is Distill.TOPK_SELECT else 1)

    @property
    def learns(self) -> bool:
        """Anything is trained (method is not none)."""
        return self.method is not Method.NONE

    def validate(self) -> None:
        """Raise ValueError naming the setting that cannot work (``method`` may be none: serving only)."""
        if self.topk < 0 or self.batch_size < 1:
            raise ValueError(f"topk must be >= 0 (0: the distill kind's own) and batch_size >= 1, got {self.topk} "
                             f"and {self.batch_size}")
        if self.w_rl < 0 or self.w_opd < 0 or self.opd_clip < 0:
            raise ValueError("w_rl and w_opd must be >= 0, and opd_clip > 0 (0: the distill kind's own)")
        if self.lora_rank < 0 or self.max_staleness < 0 or self.lr <= 0:
            raise ValueError("lora_rank and max_staleness must be >= 0 and lr > 0")
        if self.kl_coef < 0 or self.tis_cap < 0:
            raise ValueError(f"kl_coef and tis_cap must be >= 0, got {self.kl_coef} and {self.tis_cap}")
        if not 0.0 <= self.jsd_beta <= 1.0:
            raise ValueError(f"jsd_beta must be in [0, 1], got {self.jsd_beta}")
        if self.sft_coef < 0 or self.sft_samples < 1:
            raise ValueError(f"sft_coef must be >= 0 and sft_samples >= 1; got {self.sft_coef} and {self.sft_samples}")
        if (self.groups.size > 1 or self.sft_coef) and not self.method.uses_hints:
            raise ValueError("group_size > 1 and sft_coef need method opd or combine: they need the hinted teacher, "
                             "and binary judges no hints")
        self._validate_topk_select()
        self.groups.validate()
        self.replay.validate(self.method, self.distill)
        self.teacher_check.validate()
        self.canary.validate()

    def _validate_topk_select(self) -> None:
        """The settings only ``distill: topk_select`` uses (``hint_m``, ``topk_select_rule``, support ``overlap``)."""
        if self.hint_m < 0:
            raise ValueError(f"hint_m must be >= 1 (0: the distill kind's own); got {self.hint_m}")
        if self.distill is not Distill.TOPK_SELECT and (self.hint_m > 1 or self.topk_support is TopkSupport.OVERLAP):
            raise ValueError(f"hint_m > 1 and topk_support overlap need distill topk_select (distill is {self.distill})")
        if self.distill in (Distill.TOPK_SELECT, Distill.TOPK_SELECT_TOKEN) and not self.method.uses_hints:
            raise ValueError(f"distill {self.distill} needs method opd or combine: it distills hinted teachers, and "
                             "binary judges no hints")
