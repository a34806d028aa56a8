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
import difflib
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from slime_ext.config import JUDGING, MODEL_ALIAS, SERVING, ServeConfig, load_yaml
from slime_ext.learning.settings import DISTILLATION, LEARNING
from slime_ext.settings import add_arguments, given_on_command_line


def _add_serve_args(p: argparse.ArgumentParser) -> None:
    """``serve``'s flags: one per declared setting (``slime_ext.settings``), and ``--config`` / ``--user-key``."""
    p.add_argument("--config", help="YAML file of settings (the flag names, with - or _); flags override it")
    p.add_argument("--user-key", action="append", metavar="NAME=KEY", dest="user_key_pairs",
                   help="a per-user API key (repeatable): requests with KEY are that user's turns and metrics")
    add_arguments(p, ServeConfig, groups=(SERVING, JUDGING, LEARNING, DISTILLATION))


def serve_config(args: argparse.Namespace) -> ServeConfig:
    """The settings of a ``serve`` command line: its YAML file (``--config``), overridden by the flags given."""
    data: dict[str, Any] = load_yaml(args.config) if args.config else {}
    data.update(given_on_command_line(args, ServeConfig))
    for pair in getattr(args, "user_key_pairs", None) or []:
        name, sep, key = pair.partition("=")
        if not sep or not name or not key:
            raise ValueError("--user-key expects NAME=KEY with both parts non-empty")  # never echo a key
        data.setdefault("user_keys", {})[name] = key
    return ServeConfig.from_mapping(data, args.config or "command line")


DEFAULT_CHAT_URL = f"http://{ServeConfig.host}:{ServeConfig.port}/v1"  # where `serve` listens by default
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
    from slime_ext.logs import FORMAT

    cfg = serve_config(args)
    logging.basicConfig(level=cfg.log_level.upper(), format=FORMAT)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # OpenMP's own wait policy (spin briefly at a barrier, then sleep): a passive one made every decode step wait
    # for its threads to wake, and one stream ran at half speed (docs/engine.md, "Threads"). The trainer beside the
    # engine sleeps at its barriers (trainers/process.py) and runs at idle priority, so it does not hold the cores.
    from slime_ext.serve import run_server

    run_server(cfg, warnings=secrets_on_command_line(args))  # logged in RUN_DIR/serve.log too
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from slime_ext.terminal_chat import run_chat

    return run_chat(args.url, args.api_key, args.model, args.max_tokens)


def cmd_export(args: argparse.Namespace) -> int:
    from slime_ext.trainers.export import export

    written = export(args.run_dir, args.version, args.format, args.out, gguf_type=args.gguf_type,
                     progress=lambda m: print(m, file=sys.stderr))
    print(json.dumps(written))
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from slime_ext import dashboard
    from slime_ext.store import DB_NAME, Store

    if not (Path(args.run_dir) / DB_NAME).exists():
        raise ValueError(f"{args.run_dir} holds no run (no {DB_NAME})")
    store = Store(args.run_dir)
    try:
        data = dashboard.collect(store, args.run_dir, args.user, None)
    finally:
        store.close()
    Path(args.out).write_text(dashboard.page(data))
    print(f"wrote {args.out}: {data['counts']['judged']} judged turns, version {data['served_version']}")
    return 0


def cmd_records(args: argparse.Namespace) -> int:
    from slime_ext.store import export_records

    run_dir = args.run_dir or newest_run_dir("records")
    if run_dir is None:
        return 2
    try:
        data = export_records(run_dir)
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
            if t.get("memory"):  # served with the preference memory (chat/memory.py), and its opening given
                given = (t.get("sampling") or {}).get("forced_tokens")
                print(f"      memory: {len(t['memory'])} preference{'s' if len(t['memory']) != 1 else ''}"
                      + (f"; its first {given} tokens given (the opening the user asked for)" if given else ""))
            if t["next_state"] is not None:
                print(f"      next state ({t['next_state_role']}): {t['next_state'][:70]!r}")
            if t["verdict"] is not None:
                print(f"      verdict {t['verdict']:+d} from {verdict_source(t)}{training_note(t)}")
            if t.get("hint"):
                print(f"      hint: {t['hint'][:70]!r}")
            if t.get("teacher_check"):  # does the hinted teacher follow the hint (trainers/teachability.py)
                print(f"      {teacher_check_line(t['teacher_check'])}")
            if t.get("dropped"):  # not trained on, and why (e.g. the canary refused its step)
                print(f"      dropped: {t['dropped']}")
            elif (t.get("setbacks") or {}).get("last"):  # waiting again after a failed or refused step
                print(f"      setback: {t['setbacks']['last']}")
    for user, prefs in data.get("preferences", {}).items():  # each user's accepted hints (trainers/replay.py)
        print(f"preferences of {user}: {len(prefs)}")
        for p in prefs:
            print(f"  {preference_line(p)}")
    return 0


