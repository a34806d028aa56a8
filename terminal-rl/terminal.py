"""The terminal setting: the agent solves a shell task by running commands in an OS-isolated sandbox.

Episode. ``reset(task)`` makes a fresh temporary workspace, writes the task's files into it from the parent
(``data["files"]``, ``data["dirs"]``, ``data["modes"]``), creates one ``Sandbox`` for the episode (which hands
the workspace to the sandbox's uid) and then runs the task's ``data["setup"]`` shell script inside the sandbox
(for state that is easiest made with the tools themselves: git histories, archives). A set-up that fails
raises ``RuntimeError``: that is a broken task, not an agent error. ``close`` removes the workspace.

Action format. The model's message holds one fenced code block tagged ``bash``, ``sh`` or ``shell``, or
untagged (the first such block runs; blocks in other languages are ignored; an unclosed fence runs to the
end of the message). It runs as ``bash -c`` (``/bin/sh -c`` where there is no /usr/bin/bash) in a fresh
shell whose cwd is the workspace (``/workspace`` in namespace mode, also $HOME): only files carry over
between turns, not ``cd`` or variables. A line ``DONE`` outside code blocks ends the episode (after running
the block, if there is one). A message with neither gets a short format-help observation; it counts as a turn.
The episode also ends after ``max_turns`` steps.

Observation. ``exit code: N`` (or ``exit code: none (killed by signal S)``), a ``timed out after T s`` line
when the wall clock stopped it, then ``stdout:`` and ``stderr:`` sections, each cut to ``max_output_chars``
with a ``[... truncated ...]`` marker. ``next_state_text`` is the observation itself.

Checks. ``outcome()`` runs the task's ``data["checks"]`` once the episode is over; the reward is
``fraction_to_reward(passed, len(checks))``. A check is a JSON object of one of these shapes:

- ``{"file": P, "equals"|"contains"|"lacks"|"regex": S}``: read by the parent. ``equals`` compares with
  trailing whitespace of each line and trailing blank lines ignored; ``lacks`` needs the file to exist.
- ``{"path": P, "kind": "file"|"dir"|"symlink"|"absent"}``, optional ``"target": T`` (a symlink's target)
  and ``"mode": "644"`` (permission bits) or ``"executable": true`` (owner x bit): ``lstat`` by the parent.
- ``{"sh": CMD}``, optional ``"stdin"`` and ``"stdout"``: CMD runs in the episode's sandbox (``/bin/sh -c``,
  cwd the workspace); it passes when it exits 0 and, if ``stdout`` is given, its output equals it (each line
  stripped, blank lines at the ends ignored).

The parent never follows a symlink inside the workspace: every path is opened one component at a time,
relative to the workspace's directory fd, with ``O_NOFOLLOW`` (``envs/workspace.py``), so a link the
agent planted to a host file outside the workspace fails the check instead of leaking or faking it. Files are
read up to 1 MiB, and only regular files (a FIFO cannot block the checker).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import stat
from pathlib import Path
from typing import Any

import terminal_solutions
import terminal_tasks

from slime_ext.envs.base import EnvTask, SandboxedEpisode, StepResult, fraction_to_reward, register_setting
from slime_ext.envs.checks import CheckResult, clip
from slime_ext.envs.sandbox import RunResult, Sandbox, SandboxLimits, fresh_workspace
from slime_ext.envs.workspace import (
    lstat_in_workspace,
    read_workspace_file,
    readlink_in_workspace,
    rel_parts,
    write_files,
)

SETTING = "terminal"
SHELL_TAGS = ("", "bash", "sh", "shell")
BASH = "/usr/bin/bash"
# every run (set-up, agent, checks) gets a git identity, `main` as the default branch, no editor and no pager
RUN_ENV = {"GIT_AUTHOR_NAME": "Agent", "GIT_AUTHOR_EMAIL": "agent@example.com", "GIT_COMMITTER_NAME": "Agent",
           "GIT_COMMITTER_EMAIL": "agent@example.com", "GIT_CONFIG_COUNT": "1",
           "GIT_CONFIG_KEY_0": "init.defaultBranch", "GIT_CONFIG_VALUE_0": "main", "GIT_EDITOR": "true",
           "PAGER": "cat", "TERM": "dumb"}
FORMAT_HELP = ("No shell command found in your message. Put the command(s) to run in one fenced code block "
               "tagged bash:\n"
               "```bash\nls -la\n```\nWhen the task is complete, reply with a line containing only DONE.")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}```[ \t]*([\w+.-]*)[ \t]*$")
_FENCE_CLOSE = re.compile(r"^[ \t]{0,3}```[ \t]*$")
CHECK_KEYS = {"file": ("equals", "contains", "lacks", "regex"), "path": ("kind", "target", "mode", "executable"),
              "sh": ("stdin", "stdout")}
TASK_KEYS = {"category", "files", "dirs", "modes", "setup", "checks"}


# ----------------------------------------------------------------------------- parsing actions (pure)
@dataclasses.dataclass(frozen=True)
class ParsedAction:
    """command: the shell code to run (None when there is none); done: a DONE line outside code blocks;
    blocks: how many fenced blocks the message had, shell or not."""

    command: str | None
    done: bool
    blocks: int


def parse_action(text: str) -> ParsedAction:
    """The first shell code block of a message (see the module docstring) and whether it says DONE."""
    command: str | None = None
    blocks = 0
    done = False
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if not m:
            done = done or lines[i].strip().strip("*`_").rstrip(".!").strip() == "DONE"
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not _FENCE_CLOSE.match(lines[j]):
            j += 1
        blocks += 1
        body = "\n".join(lines[i + 1:j])
        if command is None and m.group(1).lower() in SHELL_TAGS and body.strip():
            command = body + "\n"
        i = j + 1
    return ParsedAction(command, done, blocks)


def format_observation(res: RunResult, timeout_s: float, max_chars: int) -> str:
    """The observation for one command: exit code, timeout, stdout and stderr (see the module docstring)."""
    code = str(res.exit_code) if res.exit_code is not None else f"none (killed by signal {res.signal})"
    lines = [f"exit code: {code}"]
    if res.timed_out:
        lines.append(f"timed out after {timeout_s:g} s")
    elif res.stopped_by:  # a run total (memory, processes, workspace size): say which, not just "signal 9"
        lines.append(f"stopped: {res.stop_reason}")
    for name, text in (("stdout", res.stdout), ("stderr", res.stderr)):
        lines.append(f"{name}:" + (f"\n{clip(text, max_chars, name)}" if text else " (empty)"))
    if res.truncated:
        lines.append("[output truncated: the command printed too much]")
    return "\n".join(lines)


def normalize(text: str) -> str:
    """For comparing outputs: trailing whitespace of every line and blank lines at the ends dropped."""
    return "\n".join(line.rstrip() for line in text.splitlines()).strip("\n")


# ----------------------------------------------------------------------------- task data: set-up and checks
def validate_task_data(task_id: str, data: dict) -> None:
    """ValueError unless `data` is a well-formed terminal task (known keys, 1+ checks of a known shape)."""
    unknown = set(data) - TASK_KEYS
    if unknown:
        raise ValueError(f"task {task_id}: unknown keys {sorted(unknown)}; allowed: {sorted(TASK_KEYS)}")
    for rel in [*data.get("files", {}), *data.get("dirs", []), *data.get("modes", {})]:
        rel_parts(rel)
    for rel, mode in data.get("modes", {}).items():
        if not re.fullmatch(r"[0-7]{3,4}", mode):
            raise ValueError(f"task {task_id}: mode of {rel} must be an octal string like '644', got {mode!r}")
    checks = data.get("checks") or []
    if not checks:
        raise ValueError(f"task {task_id}: no checks")
    for check in checks:
        kinds = [k for k in CHECK_KEYS if k in check]
        if len(kinds) != 1:
            raise ValueError(f"task {task_id}: a check needs exactly one of {list(CHECK_KEYS)}: {check}")
        extra = set(check) - {kinds[0], *CHECK_KEYS[kinds[0]]}
        if extra or (kinds[0] == "file" and len(check) != 2):
            raise ValueError(f"task {task_id}: bad {kinds[0]} check {check}")
        if kinds[0] in ("file", "path"):
            rel_parts(check[kinds[0]])
        if kinds[0] == "path" and check.get("kind", "file") not in ("file", "dir", "symlink", "absent"):
            raise ValueError(f"task {task_id}: bad path kind in {check}")


def describe_check(check: dict) -> str:
    """A one-line human description of a check."""
    if "sh" in check:
        cmd = " ".join(check["sh"].split())
        return f"sh: {cmd[:80]}" + (f" -> {check['stdout']!r}"[:60] if "stdout" in check else "")
    if "file" in check:
        op, value = next((k, v) for k, v in check.items() if k != "file")
        return f"file {check['file']} {op} {value!r}"[:120]
    extras = " ".join(f"{k}={check[k]}" for k in ("target", "mode", "executable") if k in check)
    return f"path {check['path']} is {check.get('kind', 'file')} {extras}".rstrip()


def write_task_files(root: Path, data: dict) -> None:
    """The parent's part of a task's set-up: its dirs and files (UTF-8), then the modes."""
    for rel in data.get("dirs", []):
        (root / rel).mkdir(parents=True, exist_ok=True)
    write_files(root, data.get("files", {}))
    for rel, mode in data.get("modes", {}).items():
        os.chmod(root / rel, int(mode, 8))


def _check_file(root: Path, check: dict) -> tuple[bool, str]:
    rel = check["file"]
    try:
        text = read_workspace_file(root, rel)
    except FileNotFoundError:
        return False, f"{rel} does not exist"
    except OSError as e:
        reason = "a symlink (not followed)" if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror
        return False, f"{rel} cannot be read: {reason}"
    if "equals" in check:
        ok = normalize(text) == normalize(check["equals"])
        return ok, "" if ok else f"content is {text[:200]!r}"
    if "contains" in check:
        return check["contains"] in text, f"{check['contains']!r} {'found' if check['contains'] in text else 'missing'}"
    if "lacks" in check:
        return check["lacks"] not in text, f"{check['lacks']!r} {'found' if check['lacks'] in text else 'absent'}"
    found = re.search(check["regex"], text, re.MULTILINE) is not None
    return found, "matched" if found else f"no match in {text[:200]!r}"


def _check_path(root: Path, check: dict) -> tuple[bool, str]:
    rel, want = check["path"], check.get("kind", "file")
    try:
        st = lstat_in_workspace(root, rel)
    except OSError:
        return False, f"a directory on the way to {rel} is a symlink or not a directory"
    if st is None:
        return want == "absent", f"{rel} does not exist"
    kind = ("symlink" if stat.S_ISLNK(st.st_mode) else "dir" if stat.S_ISDIR(st.st_mode)
            else "file" if stat.S_ISREG(st.st_mode) else "other")
    if kind != want:
        return False, f"{rel} is a {kind}"
    if "target" in check and readlink_in_workspace(root, rel) != check["target"]:
        return False, f"{rel} points to {readlink_in_workspace(root, rel)!r}"
    perm = stat.S_IMODE(st.st_mode)
    if "mode" in check and perm != int(check["mode"], 8):
        return False, f"{rel} has mode {perm:03o}"
    if "executable" in check and bool(perm & stat.S_IXUSR) != check["executable"]:
        return False, f"{rel} has mode {perm:03o}"
    return True, f"{rel} is a {kind}"


def _check_sh(box: Sandbox, check: dict, timeout_s: float) -> tuple[bool, str]:
    res = box.run(check["sh"], stdin=check.get("stdin"), env=RUN_ENV, timeout_s=timeout_s)
    if res.exit_code != 0:
        return False, f"exit code {res.exit_code}{' (timed out)' if res.timed_out else ''}: {res.stderr.strip()[:200]}"
    if "stdout" in check:
        got, want = (normalize("\n".join(s.strip() for s in t.splitlines())) for t in (res.stdout, check["stdout"]))
        return got == want, "" if got == want else f"stdout was {res.stdout[:200]!r}"
    return True, ""


def run_checks(root: Path, box: Sandbox, checks: list[dict], timeout_s: float = 10.0) -> list[CheckResult]:
    """Every check of a task against the workspace `root` (file and path checks from the parent, sh checks in `box`)."""
    results = []
    for check in checks:
        if "sh" in check:
            ok, detail = _check_sh(box, check, timeout_s)
        elif "file" in check:
            ok, detail = _check_file(root, check)
        else:
            ok, detail = _check_path(root, check)
        results.append(CheckResult(describe_check(check), ok, detail))
    return results


# ----------------------------------------------------------------------------- the environment
class TerminalEnv(SandboxedEpisode):
    """One terminal episode at a time (see the module docstring).

    max_turns: steps before the episode ends; command_timeout_s: wall clock of each command (also CPU seconds);
    max_output_chars: stdout / stderr shown per observation; mode: the sandbox mode (None: the best available);
    require_isolation: refuse the sandbox's rlimits fallback (None: only when OPENCLAW_REQUIRE_ISOLATION=1).
    """

    setting = SETTING
    tools: list[dict] = []  # actions are shell blocks in the message text, not tool calls
    observation_role = "user"

    def __init__(self, max_turns: int = 8, command_timeout_s: float = 10.0, max_output_chars: int = 4000,
                 mode: str | None = None,
                 require_isolation: bool | None = None) -> None:
        if max_turns < 1 or command_timeout_s <= 0 or max_output_chars < 1:
            raise ValueError("max_turns, command_timeout_s and max_output_chars must be positive")
        self.max_turns = max_turns
        self.command_timeout_s = command_timeout_s
        self.max_output_chars = max_output_chars
        self.mode = mode
        self.require_isolation = require_isolation
        self.limits = SandboxLimits(cpu_s=max(1, int(command_timeout_s)), wall_s=command_timeout_s)
        self.shell = BASH if os.access(BASH, os.X_OK) else "/bin/sh"
        self.task: EnvTask | None = None
        self.workspace: Path | None = None
        self.sandbox: Sandbox | None = None
        self.turns = 0
        self.done = False
        self.checks: list[CheckResult] | None = None
        self._stack = contextlib.ExitStack()

    def reset(self, task: EnvTask) -> str:
        if task.setting != SETTING:
            raise ValueError(f"task {task.id} is of setting {task.setting!r}, not {SETTING!r}")
        validate_task_data(task.id, task.data)
        self.close()
        self.workspace = self._stack.enter_context(fresh_workspace(f"term-{task.id}-"))
        write_task_files(self.workspace, task.data)
        self.sandbox = self._new_sandbox(self.workspace)
        if task.data.get("setup"):
            res = self.sandbox.run(task.data["setup"], env=RUN_ENV)
            if res.exit_code != 0:
                raise RuntimeError(f"set-up of task {task.id} failed (exit {res.exit_code}): "
                                   f"{res.stderr.strip()[:500]}")
        self.task, self.turns, self.done, self.checks = task, 0, False, None
        return (f"{task.instruction}\n\n"
                f"You are in a shell; the current directory holds the task's files. Reply with one ```bash code block "
                f"per message: it runs in a fresh shell in that directory ({self.command_timeout_s:g} s limit, no "
                f"network; only files persist between commands) and you will see its exit code and output. When the "
                f"task is complete, reply with a line containing only DONE. You have at most {self.max_turns} turns.")

    def step(self, action_text: str) -> StepResult:
        self._begin_step()
        action = parse_action(action_text)
        info: dict[str, Any] = {"turn": self.turns, "ran": action.command is not None}
        if action.command is not None:
            res = self.sandbox.run([self.shell, "-c", action.command], env=RUN_ENV, timeout_s=self.command_timeout_s)
            observation = format_observation(res, self.command_timeout_s, self.max_output_chars)
            if action.blocks > 1:
                observation += f"\nnote: your message had {action.blocks} code blocks; only the first shell block ran."
            info.update(exit_code=res.exit_code, timed_out=res.timed_out, wall_s=round(res.wall_s, 3))
        elif action.done:
            observation = "Episode finished."
        else:
            observation = FORMAT_HELP
            info["format_error"] = True
        if action.done:
            self.done, info["reason"] = True, "done"
        elif self.turns >= self.max_turns:
            self.done, info["reason"] = True, "max_turns"
        return StepResult(observation, self.done, info)

    def outcome(self) -> float:
        """Run the task's checks (once per episode; later calls return the same) and map them to [-1, 1]."""
        if self.sandbox is None or self.task is None or self.workspace is None:
            raise RuntimeError("no episode: call reset(task) first")
        self.done = True
        if self.checks is None:
            self.checks = run_checks(self.workspace, self.sandbox, self.task.data["checks"], self.command_timeout_s)
        return fraction_to_reward(sum(c.passed for c in self.checks), len(self.checks))



def list_terminal_tasks() -> list[EnvTask]:
    return terminal_tasks.tasks()


register_setting(SETTING, list_terminal_tasks, TerminalEnv, terminal_solutions.demonstrate)
