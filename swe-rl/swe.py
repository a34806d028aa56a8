"""The software-engineering setting: the agent fixes a bug that an AST mutation injected into a small repository.

This module holds the environment (``SweEnv``), the task list and the setting's registration; the parts live in
one module each:

- ``swe_repos``: the repositories as data, and the generated task table ``TABLE``;
- ``swe_mutations``: mutation sites and applying one by its exact text span (pure);
- ``swe_checks``: the sandboxed unittest run and its verdicts, lint, the integrity check, the reward rule;
- ``swe_commands``: the action format: parsing a command, SEARCH/REPLACE edits, diffs, paths (pure);
- ``workspace`` (shared with the other settings): the episode's files, read / written / listed without
  following symlinks;
- ``swe_table``: generating ``swe_repos.TABLE`` (which sites qualify as tasks) and writing it.

Tasks. A task is (repository, mutation site): one of the small packages of ``swe_repos.REPOS`` with one
mutation applied to a module outside ``tests/``. Which sites qualify is stored in ``swe_repos.TABLE`` with a
digest of each repository's files and mutation sites; ``list_swe_tasks`` raises when it is stale, so the
listed tasks are always the ones the table was generated for. Task ids are ``swe-<repo>-<site index>``; a task
is held out iff sha256(id) is divisible by 5 (``terminal_tasks.split_of``).

Episode. ``reset(task)`` writes the mutated repository into a fresh workspace and creates one ``Sandbox`` for
the episode. The first message holds the task (which tests fail), the repository's file list and the commands
(``swe_commands``). ``test`` runs the suite in the sandbox: each test, and the import of the test modules, gets
``per_test_timeout_s`` (2 s); the whole run ``suite_timeout_s`` (20 s). A message without a usable command (or
with a malformed one) gets an error observation and counts as a turn; the episode ends at ``submit`` or after
``max_turns`` (12) steps. After an edit the observation is the next state: lint output, the test verdicts and
the diff. ``next_state_text`` is the observation.

Outcome. ``outcome()`` builds a FRESH workspace from the ORIGINAL repository's ``tests/`` and the episode's
versions of the original non-test files (files the agent deleted stay deleted; files it added are ignored), and
runs the suite there in a fresh sandbox, so editing or deleting tests cannot help. The reward is
``swe_checks.swe_reward`` of that run and of ``swe_checks.integrity_problems`` (+1 all tests pass; -1 for a
regression or an integrity problem; otherwise the share of the initially failing tests that now pass, in
[-1, 1)). It is computed once per episode.
"""

from __future__ import annotations

import contextlib
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import swe_repos
from swe_checks import format_report, integrity_problems, lint, run_tests, swe_reward
from swe_commands import (
    EDIT_FORMAT,
    Command,
    EditError,
    apply_edit,
    normalize_path,
    parse_command,
    parse_edit_blocks,
    unified_diff,
)
from swe_mutations import (
    TESTS_DIR,
    Mutation,
    mutated_files,
    repo_digest,
    repo_mutations,
    source_files,
)

from slime_ext.envs.base import EnvTask, SandboxedEpisode, StepResult, register_setting
from slime_ext.envs.checks import CheckResult, clip, split_of
from slime_ext.envs.sandbox import Sandbox, SandboxLimits, fresh_workspace
from slime_ext.envs.workspace import (
    list_workspace,
    lstat_in_workspace,
    read_files,
    read_workspace_file,
    write_files,
    write_workspace_file,
)

SETTING = "swe"
MAX_GREP_MATCHES = 60