def verdict_source(t: dict[str, Any]) -> str:
    """Where a turn's verdict came from: the user's own feedback (POST /v1/feedback), or the judge's votes."""
    return "the user's feedback" if t.get("feedback") else f"votes {t['votes']}"


def training_note(t: dict[str, Any]) -> str:
    """What became of a judged turn: trained in which version, or still waiting (a dropped one says so below)."""
    if t.get("trained_in_version") is not None:
        return f"; trained in v{t['trained_in_version']}"
    return "" if t.get("dropped") else "; not trained on yet"


def newest_run_dir(command: str) -> Path | None:
    """The run directory a command without ``--run-dir`` reads: the newest under ``runs/`` (where ``serve`` makes
    them) with turns, said on stderr; None, with the reason on stderr, when there is none."""
    from slime_ext.config import RUNS_ROOT
    from slime_ext.store import newest_run_with_turns

    found = newest_run_with_turns(RUNS_ROOT)
    if found is None:
        print(f"openclaw-rl {command}: no run with turns under {RUNS_ROOT}/ (where serve records by default); "
              "name one with --run-dir DIR", file=sys.stderr)
        return None
    print(f"openclaw-rl {command}: {found} (the newest run with turns under {RUNS_ROOT}/; --run-dir DIR for another)",
          file=sys.stderr)
    return found


def preference_line(p: dict[str, Any]) -> str:
    """One line of ``records``: a user's preference, whether it is standing (replayed), where it came from."""
    times = f", stated {p['times']} times" if p["times"] > 1 else ""
    yet = "; the model does not follow it yet (its hinted teacher did not)" if p.get("teacher_follows") is False else ""
    return (f"{'standing' if p['standing'] else 'one-off '} {p['hint'][:70]!r} "
            f"(turn {p['turn']} of {p['session_id']}{times}){yet}")


def teacher_check_line(c: dict[str, Any]) -> str:
    """One line of ``records``: does the hinted teacher follow the turn's hint (``trainers/teachability.py``)."""
    head = f"teacher {'follows' if c['follows'] else 'DOES NOT FOLLOW'} the hint (median gap {c['hint_gap']:+.3f} " \
           f"nats/token over {c['hint_checks']} prompt{'s' if c['hint_checks'] != 1 else ''})"
    if c["same_answer"] is None:
        return head + "; not measured on this prompt"
    return (head + f"; here gap {c['gap']:+.3f}, {'same' if c['same_answer'] else 'different'} answer without it: "
            f"{c['sample'][:60]!r}")


def cmd_memory(args: argparse.Namespace) -> int:
    """``memory list|forget|clear``: each user's preferences, as the preference memory serves them."""
    from slime_ext.chat.memory import opening
    from slime_ext.store import DB_NAME, Store

    if not (Path(args.run_dir) / DB_NAME).exists():
        print(f"openclaw-rl memory: no {DB_NAME} in {args.run_dir}: not a run directory", file=sys.stderr)
        return 2
    user = None if args.user in (None, "-") else args.user
    store = Store(args.run_dir)
    try:
        if args.action == "list":
            users = [args.user] if args.user else store.preference_users()
            if not users:
                print("no preferences stored")
            for name in users:
                prefs = store.preferences(None if name == "-" else name)
                print(f"{name}: {len(prefs)} preference{'s' if len(prefs) != 1 else ''}")
                for p in prefs:
                    print(f"  [{p['id']}] {preference_line(p)}")
                said = opening([p["hint"] for p in prefs if p["standing"]])
                if said:
                    print(f"  answers open with {said!r} (serve --memory-opening on, the default)")
            return 0
        if args.user is None:
            print(f"openclaw-rl memory {args.action}: name the user with --user NAME ('-' for requests without "
                  "one)", file=sys.stderr)
            return 2
        if args.action == "forget":
            if args.id is None:
                print("openclaw-rl memory forget: give the preference's id (the [N] of `memory list`)", file=sys.stderr)
                return 2
            hint = store.forget_preference(user, args.id)
            if hint is None:
                print(f"openclaw-rl memory forget: {args.user} has no preference [{args.id}]", file=sys.stderr)
                return 1
            print(f"forgot [{args.id}] {hint!r} of {args.user}")
            return 0
        n = store.clear_preferences(user)
        print(f"cleared {n} preference{'s' if n != 1 else ''} of {args.user}")
        return 0
    finally:
        store.close()


