"""The ``openclaw-rl`` command.

  openclaw-rl serve    [--model M] [--port P] [--run-dir DIR] ...   serve and record
  openclaw-rl records  --run-dir DIR [--json]                       print what was recorded
  openclaw-rl models                                                list / prepare built-in models
  openclaw-rl experiment personalization [--methods ...] [--out DIR]  learning curves on simulated users
  openclaw-rl experiment report CSV [CSV ...] --out DIR                merge results into one table and plot
  openclaw-rl env list --setting S [--split train|heldout]           agent-environment task ids
  openclaw-rl env play --setting S --task ID < actions               play a task by hand; ends with `reward: R`
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from typing import Any

from slime_ext.config import ServeConfig, load_yaml
from slime_ext.trainers.learning import BASELINES, DISTILL, TEACHERS, TOPK_SUPPORTS
from slime_ext.trainers.teachability import UNFOLLOWED
from slime_ext.types import ESTIMATORS, SELECT_RULES, VERDICT_CREDIT, Method


def _add_serve_args(p: argparse.ArgumentParser) -> None:
    d = ServeConfig()
    _add_serving_args(p, d)
    _add_judge_args(p, d)
    _add_learning_args(p, d)
    _add_teacher_args(p, d)


def _add_serving_args(p: argparse.ArgumentParser, d: ServeConfig) -> None:
    """The model, the engine, the HTTP server and its limits, logging."""
    p = p.add_argument_group("serving")
    p.add_argument("--config", help="YAML file of settings (the flag names, with - or _); flags override it")
    p.add_argument("--model", help=f"built-in name (smollm2-135m, tiny) or a local HF checkpoint directory [{d.model}]")
    p.add_argument("--host", help=f"address to bind [{d.host}]; 0.0.0.0 exposes it: set --api-key then")
    p.add_argument("--port", type=int, help=f"port [{d.port}]")
    p.add_argument("--run-dir", help="where records go [runs/<timestamp>]; reuse one to resume")
    p.add_argument("--api-key", help="require this bearer key (also $OPENCLAW_RL_API_KEY, $SGLANG_API_KEY)")
    p.add_argument("--user-key", action="append", metavar="NAME=KEY", dest="user_key_pairs",
                   help="a per-user API key (repeatable): requests with KEY are that user's turns and metrics")
    p.add_argument("--served-model-name", help="model id reported by /v1/models [the --model value]")
    p.add_argument("--dtype", choices=["auto", "bfloat16", "float32"],
                   help=f"engine dtype; auto: float32 while training (exact log-probs), bfloat16 with --method none on "
                        f"a CPU with native bf16 (faster), bfloat16 on CUDA; the start-up log says which and why [{d.dtype}]")
    p.add_argument("--device", help=f"where the engine and the trainer compute: auto (the first CUDA GPU, else the "
                                     f"CPU), cpu, cuda or cuda:N; a GPU that is not there is refused at once "
                                     f"[{d.device}]")
    p.add_argument("--engine", choices=["local", "sglang"],
                   help=f"who serves: local (the embedded engine) or sglang (an SGLang server at --sglang-url on the "
                        f"same model, started with --enable-lora; each trained LoRA version is loaded into it in "
                        f"place) [{d.engine}]")
    p.add_argument("--sglang-url", help="the SGLang server's address, e.g. http://127.0.0.1:30001 (with --engine "
                                        "sglang; its API key from $SGLANG_API_KEY)")
    p.add_argument("--threads", type=int, help="torch threads for the engine [all cores]")
    p.add_argument("--max-batch-size", type=int, help=f"sequences decoded together [{d.max_batch_size}]")
    p.add_argument("--prefix-cache-tokens", type=int, help=f"prompt KV kept for reuse across requests, in tokens; 0: off [{d.prefix_cache_tokens}]")
    p.add_argument("--context-length", type=int, help="cap the context below the model's own")
    p.add_argument("--context-overflow", choices=["trim", "error"],
                   help=f"a prompt past the context: trim (cut the middle of the longest system message, keep the "
                        f"conversation; the response says how many tokens in X-OpenClaw-RL-Prompt-Tokens-Cut) or "
                        f"error (400 context_length_exceeded) [{d.context_overflow}]")
    p.add_argument("--max-tokens-cap", type=int, help=f"most new tokens per response [{d.max_tokens_cap}]")
    p.add_argument("--default-max-tokens", type=int, help=f"new tokens when a request names none [{d.default_max_tokens}]")
    p.add_argument("--sampling-defaults", choices=["model", "openai"],
                   help=f"temperature / top_p of a request that names none: the model's generation_config.json "
                        f"(smollm2-135m: 0.2 / 0.9), or OpenAI's 1.0 / 1.0 [{d.sampling_defaults}]")
    p.add_argument("--max-body-mb", type=float, help=f"largest request body [{d.max_body_mb}]")
    p.add_argument("--header-timeout-s", type=float,
                   help=f"close a connection whose request line and headers have not all arrived this long after they began [{d.header_timeout_s:g}]")
    p.add_argument("--body-timeout-s", type=float,
                   help=f"answer 408 and close when a request body has not all arrived this long after its headers [{d.body_timeout_s:g}]")
    p.add_argument("--keepalive-timeout-s", type=float, help=f"close idle keep-alive connections after this [{d.keepalive_timeout_s:g}]")
    p.add_argument("--max-connections", type=int,
                   help=f"open connections at most; past it a new one closes the longest-waiting idle one [{d.max_connections}]")
    p.add_argument("--allowed-origin", action="append", metavar="ORIGIN", dest="allowed_origins",
                   help="a web origin (scheme://host[:port]) whose pages may call the API (repeatable); requests "
                        "with any other Origin header get a 403 [none]")
    p.add_argument("--allowed-host", action="append", metavar="HOST", dest="allowed_hosts",
                   help="a Host header name accepted besides loopback ones while bound to loopback, e.g. a reverse "
                        "proxy's (repeatable) [none]")
    p.add_argument("--session-idle-timeout-s", type=float, help=f"close sessions idle this long [{d.session_idle_timeout_s:g}]")
    p.add_argument("--status-interval-s", type=float,
                   help=f"seconds between status-line updates (a log line when not on a terminal); 0: off [{d.status_interval_s:g}]")
    p.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help=f"[{d.log_level}]")


def _add_judge_args(p: argparse.ArgumentParser, d: ServeConfig) -> None:
    """Who judges each turn from its next state."""
    p = p.add_argument_group("judging")
    p.add_argument("--judge", metavar="JUDGE",
                   help=f"how next states are judged: heuristic (a lexical classifier), self (the served model with "
                        f"its adapter disabled), openai (an OpenAI-compatible model), off, or your own backend as "
                        f"module:attr (docs/extending.md) [{d.judge}]")
    p.add_argument("--judge-url", help="OpenAI-compatible endpoint of the judge model (with --judge openai)")
    p.add_argument("--judge-model", help="model name to ask the judge endpoint for")
    p.add_argument("--judge-key", help="API key of the judge endpoint (also $OPENCLAW_RL_JUDGE_KEY)")
    p.add_argument("--judge-votes", type=int, help="votes per turn, majority wins [3 for model judges, 1 heuristic]")
    p.add_argument("--judge-timeout-s", type=float, help=f"a vote slower than this abstains [{d.judge_timeout_s:g}]")
    p.add_argument("--judge-concurrency", type=int, help=f"judge calls in flight at once [{d.judge_concurrency}]")


def _add_learning_args(p: argparse.ArgumentParser, d: ServeConfig) -> None:
    """The trainer: method, step size, optimizer, staleness, the canary."""
    p = p.add_argument_group("learning")
    p.add_argument("--method", choices=[m.value for m in Method],
                   help=f"learn from judged turns: combine (verdicts and hints), binary (verdicts: Binary RL), "
                        f"opd (hints: On-Policy Distillation) or none (record only) [{d.method}]")
    p.add_argument("--teacher", choices=TEACHERS,
                   help=f"OPD teacher: the initial model (base) or the current policy, shown the hint [{d.teacher}]")
    p.add_argument("--w-rl", type=float, help=f"Combine: weight of the verdict term [{d.w_rl:g}]")
    p.add_argument("--w-opd", type=float, help=f"Combine / OPD: weight of the teacher term [{d.w_opd:g}]")
    p.add_argument("--batch-size", type=int, help=f"judged turns per training step [{d.batch_size}]")
    p.add_argument("--lora-rank", type=int, help=f"LoRA rank; 0 trains full weights [{d.lora_rank}]")
    p.add_argument("--lr", type=float, help=f"learning rate [{d.lr:g}]")
    p.add_argument("--max-staleness", type=int, help="take a backlog in steps large enough that no turn is trained more than this many versions after "
                   f"it was sampled; turns are never dropped for their age [{d.max_staleness}]")
    p.add_argument("--policy-loss", metavar="LOSS",
                   help=f"the policy-gradient loss: ppo (clipped ratio with a dual clip), or your own as module:attr "
                        f"or an installed name, called like algorithms/ppo.py's policy_loss (docs/extending.md) "
                        f"[{d.policy_loss}]")
    p.add_argument("--baseline", choices=BASELINES,
                   help=f"advantage baseline: none (advantage = verdict) or running (minus an EMA of earlier verdicts) [{d.baseline}]")
    p.add_argument("--keep-checkpoints", type=int,
                   help=f"newest versions kept with weights and optimizer state; older ones keep only their "
                        f"trainer_state.json; 0: keep all [{d.keep_checkpoints}]")
    p.add_argument("--canary", action=argparse.BooleanOptionalAction,
                   help=f"probe each trained version on a held-out canary set before it is served and keep the "
                        f"previous one if it regresses (docs/learning.md, 'Never worse') [{'on' if d.canary else 'off'}]")
    p.add_argument("--canary-max-nll-rise", type=float,
                   help=f"refuse a version whose reference-answer NLL rose more than this (nats/token) [{d.canary_max_nll_rise:g}]")
    p.add_argument("--canary-min-distinct-ratio", type=float,
                   help=f"refuse a version whose distinct-2 fell below this x the served one's [{d.canary_min_distinct_ratio:g}]")
    p.add_argument("--canary-max-eos-drop", type=float,
                   help=f"refuse a version whose fraction of generations that stop fell by more than this [{d.canary_max_eos_drop:g}]")
    p.add_argument("--canary-max-length-ratio", type=float,
                   help=f"refuse a version whose mean generated length grew past this x the served one's [{d.canary_max_length_ratio:g}]")
    p.add_argument("--canary-max-answered-drop", type=float,
                   help=f"refuse a version that answers this much smaller a fraction of the canary questions than the "
                        f"first version did [{d.canary_max_answered_drop:g}]")
    p.add_argument("--canary-max-forgotten", type=float,
                   help=f"refuse a version that no longer recalls more than this fraction of the canary facts the "
                        f"first version recalled [{d.canary_max_forgotten:g}]")
    p.add_argument("--kl-coef", type=float, help=f"weight of the KL penalty to the initial policy; 0: off [{d.kl_coef:g}]")


def _add_teacher_args(p: argparse.ArgumentParser, d: ServeConfig) -> None:
    """The teacher term, fresh sample groups, context distillation, the teacher check."""
    p = p.add_argument_group("distillation and groups")
    p.add_argument("--distill", choices=DISTILL,
                   help=f"OPD signal: token (teacher - rollout log-prob as the advantage), or at every position over "
                        f"the teacher's top-k tokens plus a tail bin: topk (reverse KL), forward_kl, or jsd "
                        f"(JSD(--jsd-beta)); or topk_select, upstream's recipe: --hint-m candidate teachers chosen "
                        f"by top-k overlap, PPO-clipped top-k OPD with --opd-clip as its clip [{d.distill}]")
    p.add_argument("--hint-m", type=int,
                   help=f"--distill topk_select: candidate hints per turn from the hint judge's votes (the heuristic "
                        f"casts one vote: one candidate) [{d.hint_m}]")
    p.add_argument("--topk-select-rule", choices=SELECT_RULES,
                   help=f"--distill topk_select: the candidate that teaches: the shortest, the best top-k overlap per "
                        f"position, or over the response [{d.topk_select_rule}]")
    p.add_argument("--jsd-beta", type=float, help=f"--distill jsd: 0 is forward KL, 1 reverse KL [{d.jsd_beta:g}]")
    p.add_argument("--group-size", type=int,
                   help=f"samples per hinted turn: the recorded response plus this minus 1 fresh samples of the "
                        f"current policy drawn by the trainer, with group-normalized advantages; 1: no groups "
                        f"[{d.group_size}]")
    p.add_argument("--group-temperature", type=float,
                   help=f"the trainer's sampling temperature for fresh group samples [{d.group_temperature:g}]")
    p.add_argument("--group-max-new-tokens", type=int, help=f"most tokens of a fresh group sample [{d.group_max_new_tokens}]")
    p.add_argument("--group-estimator", choices=ESTIMATORS,
                   help=f"group advantage: grpo ((r - mean) / std) or drgrpo (r - mean) [{d.group_estimator}]")
    p.add_argument("--implicit-reward-scale", type=float,
                   help=f"a fresh sample's reward is tanh(mean hinted-teacher minus student log-prob per token / "
                        f"this) [{d.implicit_reward_scale:g}]")
    p.add_argument("--sft-coef", type=float,
                   help=f"context distillation: weight of SFT on the hinted teacher's own answers to the hinted "
                        f"prompt (sampled like group members, EOS kept); 0: off [{d.sft_coef:g}]")
    p.add_argument("--sft-samples", type=int, help=f"the hinted teacher's answers per hinted turn [{d.sft_samples}]")
    p.add_argument("--teacher-check", action=argparse.BooleanOptionalAction,
                   help=f"measure whether the hinted teacher follows each hint (its own greedy answer with vs "
                        f"without the hint; docs/learning.md, 'What the teacher can teach') "
                        f"[{'on' if d.teacher_check else 'off'}]")
    p.add_argument("--teacher-min-gap", type=float,
                   help=f"a hint is followed when it adds at least this many nats/token to the teacher's own "
                        f"answers (median over its prompts) and changes the answer [{d.teacher_min_gap:g}]")
    p.add_argument("--teacher-check-tokens", type=int, help=f"length of the teacher's greedy answer [{d.teacher_check_tokens}]")
    p.add_argument("--teacher-checks-per-hint", type=int,
                   help=f"distinct prompts a hint is measured on; later turns with it reuse its median; 0: every "
                        f"prompt [{d.teacher_checks_per_hint}]")
    p.add_argument("--unfollowed-hints", choices=UNFOLLOWED,
                   help=f"a turn whose hint the teacher does not follow (shown in records, /healthz, /metrics): "
                        f"drop (not trained, nor replayed), skip (no teacher term; its verdict still trains) or "
                        f"train (distilled anyway) [{d.unfollowed_hints}]")
    p.add_argument("--replay-turns", type=int,
                   help=f"preference replay (opd / combine): per user of a training step, this many of the user's "
                        f"earlier turns re-taught by the teacher shown all of the user's standing preferences "
                        f"(docs/learning.md, 'Preferences persist'); 0: off [{d.replay_turns}]")
    p.add_argument("--replay-steps", type=int,
                   help=f"optimizer passes over the step's samples (and replayed turns) per training step [{d.replay_steps}]")
    p.add_argument("--replay-budget-s", type=float,
                   help=f"no further pass starts once a step's passes took this many seconds [{d.replay_budget_s:g}]")
    p.add_argument("--topk", type=int, help=f"k of --distill topk [{d.topk}]")
    p.add_argument("--topk-support", choices=TOPK_SUPPORTS,
                   help=f"--distill topk over the teacher's top-k tokens or the student's (topk_select: or their "
                        f"overlap) [{d.topk_support}]")
    p.add_argument("--opd-clip", type=float, help=f"bound on the per-token teacher - rollout log-prob gap [{d.opd_clip:g}]")
    p.add_argument("--verdict-credit", choices=VERDICT_CREDIT,
                   help=f"where a -1 verdict lands on a turn the teacher scored: every token (uniform), or where the "
                        f"hinted teacher disagrees with the answer (teacher) [{d.verdict_credit}]")


def serve_config(args: argparse.Namespace) -> ServeConfig:
    data: dict[str, Any] = load_yaml(args.config) if args.config else {}
    for f in dataclasses.fields(ServeConfig):
        v = getattr(args, f.name, None)
        if v is not None:
            data[f.name] = v
    for pair in getattr(args, "user_key_pairs", None) or []:
        name, sep, key = pair.partition("=")
        if not sep or not name or not key:
            raise ValueError("--user-key expects NAME=KEY with both parts non-empty")  # never echo a key
        data.setdefault("user_keys", {})[name] = key
    return ServeConfig.from_mapping(data, args.config or "command line")


SECRET_FLAGS = (("api_key", "--api-key", "$OPENCLAW_RL_API_KEY or 'api_key:'"),
                ("user_key_pairs", "--user-key", "'user_keys:'"),
                ("judge_key", "--judge-key", "$OPENCLAW_RL_JUDGE_KEY or 'judge_key:'"))


def secrets_on_command_line(args: argparse.Namespace) -> list[str]:
    """One warning per secret given as a flag: every local user can read a process's command line
    (``ps``, ``/proc/PID/cmdline``). The warning names the flag, never the value."""
    return [f"{flag} on the command line is visible to every user of this machine (ps, /proc/PID/cmdline); "
            f"use {where} in a --config YAML file only you can read (chmod 600) instead"
            for name, flag, where in SECRET_FLAGS if getattr(args, name, None)]


def cmd_serve(args: argparse.Namespace) -> int:
    cfg = serve_config(args)
    logging.basicConfig(level=cfg.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    for warning in secrets_on_command_line(args):
        logging.getLogger("openclaw_rl").warning(warning)
    # Idle OpenMP threads must not spin: the event loop and other processes share these cores.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from slime_ext.serve import run_server

    run_server(cfg)
    return 0


def cmd_records(args: argparse.Namespace) -> int:
    from slime_ext.store import export_records

    try:
        data = export_records(args.run_dir)
    except FileNotFoundError as e:
        print(f"openclaw-rl records: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(data, sys.stdout)
        sys.stdout.write("\n")
        return 0
    if not data["sessions"]:
        print("no sessions recorded yet")
    for s in data["sessions"]:
        state = "closed" if s["closed"] else "open"
        print(f"session {s['id']}  user={s['user'] or '-'}  {s['source']}  {state}  {len(s['turns'])} turns")
        for t in s["turns"]:
            kind = "main" if t["main_line"] else "side"
            text = t["response_text"].replace("\n", " ")
            print(f"  turn {t['index']} [{kind}] v{t['policy_version']} {len(t['prompt_token_ids'])}+{len(t['response_token_ids'])} tokens "
                  f"{t['finish_reason']}: {text[:70]!r}")
            print(f"      why: {t['reason']}")
            if t["next_state"] is not None:
                print(f"      next state ({t['next_state_role']}): {t['next_state'][:70]!r}")
            if t["verdict"] is not None:
                print(f"      verdict {t['verdict']:+d} from votes {t['votes']}")
            if t.get("hint"):
                print(f"      hint: {t['hint'][:70]!r}")
            if t.get("teacher_check"):  # does the hinted teacher follow the hint (trainers/teachability.py)
                print(f"      {teacher_check_line(t['teacher_check'])}")
            if t.get("dropped"):  # not trained on, and why (e.g. the canary refused its step)
                print(f"      dropped: {t['dropped']}")
    for user, prefs in data.get("preferences", {}).items():  # each user's accepted hints (trainers/replay.py)
        print(f"preferences of {user}: {len(prefs)}")
        for p in prefs:
            print(f"  {preference_line(p)}")
    return 0


def preference_line(p: dict[str, Any]) -> str:
    """One line of ``records``: a user's preference, whether it is standing (replayed), where it came from."""
    times = f", stated {p['times']} times" if p["times"] > 1 else ""
    return (f"{'standing' if p['standing'] else 'one-off '} {p['hint'][:70]!r} "
            f"(turn {p['turn']} of {p['session_id']}{times})")