# ----------------------------------------------------------------------------- the environment
class SweEnv(SandboxedEpisode):
    """One SWE episode at a time (see the module docstring).

    max_turns: steps before the episode ends; suite_timeout_s: wall clock of one test run (also its CPU seconds);
    per_test_timeout_s: wall clock of one test; max_output_chars: per observation section; mode: the sandbox mode;
    require_isolation: refuse the sandbox's rlimits fallback (None: only when OPENCLAW_REQUIRE_ISOLATION=1).
    """

    setting = SETTING
    tools: list[dict] = []  # commands are fenced blocks in the message text, not tool calls
    observation_role = "user"

    def __init__(self, max_turns: int = 12, suite_timeout_s: float = 20.0, per_test_timeout_s: float = 2.0,
                 max_output_chars: int = 6000, mode: str | None = None,
                 require_isolation: bool | None = None) -> None:
        if max_turns < 1 or suite_timeout_s <= 0 or per_test_timeout_s <= 0 or max_output_chars < 1:
            raise ValueError("max_turns, the timeouts and max_output_chars must be positive")
        self.max_turns = max_turns
        self.suite_timeout_s = suite_timeout_s
        self.per_test_timeout_s = per_test_timeout_s
        self.max_output_chars = max_output_chars
        self.mode = mode
        self.require_isolation = require_isolation
        self.limits = SandboxLimits(cpu_s=max(1, int(suite_timeout_s)), wall_s=suite_timeout_s,
                                    output_bytes=256 * 1024)
        self.task: EnvTask | None = None
        self.workspace: Path | None = None
        self.sandbox: Sandbox | None = None
        self.start_files: dict[str, str] = {}
        self.turns = 0
        self.done = False
        self.checks: list[CheckResult] | None = None
        self.reward: float | None = None
        self._stack = contextlib.ExitStack()

    # -- episode
    def reset(self, task: EnvTask) -> str:
        if task.setting != SETTING:
            raise ValueError(f"task {task.id} is of setting {task.setting!r}, not {SETTING!r}")
        self.close()
        repo, m = task.data["repo"], Mutation(**task.data["mutation"])
        self.start_files = mutated_files(repo, m)
        self.workspace = self._stack.enter_context(fresh_workspace(f"swe-{task.id}-"))
        write_files(self.workspace, self.start_files)
        self.sandbox = self._new_sandbox(self.workspace)
        self.task, self.turns, self.done, self.checks, self.reward = task, 0, False, None, None
        file_list = "\n".join(f"  {p}" for p in sorted(self.start_files))
        return (f"{task.instruction}\n\nThe repository (its root is the current directory):\n{file_list}\n\n"
                f"Reply with exactly one command per message, in a fenced code block:\n"
                f"```\ncat PATH\n```\n"
                f"Commands:\n"
                f"  cat PATH       show a file with line numbers\n"
                f"  ls [PATH]      list the files under PATH (default: all)\n"
                f"  grep PATTERN   lines matching a Python regular expression, in every file\n"
                f"  edit PATH      replace lines of a file; the block continues with one or more of:\n"
                f"                 <<<<<<< SEARCH / exact lines (matching once) / ======= / new lines / "
                f">>>>>>> REPLACE\n"
                f"  test           run the test suite (python3 -m unittest) and show each test's verdict\n"
                f"  diff           show your changes as a unified diff\n"
                f"  submit         finish; your source files are then graded with the original tests\n"
                f"For example:\n```\n{EDIT_FORMAT}\n```\n"
                f"After an edit you see the lint output, the test verdicts and the diff. "
                f"You have at most {self.max_turns} turns.")

    def step(self, action_text: str) -> StepResult:
        self._begin_step()
        command, note = parse_command(action_text)
        info: dict[str, Any] = {"turn": self.turns, "command": command.name if command else None}
        if command is None:
            observation = note
            info["format_error"] = True
        else:
            try:
                observation = self._run(command, info)
            except ValueError as e:  # EditError included: the message is the observation
                observation, info["error"] = str(e), True
            if note:
                observation += "\n" + note
        if command is not None and command.name == "submit":
            self.done, info["reason"] = True, "submit"
        elif self.turns >= self.max_turns:
            self.done, info["reason"] = True, "max_turns"
        return StepResult(observation, self.done, info)

    def _run(self, command: Command, info: dict[str, Any]) -> str:
        name, arg = command.name, command.arg
        if name in ("test", "diff") and arg:  # (submit ignores what follows it)
            raise ValueError(f"{name} takes no arguments (got {arg!r}).")
        if name == "submit":
            return "Submitted. Your source files will now be graded with the original tests."
        if name == "test":
            run = run_tests(self.sandbox, self.per_test_timeout_s, self.suite_timeout_s)
            info["tests_passed"] = len(run.passed() & set(self.expected_tests))
            return format_report(run, self.expected_tests, self.max_output_chars)
        if name == "diff":
            return self._diff() or "No changes."
        if name == "ls":
            return self._ls(normalize_path(arg))
        if name == "grep":
            return self._grep(arg.strip())
        if not arg:
            raise ValueError(f"{name} needs a PATH, e.g. `{name} {source_files(self.start_files)[-1]}`.")
        path = normalize_path(arg)
        text = self._read(path)
        if name == "cat":
            if not text:
                return f"{path} is empty."
            body = text[:-1] if text.endswith("\n") else text
            numbered = "\n".join(f"{i:>4}  {line}".rstrip() for i, line in enumerate(body.split("\n"), 1))
            return clip(numbered, self.max_output_chars, path)
        return self._edit(path, text, command.body, info)

    def _read(self, path: str) -> str:
        try:
            return read_workspace_file(self.workspace, path)
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file. `ls` lists the files.") from None
        except IsADirectoryError:
            raise ValueError(f"{path} is a directory; `ls {path}` lists it.") from None
        except OSError:
            raise ValueError(f"{path} cannot be read (a symlink or not a regular file).") from None

    def _edit(self, path: str, text: str, body: str, info: dict[str, Any]) -> str:
        new_text, summary = apply_edit(text, parse_edit_blocks(body), path)
        if new_text == text:
            raise EditError("edit: the replacement is identical to the search text; nothing changed.")
        try:
            write_workspace_file(self.workspace, path, new_text)
        except OSError as e:
            raise ValueError(f"edit: cannot write {path}: {e.strerror}.") from None
        info["edited"] = path
        current = {p: t for p, t in read_files(self.workspace, sorted(self.start_files)).items() if t is not None}
        problems = lint({p: t for p, t in current.items() if p.endswith(".py")})
        run = run_tests(self.sandbox, self.per_test_timeout_s, self.suite_timeout_s)
        info["tests_passed"] = len(run.passed() & set(self.expected_tests))
        sections = [f"Edited {path}: " + "; ".join(summary) + ".",
                    "lint:\n" + ("\n".join(problems) if problems else "ok"),
                    format_report(run, self.expected_tests, self.max_output_chars),
                    "diff:\n" + clip(self._diff() or "No changes.", self.max_output_chars, "diff")]
        return "\n\n".join(sections)

    def _diff(self) -> str:
        return unified_diff(self.start_files, read_files(self.workspace, sorted(self.start_files)))

    def _ls(self, rel: str) -> str:
        try:
            paths = list_workspace(self.workspace, rel)
        except FileNotFoundError:
            raise ValueError(f"{rel}: no such file or directory.") from None
        except OSError:
            st = lstat_in_workspace(self.workspace, rel)
            if st is not None and stat.S_ISREG(st.st_mode):
                return rel
            raise ValueError(f"{rel} is not a directory (or is a symlink).") from None
        return clip("\n".join(paths), self.max_output_chars, "listing") if paths else "(no files)"

    def _grep(self, pattern: str) -> str:
        if not pattern:
            raise ValueError("grep needs a PATTERN (a Python regular expression).")
        pattern = pattern[1:-1] if len(pattern) > 1 and pattern[0] == pattern[-1] and pattern[0] in "'\"" else pattern
        try:
            regex = re.compile(pattern)
        except re.error as e:
            raise ValueError(f"grep: bad regular expression {pattern!r}: {e}.") from None
        matches = []
        for path, text in read_files(self.workspace, [p for p in list_workspace(self.workspace)
                                                      if not p.endswith("@")]).items():
            for n, line in enumerate((text or "").splitlines(), 1):
                if regex.search(line):
                    matches.append(f"{path}:{n}: {line}")
        shown = "\n".join(matches[:MAX_GREP_MATCHES])
        more = f"\n[{len(matches) - MAX_GREP_MATCHES} more matches not shown]" if len(matches) > MAX_GREP_MATCHES else ""
        return clip(shown, self.max_output_chars, "matches") + more if matches else f"No line matches {pattern!r}."

    @property
    def expected_tests(self) -> list[str]:
        return list(self.task.data["tests"]) if self.task else []

    # -- outcome
    def outcome(self) -> float:
        """Grade once per episode (later calls return the same): the original tests against the episode's source
        files, in a fresh workspace and sandbox (see the module docstring)."""
        if self.sandbox is None or self.task is None or self.workspace is None:
            raise RuntimeError("no episode: call reset(task) first")
        self.done = True
        if self.reward is not None:
            return self.reward
        original = swe_repos.REPOS[self.task.data["repo"]]
        edited = {p: t for p, t in read_files(self.workspace, source_files(original)).items() if t is not None}
        problems = integrity_problems(original, edited)
        with fresh_workspace(f"swe-grade-{self.task.id}-") as ws:
            write_files(ws, {**{p: t for p, t in original.items() if p.startswith(TESTS_DIR)}, **edited})
            run = run_tests(self._new_sandbox(ws), self.per_test_timeout_s, self.suite_timeout_s)
        failing = self.task.data["failing"]
        self.checks = [CheckResult("integrity: no new imports or introspection in the source files", not problems,
                                   "; ".join(problems))]
        for t in self.expected_tests:
            verdict = run.verdicts.get(t, "not run")
            self.checks.append(CheckResult(f"{t}{' (failing at the start)' if t in failing else ''}", verdict == "ok",
                                           verdict))
        self.reward = swe_reward(run.passed(), self.expected_tests, failing, problems)
        return self.reward



