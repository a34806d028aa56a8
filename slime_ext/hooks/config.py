"""The plugin's settings inside Slime: the ``openclaw_rl:`` mapping of ``--custom-config-path``, and what
Slime cannot honour of them.

Slime sets every top-level key of that YAML file onto ``args`` (and ignores unknown command-line
flags), so our settings live under one key that no Slime argument uses, and are the same
``ServeConfig`` the CLI and ``serve --config`` use: one typed object, one validation.

``slime_refusals`` is the other half of "every learning setting works the same on both drivers":
each setting whose declaration says the embedded trainer alone honours it (``slime_ext.settings``)
is refused when the mapping gives it (a value other than off: false or 0), with the declaration's reason;
and each combination this driver cannot run the same way is refused by name (a distillation kind
that needs the teacher's top-k, the frozen base as teacher, a group temperature other than the one
Slime scores at, Slime flags our loss would silently ignore, ...). ``live_source`` calls it before
anything starts. The canary is the one default Slime cannot keep: ``slime_notes`` says so plainly.
"""

from __future__ import annotations

from typing import Any

from slime_ext.config import ServeConfig
from slime_ext.settings import Driver, declared
from slime_ext.types import Distill, Teacher, VerdictCredit

PLUGIN_KEY = "openclaw_rl"


def plugin_mapping(args: Any) -> dict[str, Any]:
    """The flat keys of ``args.openclaw_rl`` (dashes read as underscores)."""
    data = getattr(args, PLUGIN_KEY, None) or {}
    if not isinstance(data, dict):
        raise ValueError(f"--custom-config-path: '{PLUGIN_KEY}' must be a mapping of settings, got {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def plugin_config(args: Any) -> ServeConfig:
    """The ``ServeConfig`` of ``args.openclaw_rl`` (defaults when absent); ValueError names bad keys."""
    return ServeConfig.from_mapping(plugin_mapping(args), f"--custom-config-path ({PLUGIN_KEY}:)")


def slime_refusals(cfg: ServeConfig, given: set[str], args: Any) -> list[str]:
    """Why these settings (``given``: the keys the mapping set) cannot run on Slime as they would embedded;
    empty when they can. ``args``: Slime's own arguments."""
    reasons = [f"{d.key}: {d.meta.slime or 'the embedded trainer only'}" for d in declared(ServeConfig)
               if d.key in given and Driver.SLIME not in d.meta.drivers and d.value(cfg)]  # off (false, 0) is fine
    return reasons + _learning_refusals(cfg, args) + _slime_flag_refusals(cfg, args)


def _learning_refusals(cfg: ServeConfig, args: Any) -> list[str]:
    out = []
    if not cfg.learns:
        out.append("method: none records without training; on Slime choose binary, opd or combine")
    if not cfg.distill.per_token:
        out.append(f"distill: {cfg.distill} needs the teacher's top-k at every position, and Slime carries one "
                   "teacher log-prob per response token to its loss; use token or topk_select_token")
    if cfg.method.uses_hints and cfg.teacher is Teacher.BASE:
        out.append("teacher: base needs the frozen initial model, and SGLang holds only the synced policy; set "
                   "teacher: policy (the launch scripts do)")
    if cfg.judge == "self":
        out.append("judge: self needs the embedded engine (SGLang holds only the synced weights, no frozen base); "
                   "use judge: openai with a judge server (PRM_GPUS) or judge: heuristic")
    if cfg.distill is Distill.TOPK_SELECT_TOKEN and cfg.verdict_credit is VerdictCredit.TEACHER:
        out.append("verdict_credit: teacher with distill topk_select_token: Slime carries the verdict term as one "
                   "number per turn there (its advantages), not per token; use verdict_credit: uniform")
    n = int(getattr(args, "n_samples_per_prompt", 1) or 1)
    if n != cfg.groups.size:
        out.append(f"group_size: --n-samples-per-prompt ({n}) must equal group_size ({cfg.groups.size}): each live "
                   "turn is a group of its recorded sample and group_size - 1 fresh ones")
    rollout_t = float(getattr(args, "rollout_temperature", 1.0))
    if cfg.groups.size > 1 and abs(cfg.groups.temperature - rollout_t) > 1e-6:
        out.append(f"group_temperature: fresh group samples are drawn at {cfg.groups.temperature:g}, but Slime scores "
                   f"every sample at --rollout-temperature {rollout_t:g}; set group_temperature: {rollout_t:g}")
    return out


def _slime_flag_refusals(cfg: ServeConfig, args: Any) -> list[str]:
    """Slime flags that our custom loss needs, or would silently ignore."""
    out = []
    kl = bool(getattr(args, "use_kl_loss", False))
    if cfg.kl_coef and not kl:
        out.append(f"kl_coef: {cfg.kl_coef:g} needs Slime's --use-kl-loss, which makes it load the reference model "
                   "and compute ref_log_probs (KL_COEF in the launch scripts sets both)")
    if kl and not cfg.kl_coef:
        out.append("kl_coef: Slime was given --use-kl-loss but the plugin's kl_coef is 0: the custom loss takes the "
                   "KL weight from kl_coef (KL_COEF in the launch scripts sets both)")
    if cfg.tis_cap and getattr(args, "use_rollout_logprobs", False) and not getattr(args, "get_mismatch_metrics", False):
        out.append("tis_cap: needs Slime to recompute the old log-probs (--get-mismatch-metrics with "
                   "--use-rollout-logprobs; TIS_CAP in the launch scripts sets both)")
    for flag, ours in (("eps_clip", 0.2), ("eps_clip_high", 0.28)):
        value = getattr(args, flag, None)
        if value is not None and abs(float(value) - ours) > 1e-9:
            out.append(f"--{flag.replace('_', '-')} {value:g}: the custom loss clips at {ours:g} on both drivers "
                       f"(algorithms/ppo.py); leave it at {ours:g}")
    if getattr(args, "use_opd", False):
        out.append("--use-opd: Slime would read teacher_log_probs as a teacher's log-probs, but the live rollout puts "
                   "each token's advantage there (hooks/rollout.py); the teacher term is the plugin's (method, w_opd)")
    if getattr(args, "calculate_per_token_loss", False):
        out.append("--calculate-per-token-loss: the custom loss is a mean over each sample's tokens, then over "
                   "samples, as on the embedded backend; leave it off")
    if int(getattr(args, "context_parallel_size", 1) or 1) > 1:
        out.append("--context-parallel-size > 1: the custom loss takes each sample's whole response; use 1")
    return out


def slime_notes(cfg: ServeConfig, given: set[str]) -> list[str]:
    """What Slime runs without, said plainly at start-up (not refused: the settings' defaults)."""
    if cfg.canary.enabled and "canary" not in given:
        return ["Slime runs without the canary gate: its train.py pushes every step's weights to SGLang "
                "(actor_model.update_weights()) and no hook can hold one back (docs/slime.md), so a version that "
                "regresses is served; the embedded backend (openclaw-rl serve) probes each version first"]
    return []
