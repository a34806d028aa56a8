"""Terminal demonstrations that look, act and check, instead of one command and done (issue 31).

    .venv/bin/python experiments/agents/look_act_check.py env sft --setting terminal --seed 0 --out DIR
    .venv/bin/python experiments/agents/look_act_check.py env eval --setting terminal --seed 0 --repeat 4 \\
        --adapter DIR/adapter --out EVAL

Runs ``openclaw-rl`` (any of its commands, same arguments) with every terminal scripted solution rewritten
before it is played: ``ls -la`` first (look), the solution's own commands (act), then a command that shows
the result (check: the last file the commands wrote, else ``git log`` for a git task, else ``ls -la``), then
``DONE``. Every rewritten solution still earns +1 (the checks are the task's). What it measured is in
``README.md`` ("Look, act, check").
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "terminal-rl"))
import terminal_solutions  # noqa: E402  (the setting's module, the one its demonstrate() reads)

from slime_ext.cli import main  # noqa: E402


def check_command(code: str) -> str:
    """A command that shows what ``code`` did: the last file it wrote, its git history, or the listing."""
    written = [w for w in re.findall(r">\s*([\w./-]+)", code) if w != "/dev/null"]
    if written:
        return f"cat {written[-1]} | head -20"
    if "git" in code:
        return "git status --short && git log --oneline | head -5"
    return "ls -la"


def look_act_check(messages: list[str]) -> list[str]:
    """One scripted solution rewritten: look, the solution's commands, check, done."""
    acts = [m for m in messages if m != terminal_solutions.DONE]
    code = "\n".join(re.findall(r"```bash\n(.*?)\n```", acts[-1], re.S))
    return [terminal_solutions.bash("ls -la"), *acts, terminal_solutions.bash(check_command(code)),
            terminal_solutions.DONE]


if __name__ == "__main__":
    for task_id, messages in list(terminal_solutions.SOLUTIONS.items()):
        terminal_solutions.SOLUTIONS[task_id] = look_act_check(messages)
    raise SystemExit(main(sys.argv[1:]))