# ----------------------------------------------------------------------------- tasks
def make_task(repo: str, index: int, m: Mutation, tests: list[str], failing: list[str]) -> EnvTask:
    task_id = f"swe-{repo}-{index:02d}"
    names = ", ".join(failing)
    instruction = (f"The `{repo}` repository ({swe_repos.DESCRIPTIONS[repo]}) has a bug in its source code: "
                   f"{len(failing)} of its {len(tests)} tests fail ({names}). Find the bug and fix it. Do not change "
                   f"the tests: your fix is graded by running the original tests against your source files.")
    data = {"category": m.kind, "repo": repo, "mutation": m.to_dict(), "tests": list(tests), "failing": list(failing)}
    return EnvTask(task_id, SETTING, split_of(task_id), instruction, data)


def list_swe_tasks() -> list[EnvTask]:
    """Every task of the generated table, by repository and site index; RuntimeError when the table is stale."""
    tasks = []
    for repo in swe_repos.REPOS:
        entry = swe_repos.TABLE.get(repo)
        if entry is None or entry["digest"] != repo_digest(repo):
            raise RuntimeError(f"swe: the task table of repository {repo!r} is stale; regenerate it with "
                               f"`PYTHONPATH=swe-rl python -c \"from swe_table import write_table; write_table()\"`")
        sites = repo_mutations(repo)
        for index, failing in entry["tasks"].items():
            tasks.append(make_task(repo, index, sites[index], entry["tests"], [entry["tests"][i] for i in failing]))
    return tasks


