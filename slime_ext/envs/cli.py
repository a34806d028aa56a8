"""``openclaw-rl env``: list a setting's tasks and play one by hand.

  openclaw-rl env list --setting S [--split train|heldout]      one line per task: id, split, category, instruction
  openclaw-rl env play --setting S --task ID [--max-turns N]    actions from stdin, observations and reward on stdout

``env play`` reads the agent's messages from stdin, in the same text format the model emits. Messages are
separated by a line holding only ``---`` (such a line inside a fenced code block does not separate). It prints
the first user message, then each action's observation as soon as that message is complete (so it also works
typed at a terminal), stops at the end of the input or of the episode, prints the task's checks and ends with
``reward: <value>`` (three decimals). The exit status is 0 whatever the reward.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator

from slime_ext.envs.base import SPLITS, get_task, list_tasks, make_env

SEPARATOR = "---"


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


def cmd_env_list(args: argparse.Namespace) -> int:
    for task in list_tasks(args.setting, args.split):
        summary = " ".join(task.instruction.split())
        category = task.data.get("category", "-")
        print(f"{task.id}\t{task.split}\t{category}\t{summary[:80]}{'...' if len(summary) > 80 else ''}")
    return 0


def cmd_env_play(args: argparse.Namespace) -> int:
    task = get_task(args.setting, args.task)
    kwargs = {} if args.max_turns is None else {"max_turns": args.max_turns}
    with make_env(args.setting, **kwargs) as env:
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


def add_env_parser(subparsers) -> None:
    """Add ``env list`` and ``env play`` to the ``openclaw-rl`` sub-command parsers."""
    p = subparsers.add_parser("env", help="list a setting's tasks, or play one by hand",
                              description="Agent environments (Track 2): list tasks, play a task by hand.")
    sub = p.add_subparsers(dest="env_command", required=True)
    lst = sub.add_parser("list", help="list the task ids of a setting (train and held-out)",
                         description="One line per task: id, split, category, the start of the instruction.")
    lst.add_argument("--setting", required=True, help="terminal (toolcall and swe when they are registered)")
    lst.add_argument("--split", choices=SPLITS, help="only this split [both]")
    lst.set_defaults(fn=cmd_env_list)
    play = sub.add_parser("play", help="play a task: actions on stdin, separated by lines of ---",
                          description="Read the agent's messages from stdin (separated by a line holding only ---; "
                                      "each in the format the model emits, e.g. a ```bash block, or DONE), print "
                                      "each observation, the checks, and finally `reward: <value>`.")
    play.add_argument("--setting", required=True, help="terminal (toolcall and swe when they are registered)")
    play.add_argument("--task", required=True, help="task id (see `env list`)")
    play.add_argument("--max-turns", type=int, help="end the episode after this many messages [the setting's default]")
    play.set_defaults(fn=cmd_env_play)


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
