"""``openclaw-rl env``: list a setting's tasks and play one by hand.

  openclaw-rl env list --setting S [--split train|heldout]      one line per task: id, split, category, instruction
  openclaw-rl env play --setting S --task ID [--max-turns N] [--run-dir D]  actions from stdin, observations and
                                                                reward on stdout (gui: screenshots under D)
  openclaw-rl env export --setting S --split train --out F.jsonl  a Slime prompt dataset naming each task
  openclaw-rl env eval --setting S [--split heldout] [--model M] the model's success rate on a split (JSON on stdout)
  openclaw-rl env demos --setting S --out F.jsonl [--model M]    the train split's scripted solutions as token data
  openclaw-rl env sft --setting S --out DIR [--steps N] ...      the warm start: LoRA SFT on those (DIR/adapter)
  openclaw-rl env train --setting S --out DIR [--init DIR/adapter] ...  agent RL on this machine (envs/recipe.py)

The recipe of a setting: ``env sft`` (the warm start), then ``env train --init SFT/adapter`` (GRPO groups of
episodes per task; each new adapter checked on a slice of train tasks RL never samples and kept only if it is not
worse), with ``env eval --adapter`` before and after on the held-out split.

``env eval`` and ``env train`` take ``--step-judge heuristic|openai`` (default off): every step is scored by a judge
(``agent_loop.make_step_judge``, built once per run) and the reward becomes ``clip(outcome + W * mean step score,
-1, 1)`` with ``--step-weight W`` (0.5 by default with a judge); ``openai`` asks the model ``--step-judge-model``
at the OpenAI-compatible ``--step-judge-url``, with the key from ``$OPENCLAW_RL_JUDGE_KEY`` (never printed).

``env play`` reads the agent's messages from stdin, in the same text format the model emits. Messages are
separated by a line holding only ``---`` (such a line inside a fenced code block does not separate). It prints
the first user message, then each action's observation as soon as that message is complete (so it also works
typed at a terminal), stops at the end of the input or of the episode, prints the task's checks and ends with
``reward: <value>`` (three decimals). The exit status is 0 whatever the reward.

Every ``env`` command takes ``--setting-path DIR|FILE|MODULE`` (repeatable) to load a setting of the user's own
first (``envs/loader.py``; ``$OPENCLAW_RL_SETTINGS`` and installed packages' settings are loaded too).

Every ``env`` command first prints on stderr what the agent sandbox enforces on this machine (its mode, how a
run's totals are bounded) and a WARNING when commands would run unisolated (the rlimits fallback).
``--require-isolation`` (or ``OPENCLAW_REQUIRE_ISOLATION=1``) makes that fallback an error (exit status 2).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Iterable, Iterator

from slime_ext.envs.base import SPLITS, get_task, list_tasks, make_env
from slime_ext.envs.recipe import (
    BASELINES,
    RunSettings,
    SftConfig,
    TrainConfig,
    evaluate,
    sft,
    train,
    write_demonstrations,
)

SEPARATOR = "---"
SETTING_HELP = "terminal, toolcall, swe, gui, or one loaded with --setting-path"
STEP_JUDGE_FLAGS = {"kind": "--step-judge", "url": "--step-judge-url", "model": "--step-judge-model",
                    "weight": "--step-weight"}


def split_messages(lines: Iterable[str]) -> Iterator[str]:
    """Messages from lines of input: separated by a line that is only ``---`` outside a fenced code block.
    Blank messages are skipped. A generator, so each message is yielded as soon as its separator is read."""
    block: list[str] = []
    in_fence = False
    for line in lines:
        if line.strip() == SEPARATOR and not in_fence:
            if "".join(block).strip():
                yield "".join(block)
            block = []
            continue
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        block.append(line)
    if "".join(block).strip():
        yield "".join(block)


def sandbox_preamble(args: argparse.Namespace) -> None:
    """Print what the sandbox enforces here (stderr). With --require-isolation, every Sandbox of this process (and
    of processes it starts) refuses the rlimits fallback, and this raises SandboxError at once when it is all
    there is, before a model loads."""
    from slime_ext.envs.sandbox import (
        REQUIRE_ENV,
        SandboxError,
        describe_isolation,
        isolation_report,
        refusal_message,
    )

    if getattr(args, "require_isolation", False):
        os.environ[REQUIRE_ENV] = "1"
    envs_log = logging.getLogger("slime_ext.envs")
    level = envs_log.level
    if not logging.getLogger().handlers:  # the probes' WARNINGs would reach stderr bare: the lines below say them
        envs_log.setLevel(logging.ERROR)
    try:
        report = isolation_report()
    finally:
        envs_log.setLevel(level)
    for line in describe_isolation(report):
        print(line, file=sys.stderr)
    if report["required"] and not report["isolated"]:
        raise SandboxError(refusal_message(report["why"]))


def cmd_env_list(args: argparse.Namespace) -> int:
    sandbox_preamble(args)
    for task in list_tasks(args.setting, args.split):
        summary = " ".join(task.instruction.split())
        category = task.data.get("category", "-")
        print(f"{task.id}\t{task.split}\t{category}\t{summary[:80]}{'...' if len(summary) > 80 else ''}")
    return 0


def cmd_env_play(args: argparse.Namespace) -> int:
    task = get_task(args.setting, args.task)
    sandbox_preamble(args)
    kwargs = {} if args.max_turns is None else {"max_turns": args.max_turns}
    with make_env(args.setting, run_dir=args.run_dir, **kwargs) as env:
        print(f"[task {task.id} | setting {task.setting} | split {task.split}]")
        print(env.reset(task), flush=True)
        turn = 0
        for message in split_messages(sys.stdin):
            turn += 1
            result = env.step(message)
            print(f"\n[observation {turn}]\n{result.observation}", flush=True)
            if result.done:
                print(f"\n[episode over: {result.info.get('reason', 'done')}]")
                break
        else:
            print("\n[episode over: end of input]")
        reward = env.outcome()
        for i, check in enumerate(getattr(env, "checks", None) or [], 1):
            print(f"check {i}: {'PASS' if check.passed else 'FAIL'}  {check.description}"
                  + (f"  ({check.detail})" if check.detail and not check.passed else ""))
    print(f"reward: {reward:.3f}", flush=True)
    return 0


def export_rows(setting: str, split: str | None) -> list[dict]:
    """One Slime prompt-dataset row per task: ``prompt`` (the instruction), ``label`` (the task id) and
    ``metadata`` ({setting, task_id}, which ``slime_ext.hooks.generate`` reads)."""
    return [{"prompt": t.instruction, "label": t.id, "metadata": {"setting": t.setting, "task_id": t.id}}
            for t in list_tasks(setting, split)]


def cmd_env_export(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    rows = export_rows(args.setting, args.split)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(f"wrote {len(rows)} {args.setting} tasks ({args.split or 'all splits'}) to {out}", file=sys.stderr)
    return 0


def _settings(args: argparse.Namespace):
    from pathlib import Path

    from slime_ext.envs.agent_loop import step_judge_problems

    if min(args.max_turns, args.max_new_tokens, args.concurrency) < 1:
        raise ValueError("--max-turns, --max-new-tokens and --concurrency must be >= 1")
    problems = step_judge_problems(args.step_judge, args.step_judge_url, args.step_judge_model, args.step_weight,
                                   STEP_JUDGE_FLAGS)
    if problems:
        raise ValueError("; ".join(problems))
    return RunSettings(setting=args.setting, model=args.model, max_turns=args.max_turns,
                       max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                       concurrency=args.concurrency, seed=args.seed, threads=args.threads, device=args.device,
                       run_dir=Path(args.run_dir) if getattr(args, "run_dir", None) else None,
                       step_judge=args.step_judge, step_judge_url=args.step_judge_url,
                       step_judge_model=args.step_judge_model, step_weight=args.step_weight)


def cmd_env_eval(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path


    list_tasks(args.setting)  # an unknown setting fails before the model loads
    settings = _settings(args)  # and so do flags that do not go together
    sandbox_preamble(args)
    result = evaluate(settings, args.split, args.limit, adapter=Path(args.adapter) if args.adapter else None,
                      repeat=args.repeat)
    text = json.dumps(result, indent=2)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


def cmd_env_demos(args: argparse.Namespace) -> int:
    from pathlib import Path


    list_tasks(args.setting)
    sandbox_preamble(args)
    write_demonstrations(RunSettings(setting=args.setting, model=args.model, max_turns=args.max_turns),
                         Path(args.out))
    return 0


def cmd_env_sft(args: argparse.Namespace) -> int:
    from pathlib import Path


    list_tasks(args.setting)
    config = SftConfig(steps=args.steps, lr=args.lr, lora_rank=args.lora_rank, batch_size=args.batch_size)
    settings = _settings(args)
    sandbox_preamble(args)
    out = Path(args.out)
    history = sft(settings, out, config)
    print(f"trained {len(history)} steps; the adapter is {out / 'adapter'} (next: openclaw-rl env eval --setting "
          f"{args.setting} --adapter {out / 'adapter'}, or env train --init {out / 'adapter'})")
    return 0


def cmd_env_train(args: argparse.Namespace) -> int:
    from pathlib import Path


    list_tasks(args.setting)
    config = TrainConfig(steps=args.steps, episodes=args.episodes, lr=args.lr, lora_rank=args.lora_rank,
                         baseline=args.baseline, group_size=args.group_size, policy_loss=args.policy_loss,
                         check=args.check)
    args.run_dir = args.run_dir or args.out  # the GUI setting's screenshots go with the adapters
    settings = _settings(args)
    sandbox_preamble(args)
    history = train(settings, Path(args.out), config, init=Path(args.init) if args.init else None)
    print(f"trained {len(history)} steps; metrics in {Path(args.out) / 'metrics.jsonl'}, the kept adapter in "
          f"{Path(args.out) / 'adapter'}")
    return 0


def _add_run_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--setting", required=True, help=SETTING_HELP)
    _add_setting_path(p)
    p.add_argument("--run-dir", help="where settings keep debugging artifacts: the gui setting saves a screenshot "
                                     "of every step under RUN_DIR/screenshots/ [none; env train: --out]")
    p.add_argument("--model", default="smollm2-135m", help="built-in model name, checkpoint directory, .gguf file or "
                                                        "Hugging Face hub id (org/name) [smollm2-135m]")
    p.add_argument("--max-turns", type=int, default=6, help="steps per episode [6]")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens per model message [128]")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature [1.0]")
    p.add_argument("--concurrency", type=int, default=4, help="episodes played at once [4]")
    p.add_argument("--seed", type=int, default=0, help="sampling seed [0]")
    p.add_argument("--threads", type=int, help="torch threads of the engine [torch's default]")
    p.add_argument("--device", default="auto", help="where the engine (and env train's trainer) compute: auto, "
                                                     "cpu, cuda or cuda:N [auto: the first CUDA GPU, else the CPU]")
    _add_step_judge_arguments(p)
    _add_require_isolation(p)


def _add_step_judge_arguments(p: argparse.ArgumentParser) -> None:
    from slime_ext.envs.agent_loop import DEFAULT_STEP_WEIGHT, JUDGE_KEY_ENV, STEP_JUDGES

    p.add_argument("--step-judge", choices=STEP_JUDGES, default="off",
                   help="score every step with a judge of its next state and add --step-weight times the episode's "
                        "mean step score to its reward: heuristic (a lexical classifier) or openai (a judge model "
                        "at --step-judge-url) [off]")
    p.add_argument("--step-judge-url", help=f"OpenAI-compatible endpoint of the judge model (with --step-judge "
                                            f"openai; its API key from ${JUDGE_KEY_ENV})")
    p.add_argument("--step-judge-model", help="model name to ask the judge endpoint for (with --step-judge openai)")
    p.add_argument("--step-weight", type=float, metavar="W",
                   help=f"weight of the mean step score in the reward, in [0, 1]; reward = clip(outcome + W * mean "
                        f"step score, -1, 1) [{DEFAULT_STEP_WEIGHT:g} with a step judge, 0 without]")


def _add_setting_path(p: argparse.ArgumentParser) -> None:
    p.add_argument("--setting-path", action="append", default=[], metavar="DIR|FILE|MODULE",
                   help="load a setting of your own first: a folder (its .py files that call register_setting), a "
                        ".py file or a module path; repeatable; also $OPENCLAW_RL_SETTINGS (docs/extending.md)")


def run_env_command(args: argparse.Namespace) -> int:
    """Load the user's settings (``--setting-path``, ``$OPENCLAW_RL_SETTINGS``, installed packages), then run
    the ``env`` sub-command."""
    from slime_ext.envs.loader import load_settings

    load_settings(args.setting_path)
    return args.env_fn(args)


def _add_require_isolation(p: argparse.ArgumentParser) -> None:
    p.add_argument("--require-isolation", action="store_true",
                   help="refuse to run agent commands without namespace isolation (the rlimits fallback lets them "
                        "read host files and reach host listeners); the same as OPENCLAW_REQUIRE_ISOLATION=1")


def add_env_parser(subparsers) -> None:
    """Add the ``env`` commands to the ``openclaw-rl`` sub-command parsers (the learning flags' defaults are
    ``SftConfig``'s and ``TrainConfig``'s)."""
    SFT, RL = SftConfig(), TrainConfig()
    p = subparsers.add_parser("env", help="list a setting's tasks, or play one by hand",
                              description="Agent environments (Track 2): list tasks, play a task by hand.")
    sub = p.add_subparsers(dest="env_command", required=True)
    lst = sub.add_parser("list", help="list the task ids of a setting (train and held-out)",
                         description="One line per task: id, split, category, the start of the instruction.")
    lst.add_argument("--setting", required=True, help=SETTING_HELP)
    _add_setting_path(lst)
    lst.add_argument("--split", choices=SPLITS, help="only this split [both]")
    lst.set_defaults(fn=run_env_command, env_fn=cmd_env_list)
    play = sub.add_parser("play", help="play a task: actions on stdin, separated by lines of ---",
                          description="Read the agent's messages from stdin (separated by a line holding only ---; "
                                      "each in the format the model emits, e.g. a ```bash block, or DONE), print "
                                      "each observation, the checks, and finally `reward: <value>`.")
    play.add_argument("--setting", required=True, help=SETTING_HELP)
    _add_setting_path(play)
    play.add_argument("--task", required=True, help="task id (see `env list`)")
    play.add_argument("--max-turns", type=int, help="end the episode after this many messages [the setting's default]")
    play.add_argument("--run-dir", help="where to keep debugging artifacts: the gui setting saves a screenshot of "
                                        "every step under RUN_DIR/screenshots/ [none]")
    _add_require_isolation(play)
    play.set_defaults(fn=run_env_command, env_fn=cmd_env_play)
    ex = sub.add_parser("export", help="write a Slime prompt dataset (JSONL) naming a split's tasks",
                        description="One JSON line per task: prompt (the instruction), label (the task id), metadata "
                                    "{setting, task_id}; Slime reads it with --prompt-data F --input-key prompt "
                                    "--label-key label --metadata-key metadata.")
    ex.add_argument("--setting", required=True, help=SETTING_HELP)
    _add_setting_path(ex)
    ex.add_argument("--split", choices=SPLITS, help="only this split [both]")
    ex.add_argument("--out", required=True, help="the JSONL file to write")
    ex.set_defaults(fn=run_env_command, env_fn=cmd_env_export)
    ev = sub.add_parser("eval", help="the model's success rate on a split (no training)",
                        description="Play every task of a split once with the embedded engine and print a JSON "
                                    "summary: mean reward, success rate (reward 1.0), episodes per minute, per-task "
                                    "rewards.")
    _add_run_arguments(ev)
    ev.add_argument("--split", choices=SPLITS, default="heldout", help="which tasks [heldout]")
    ev.add_argument("--limit", type=int, help="only the first N tasks of the split [all]")
    ev.add_argument("--adapter", help="a LoRA adapter folder to evaluate (env sft's or env train's DIR/adapter) "
                                      "[none: the base model]")
    ev.add_argument("--repeat", type=int, default=1, help="play every task this many times [1]")
    ev.add_argument("--out", help="also write the JSON summary to this file")
    ev.set_defaults(fn=run_env_command, env_fn=cmd_env_eval)
    tr = sub.add_parser("train", help="agent RL here: groups of episodes -> a step -> a checked adapter, repeated",
                        description="Each step plays --episodes episodes on train tasks (--group-size episodes of "
                                    "each), trains one policy step on them (GRPO advantages, constant groups dropped, "
                                    "observation tokens masked out), swaps the new LoRA adapter into the engine and "
                                    "keeps it only if the --check slice does not get worse. Progress on stderr; "
                                    "metrics.jsonl, train.png, every step's adapter and the kept one (adapter/) "
                                    "under --out.")
    _add_run_arguments(tr)
    tr.add_argument("--out", required=True, help="output folder: metrics.jsonl and one adapter per step")
    tr.add_argument("--steps", type=int, default=RL.steps, help=f"training steps [{RL.steps}]")
    tr.add_argument("--episodes", type=int, default=RL.episodes,
                    help=f"episodes per step (--episodes / --group-size train tasks) [{RL.episodes}]")
    tr.add_argument("--lr", type=float, default=RL.lr, help=f"learning rate [{RL.lr:g}]")
    tr.add_argument("--lora-rank", type=int, default=RL.lora_rank,
                    help=f"LoRA rank of a new adapter (--init keeps its own) [{RL.lora_rank}]")
    tr.add_argument("--init", metavar="ADAPTER", help="start from this LoRA adapter (env sft's DIR/adapter: the warm "
                                                       "start) [a new adapter on the base model]")
    tr.add_argument("--baseline", choices=BASELINES, default=RL.baseline,
                    help="group: GRPO, --group-size episodes per task, each episode's advantage against its group "
                         "(groups whose rewards are all equal are dropped and counted); mean: the step's mean "
                         f"reward; none [{RL.baseline}]")
    tr.add_argument("--group-size", type=int, default=RL.group_size,
                    help=f"episodes per task with --baseline group [{RL.group_size}]")
    tr.add_argument("--check", type=int, default=RL.check, metavar="N",
                    help="N train tasks RL never samples, played greedily after every step: an adapter that solves "
                         "more than one fewer of them than the best so far is not kept (reverted); 0: off "
                         "[16, or a quarter of the train tasks when fewer]")
    tr.add_argument("--policy-loss", default=RL.policy_loss, metavar="LOSS",
                    help="the policy loss: ppo (clipped ratio), or your own as module:attr, called like "
                         f"algorithms/ppo.py's policy_loss (docs/extending.md) [{RL.policy_loss}]")
    tr.set_defaults(fn=run_env_command, env_fn=cmd_env_train)
    de = sub.add_parser("demos", help="write the train split's scripted solutions as token data (JSONL)",
                        description="Play every train task's scripted solution through the environment with the agent "
                                    "loop and write one JSON line per task that earned +1: tokens, response_length, "
                                    "loss_mask (1 on the agent's tokens), label, metadata. Held-out tasks are never "
                                    "written. Slime's SFT reads it (slime_ext.hooks.sft).")
    de.add_argument("--setting", required=True, help=SETTING_HELP)
    _add_setting_path(de)
    de.add_argument("--model", default="smollm2-135m", help="whose tokenizer and chat template: a built-in model "
                                                            "name, a checkpoint directory, a .gguf file or a Hugging "
                                                            "Face hub id (org/name) [smollm2-135m]")
    de.add_argument("--max-turns", type=int, default=6, help="steps per episode [6]")
    de.add_argument("--out", required=True, help="the JSONL file to write")
    _add_require_isolation(de)
    de.set_defaults(fn=run_env_command, env_fn=cmd_env_demos)
    sf = sub.add_parser("sft", help="the warm start: LoRA SFT on the train split's scripted solutions",
                        description="Play every train task's scripted solution through the environment (DIR/demos.jsonl), "
                                    "then train a LoRA adapter on them, the loss on the agent's tokens only. Progress "
                                    "on stderr; DIR/adapter, DIR/metrics.jsonl and DIR/sft.png.")
    _add_run_arguments(sf)
    sf.add_argument("--out", required=True, help="output folder")
    sf.add_argument("--steps", type=int, default=SFT.steps, help="optimizer steps; the demonstrations are passed "
                                                                 f"over in a new order each time [{SFT.steps}]")
    sf.add_argument("--lr", type=float, default=SFT.lr, help=f"learning rate [{SFT.lr:g}]")
    sf.add_argument("--lora-rank", type=int, default=SFT.lora_rank, help=f"LoRA rank [{SFT.lora_rank}]")
    sf.add_argument("--batch-size", type=int, default=SFT.batch_size,
                    help=f"demonstrations per optimizer step [{SFT.batch_size}]")
    sf.set_defaults(fn=run_env_command, env_fn=cmd_env_sft)


def main(argv: list[str] | None = None) -> int:
    """Stand-alone entry (``python -m slime_ext.envs.cli env ...``), the same as ``openclaw-rl env ...``."""
    parser = argparse.ArgumentParser(prog="openclaw-rl")
    add_env_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, RuntimeError) as e:
        print(f"openclaw-rl {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