def teacher_check_line(c: dict[str, Any]) -> str:
    """One line of ``records``: does the hinted teacher follow the turn's hint (``trainers/teachability.py``)."""
    head = f"teacher {'follows' if c['follows'] else 'DOES NOT FOLLOW'} the hint (median gap {c['hint_gap']:+.3f} " \
           f"nats/token over {c['hint_checks']} prompt{'s' if c['hint_checks'] != 1 else ''})"
    if c["same_answer"] is None:
        return head + "; not measured on this prompt"
    return (head + f"; here gap {c['gap']:+.3f}, {'same' if c['same_answer'] else 'different'} answer without it: "
            f"{c['sample'][:60]!r}")


def cmd_models(args: argparse.Namespace) -> int:
    from slime_ext.models import BUILTIN_MODELS, cache_dir, resolve_model

    for name in BUILTIN_MODELS:
        if args.prepare:
            resolve_model(name)
        ready = (cache_dir() / name / "config.json").exists()
        print(f"{name:14s} {'ready' if ready else 'not converted yet'}  {cache_dir() / name}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="openclaw-rl", description="Serve a self-hosted agent and learn from its conversations.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="start the OpenAI-compatible server and record every conversation",
                       description="Start the OpenAI-compatible API (http://HOST:PORT/v1) and record every turn in RUN_DIR.")
    _add_serve_args(p)
    p.set_defaults(fn=cmd_serve)
    p = sub.add_parser("records", help="print the sessions and turns of a run directory",
                       description="Print recorded sessions and turns with their decisions and reasons.")
    p.add_argument("--run-dir", required=True, help="the run directory given to serve")
    p.add_argument("--json", action="store_true", help="one JSON object: {sessions: [{id, user, turns: [...]}]}")
    p.set_defaults(fn=cmd_records)
    p = sub.add_parser("models", help="list the built-in models and where they are cached",
                       description="List built-in models; --prepare converts them now instead of on first use.")
    p.add_argument("--prepare", action="store_true", help="convert / build every built-in model now")
    p.set_defaults(fn=cmd_models)
    _add_experiment_parser(sub)
    from slime_ext.envs.cli import add_env_parser

    add_env_parser(sub)
    return parser