def cmd_models(args: argparse.Namespace) -> int:
    from slime_ext.models import BUILTIN_MODELS, cache_dir, resolve_model

    for name in BUILTIN_MODELS:
        if args.prepare:
            resolve_model(name)
        ready = (cache_dir() / name / "config.json").exists()
        print(f"{name:14s} {'ready' if ready else 'not converted yet'}  {cache_dir() / name}")
    return 0


class CommandParser(argparse.ArgumentParser):
    """``openclaw-rl``'s parsers, each subcommand's included: arguments a parser does not know are reported by
    that parser, with the flags it knows that come close (``openclaw-rl serve: unknown flag --lora-rnk; did you
    mean --lora-rank?``), not by the top-level parser with its usage; a wrong flag is reported before what it left
    missing (``env list --settng X``: not "--setting is required"); and an error prints the usage only when it is
    short (``serve``'s runs to 60 lines: the error would scroll away). A flag is taken only as spelled in full:
    argparse's prefix matching made ``serve --lor 3`` a ``--lora-rank 3`` server."""

    SHORT_USAGE_LINES = 8
    _given: list[str] = []

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:  # a subcommand's parser runs inside its parent's: the innermost one that was given them says it
            self.exit(2, f"{self.prog}: {unknown_arguments(self, extras)}\n")
        return parsed, extras

    def error(self, message: str):
        unknown = unknown_flags(self, self._given) if self._subparsers is None else []  # a parent's args hold its
        if unknown:  # subcommand's flags
            self.exit(2, f"{self.prog}: {unknown_arguments(self, unknown)}\n")
        usage = self.format_usage()
        shown = usage if usage.count("\n") <= self.SHORT_USAGE_LINES else f"({self.prog} --help lists its flags)\n"
        self.exit(2, f"{shown}{self.prog}: error: {message}\n")