def revert_edit(task: EnvTask) -> str:
    """The edit command undoing the task's mutation: the mutated line(s), with lines above added until the SEARCH
    text is unique in the file, replaced by the original ones."""
    m = Mutation(**task.data["mutation"])
    before, after = swe_repos.REPOS[task.data["repo"]][m.path], mutated_files(task.data["repo"], m)[m.path]
    first = after.count("\n", 0, m.start)
    last_new, last_old = after.count("\n", 0, m.start + len(m.new)), before.count("\n", 0, m.end)
    new_lines, old_lines = after.split("\n"), before.split("\n")
    while True:
        search = new_lines[first:last_new + 1]
        if sum(new_lines[i:i + len(search)] == search for i in range(len(new_lines))) == 1:
            break
        first -= 1
    replace = "\n".join(old_lines[first:last_old + 1])
    return (f"The bug is here; this restores the intended code.\n```\nedit {m.path}\n<<<<<<< SEARCH\n"
            f"{chr(10).join(search)}\n=======\n{replace}\n>>>>>>> REPLACE\n```\n")


def demonstrate(task: EnvTask, env: Any = None) -> Iterator[str]:
    """The scripted solution (``register_setting``'s ``demonstrate_fn``): read the mutated file, undo the
    mutation, run the tests, submit."""
    path = task.data["mutation"]["path"]
    yield f"Let me read the code.\n```\ncat {path}\n```\n"
    yield revert_edit(task)
    yield "Check the tests.\n```\ntest\n```\n"
    yield "The tests pass.\n```\nsubmit\n```\n"


register_setting(SETTING, list_swe_tasks, SweEnv, demonstrate)