def _add_experiment_parser(sub) -> None:
    from slime_ext.simulate import experiment

    p = sub.add_parser("experiment", help="run a learning experiment against the real server",
                       description="Learning experiments that drive `openclaw-rl serve` over HTTP as simulated users.")
    kinds = p.add_subparsers(dest="experiment", required=True)
    e = kinds.add_parser("personalization", help="learning curves: held-out score vs interactions per method",
                         description="For every method, persona and seed: start the server, run training sessions "
                                     "of the persona over HTTP, and probe a fixed held-out set (side turns, "
                                     "temperature 0) at the start and after every --probe-every sessions. Writes "
                                     "results.csv, results.md and results.png under --out; progress on stderr.")
    experiment.add_arguments(e)
    e.set_defaults(fn=experiment.cmd_personalization)
    r = kinds.add_parser("report", help="merge results.csv files into one CSV, table and plot",
                         description="Read the results.csv of earlier runs (for example one run per seed) and "
                                     "write the merged results.csv, results.md and results.png under --out.")
    r.add_argument("csv", nargs="+", help="results.csv files to merge")
    r.add_argument("--out", required=True, help="output folder")
    r.set_defaults(fn=experiment.cmd_report)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, RuntimeError) as e:
        print(f"openclaw-rl {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `openclaw-rl ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