def unknown_flags(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """The flags in ``args`` that ``parser`` does not know (a prefix of one it knows is not one: no abbreviations)."""
    known = parser._option_string_actions  # argparse keeps them there; no public accessor
    unknown = []
    for a in args:
        if a == "--":
            break
        name = a.split("=", 1)[0]
        if not a.startswith("-") or len(a) == 1 or parser._negative_number_matcher.match(a) or name in known:
            continue
        unknown.append(a)
    return unknown


def unknown_arguments(parser: argparse.ArgumentParser, extras: list[str]) -> str:
    """What is wrong with ``extras`` (arguments ``parser`` did not take), with close matches of each unknown flag."""
    known = sorted(parser._option_string_actions)
    flags = [a.split("=", 1)[0] for a in extras if a.startswith("-") and len(a) > 1]
    if not flags:
        return f"unexpected argument{'s' if len(extras) > 1 else ''} {' '.join(extras)} ({parser.prog} --help)"
    said = []
    for flag in flags:
        score = {k: difflib.SequenceMatcher(None, flag, k).ratio() for k in difflib.get_close_matches(flag, known, n=3)}
        close = [k for k in score if score[k] >= max(score.values()) - 0.1]  # the best, and any as good
        said.append(f"unknown flag {flag}; " + (f"did you mean {' or '.join(close)}?" if close else
                                                 f"{parser.prog} --help lists its flags"))
    return "; ".join(said)


def build_parser() -> argparse.ArgumentParser:
    from slime_ext.models.gguf import GGUF_TYPES
    from slime_ext.trainers.export import FORMATS

    parser = CommandParser(prog="openclaw-rl", description="Serve a self-hosted agent and learn from its conversations.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="start the OpenAI-compatible server and record every conversation",
                       description="Start the OpenAI-compatible API (http://HOST:PORT/v1) and record every turn in RUN_DIR.")
    _add_serve_args(p)
    p.set_defaults(fn=cmd_serve)
    p = sub.add_parser("chat", help="chat with a running server in the terminal, and tell it /good or /bad",
                       description="A terminal chat with a running `openclaw-rl serve`: it keeps the conversation, "
                                   "prints each reply as it streams and the version that served it, and takes /good, "
                                   "/bad [what would have been better], /new, /memory, /help and /quit. /good and /bad "
                                   "are explicit feedback on the last reply (POST /v1/feedback); a plain follow-up is "
                                   "judged as feedback too.")
    p.add_argument("--url", default=DEFAULT_CHAT_URL, help=f"the server's API base [{DEFAULT_CHAT_URL}]")
    p.add_argument("--api-key", help="the server's key, if it has one [$OPENCLAW_RL_API_KEY]")
    p.add_argument("--model", default=MODEL_ALIAS, help=f"the model name to send [{MODEL_ALIAS}]")
    p.add_argument("--max-tokens", type=int, help="the longest reply, in tokens [the server's --default-max-tokens]")
    p.set_defaults(fn=cmd_chat)
    p = sub.add_parser("records", help="print the sessions and turns of a run directory",
                       description="Print recorded sessions and turns with their decisions and reasons.")
    p.add_argument("--run-dir", help="the run directory given to serve [the newest with turns under runs/]")
    p.add_argument("--json", action="store_true", help="one JSON object: {sessions: [{id, user, turns: [...]}]}")
    p.set_defaults(fn=cmd_records)
    p = sub.add_parser("memory", help="list or delete users' preferences (what --memory on serves them with)",
                       description="List each user's preferences (standing ones are what the preference memory "
                                   "adds to their requests), forget one by its id, or clear a user's. Works while "
                                   "the server runs: the next request sees the change.")
    p.add_argument("action", choices=("list", "forget", "clear"))
    p.add_argument("id", nargs="?", type=int, help="forget: the preference's id, the [N] that `memory list` prints")
    p.add_argument("--run-dir", required=True, help="the run directory given to serve")
    p.add_argument("--user", help="whose preferences ('-': requests without a user); list: all users when omitted")
    p.set_defaults(fn=cmd_memory)
    p = sub.add_parser("export", help="write a learned version as a peft adapter, a merged checkpoint or a GGUF file",
                       description="Write a LoRA version the trainer published in RUN_DIR (the newest unless --version) "
                                   "for other tools: peft (an adapter folder that peft, vLLM and SGLang load), "
                                   "merged (a Hugging Face checkpoint) or gguf (one file for llama.cpp and Ollama). "
                                   "`serve --model` serves a merged folder or a GGUF file.")
    p.add_argument("--run-dir", required=True, help="the run directory given to serve")
    p.add_argument("--version", type=int, help="the version to export [the newest with weights]")
    p.add_argument("--format", required=True, choices=FORMATS, help="what to write")
    p.add_argument("--out", required=True, help="the folder (peft, merged) or file (gguf) to write; must not exist")
    p.add_argument("--gguf-type", default="f16", choices=GGUF_TYPES, help="gguf: the matrices' type [f16]")
    p.set_defaults(fn=cmd_export)
    p = sub.add_parser("report", help="write an offline HTML page of what a run learned",
                       description="Write one self-contained HTML file (no network needed to open it) with what the "
                                   "server's /ui page shows live: versions and the canary, judged / trained / "
                                   "dropped turns and why, reward over time per user, preferences, hints not "
                                   "followed yet, recent turns.")
    p.add_argument("--run-dir", required=True, help="the run directory given to serve")
    p.add_argument("--out", required=True, help="the HTML file to write")
    p.add_argument("--user", help="only this named user's figures [everyone's]")
    p.set_defaults(fn=cmd_report)
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
                                     "temperature 0, without the preference memory, and with it where "
                                     "the server has it on) at the start and after every --probe-every sessions. "
                                     "Writes results.csv, sessions.csv (each session's first answer), results.md "
                                     "(with sessions to adaptation) and results.png under --out; progress on stderr.")
    experiment.add_arguments(e)
    e.set_defaults(fn=experiment.cmd_personalization)
    r = kinds.add_parser("report", help="merge results.csv files into one CSV, table and plot",
                         description="Read the results.csv of earlier runs (for example one run per seed), and the "
                                     "sessions.csv beside each, and write the merged results.csv, sessions.csv, "
                                     "results.md and results.png under --out.")
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
