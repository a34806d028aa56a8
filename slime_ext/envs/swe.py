"""The software-engineering setting: the agent fixes a bug that an AST mutation injected into a small repository.

Tasks. A task is (repository, mutation site): one of the small packages of ``swe_repos.REPOS`` with one
mutation applied to a module outside ``tests/``. Mutation sites (``find_mutations``) are enumerated with
``ast`` and applied by editing the source text at the exact span of one token or expression, so the rest of
the file keeps its formatting and the diff is one line. Kinds:

- ``compare``: ``<`` <-> ``<=``, ``>`` <-> ``>=``, ``==`` <-> ``!=`` (each operator of a comparison chain);
- ``arith``: ``+`` <-> ``-``, ``*`` <-> ``//``, ``/`` -> ``*``, also as augmented assignments (``+=`` ...);
- ``constant``: an integer literal n -> n + 1 and n -> n - 1 (not bools, not elements of tuple / list / set /
  dict literals, which are data rather than logic);
- ``boolop``: ``and`` <-> ``or`` (each operator of a chain);
- ``negate_if``: ``if COND:`` -> ``if not (COND):`` (also ``elif``);
- ``return_none``: ``return NAME`` -> ``return None``.

Nodes inside f-strings are skipped (their positions are unreliable before Python 3.12). A site qualifies as a
task when the mutated module still parses, every test of the suite is still discovered and run (the package
imports), no test runs past the per-test time limit, and at least one test fails. Which sites qualify is
decided once, by running each mutant's suite in the sandbox, and stored as data in ``swe_repos.TABLE``
(``write_table`` regenerates it), so listing tasks needs no test run. The table holds a digest of each
repository's files and mutation sites; ``list_swe_tasks`` raises when it is stale. Task ids are
``swe-<repo>-<site index>``; a task is held out iff sha256(id) is divisible by 5 (``terminal_tasks.split_of``).

Episode. ``reset(task)`` writes the mutated repository into a fresh workspace and creates one ``Sandbox`` for
the episode. The first message holds the task (which tests fail), the repository's file list and the commands.

Action format: one command per message, in a fenced code block (the first block whose first line starts with
a command word is used):

- ``cat PATH``: the file with line numbers; ``ls [PATH]``: files under PATH (default: the whole repository);
  ``grep PATTERN``: lines matching a Python regular expression in every file, as ``path:line: text``;
- ``edit PATH`` followed by one or more ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE`` blocks: each
  SEARCH text must match whole lines of the file exactly once (after the earlier blocks were applied), or
  nothing is written and the observation says why. Only existing files can be edited;
- ``test``: runs the suite (``python3 -m unittest`` discovery under ``tests/``) in the sandbox: a verdict per
  test (ok, FAIL, ERROR, TIMEOUT, skipped, or "not run" for a test of the original suite that did not run), a
  summary, and the tracebacks of the first failures. Each test, and the import of the test modules, gets
  ``per_test_timeout_s`` (2 s); the whole run ``suite_timeout_s`` (20 s);
- ``diff``: unified diff of the repository against its state at the start of the episode;
- ``submit``: ends the episode.

A message without a usable command (or with a malformed one) gets an error observation and counts as a turn;
the episode ends after ``max_turns`` (12) steps. After an edit the observation is the next state: lint output
(syntax errors, as ``py_compile`` reports them, and undefined names), the test verdicts and the diff.
``next_state_text`` is the observation.

Outcome. ``outcome()`` builds a FRESH workspace from the ORIGINAL repository's ``tests/`` and the episode's
versions of the original non-test files (files the agent deleted stay deleted; files it added are ignored), and
runs the suite there in a fresh sandbox. So editing or deleting tests cannot help. With T the repository's
tests and F the tests that failed at the start (``data["failing"]``):

- +1.0 if every test in T passes;
- -1.0 if any test in T - F fails (a regression), or if the integrity check below fails;
- otherwise ``fraction_to_reward(passed in F, |F|)``: the share of the initially failing tests that now pass,
  mapped to [-1, 1) (never +1, since some test still fails). Doing nothing earns -1.

Integrity (``integrity_problems``), a static guard against code that tampers with the test run from inside
the process: the edited source files may not import a module the original source files do not import (the
repository's own package and relative imports excepted), nor use, where the originals do not, a name in
``FORBIDDEN_NAMES`` (``getattr``, ``exec``, ``open``, ...) or ``__dunder__``, or an attribute that is
``_private`` (dunders included) or in ``FORBIDDEN_ATTRS`` (those builtins, frame / generator / traceback
internals such as ``f_back``, and module names that lead to the interpreter's state: ``sys``, ``os``,
``builtins``, ``modules``, ``unittest``, ...; so ``re.enum.sys.modules`` is refused too). A one-token bug fix
needs none of them. Each run's verdicts are printed with a random nonce that the runner reads from stdin before it
imports any test, so a module cannot print fake verdicts without reaching into the runner.

Files are read and written by the parent without following symlinks (code run by ``test`` could plant one):
reads use ``terminal.read_workspace_file``; writes and listings walk the path one component at a time with
``O_NOFOLLOW``.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import dataclasses
import difflib
import errno
import functools
import hashlib
import json
import os
import posixpath
import re
import secrets
import stat
import symtable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from slime_ext.envs import swe_repos
from slime_ext.envs.base import EnvTask, StepResult, fraction_to_reward, register_setting
from slime_ext.envs.sandbox import Sandbox, SandboxLimits, fresh_workspace
from slime_ext.envs.terminal import CheckResult, clip, lstat_in_workspace, read_workspace_file
from slime_ext.envs.terminal_tasks import split_of

SETTING = "swe"
TESTS_DIR = "tests/"
MUTATION_KINDS = ("compare", "arith", "constant", "boolop", "negate_if", "return_none")
COMMANDS = ("cat", "ls", "grep", "edit", "test", "diff", "submit")
HIDDEN_DIRS = {"__pycache__", ".tmp", ".git"}
# the integrity check: builtins that reach objects by name or run code, and attributes that lead from an object
# to frames or to modules with the interpreter's state (besides every `_private` and `__dunder__` attribute)
FORBIDDEN_NAMES = frozenset({"__import__", "breakpoint", "compile", "delattr", "eval", "exec", "exit", "getattr",
                             "globals", "locals", "open", "quit", "setattr", "vars"})
FORBIDDEN_ATTRS = FORBIDDEN_NAMES | {
    "f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_trace", "gi_code", "gi_frame", "gi_yieldfrom",
    "cr_await", "cr_code", "cr_frame", "ag_await", "ag_code", "ag_frame", "tb_frame", "tb_next",
    "builtins", "ctypes", "gc", "importlib", "inspect", "modules", "os", "posix", "runpy", "signal", "subprocess",
    "sys", "threading", "unittest"}
MAX_FAILURE_DETAILS = 3
MAX_GREP_MATCHES = 60
FORMAT_HELP = ("No command found in your message. Reply with exactly one command in a fenced code block, e.g.\n"
               "```\ncat PATH\n```\nCommands: cat PATH, ls [PATH], grep PATTERN, edit PATH (with SEARCH/REPLACE "
               "blocks), test, diff, submit.")
EDIT_FORMAT = ("edit PATH\n<<<<<<< SEARCH\nexact lines to find (whole lines, once in the file)\n=======\n"
               "the lines to put in their place\n>>>>>>> REPLACE")
_FENCE_OPEN = re.compile(r"^[ \t]{0,3}```[ \t]*([\w+.-]*)[ \t]*$")
_FENCE_CLOSE = re.compile(r"^[ \t]{0,3}```[ \t]*$")
_SEARCH, _DIVIDER, _REPLACE = (re.compile(p) for p in (r"^<{5,9} ?SEARCH\s*$", r"^={5,9}\s*$",
                                                        r"^>{5,9} ?REPLACE\s*$"))
_OP_TOKENS = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
              ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.And: "and",
              ast.Or: "or"}
SWAPS = {"<": "<=", "<=": "<", ">": ">=", ">=": ">", "==": "!=", "!=": "==", "+": "-", "-": "+", "*": "//",
         "//": "*", "/": "*", "and": "or", "or": "and"}


# ----------------------------------------------------------------------------- mutations (pure)
@dataclasses.dataclass(frozen=True)
class Mutation:
    """Replace ``source[start:end]`` (which reads `old`; character offsets, `line` 1-based) of file `path` by `new`."""

    path: str
    kind: str
    start: int
    end: int
    line: int
    old: str
    new: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.old!r} -> {self.new!r}"

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


def apply_mutation(source: str, m: Mutation) -> str:
    """`source` with `m` applied; ValueError when the span does not read `m.old` (the source changed)."""
    if source[m.start:m.end] != m.old:
        raise ValueError(f"{m.path}: expected {m.old!r} at offset {m.start}, found {source[m.start:m.end]!r}")
    return source[:m.start] + m.new + source[m.end:]


def find_mutations(path: str, source: str) -> list[Mutation]:
    """Every mutation site of one module, sorted by position (see the module docstring for the kinds)."""
    tree = ast.parse(source)
    lines = re.findall(r"[^\n]*\n|[^\n]+$", source)  # as ast counts lines (splitlines also splits at \f ...)
    line_starts = [0]
    for line in lines:
        line_starts.append(line_starts[-1] + len(line))

    def offset(lineno: int, byte_col: int) -> int:  # ast columns count UTF-8 bytes
        return line_starts[lineno - 1] + len(lines[lineno - 1].encode()[:byte_col].decode(errors="replace"))

    def start(node: ast.AST) -> int:
        return offset(node.lineno, node.col_offset)

    def end(node: ast.AST) -> int:
        return offset(node.end_lineno, node.end_col_offset)

    skip: set[int] = set()  # ids of nodes inside f-strings or directly inside collection literals
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
        elif isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
            skip.update(id(n) for n in ast.iter_child_nodes(node))

    sites: list[Mutation] = []

    def site(kind: str, lo: int, hi: int, new: str, lineno: int) -> None:
        sites.append(Mutation(path, kind, lo, hi, lineno, source[lo:hi], new))

    def operator(kind: str, left: ast.AST, right: ast.AST, token: str, suffix: str = "") -> None:
        """The operator `token` between two nodes: the gap may hold only it, whitespace and parentheses."""
        lo, hi = end(left), start(right)
        m = re.fullmatch(r"([\s()\\]*)" + re.escape(token + suffix) + r"[\s()\\]*", source[lo:hi])
        if m:
            a = lo + len(m.group(1))
            site(kind, a, a + len(token + suffix), SWAPS[token] + suffix, source.count("\n", 0, a) + 1)

    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare):
            for left, op, right in zip([node.left, *node.comparators], node.ops, node.comparators):
                if type(op) in _OP_TOKENS:
                    operator("compare", left, right, _OP_TOKENS[type(op)])
        elif isinstance(node, ast.BinOp) and type(node.op) in _OP_TOKENS:
            operator("arith", node.left, node.right, _OP_TOKENS[type(node.op)])
        elif isinstance(node, ast.AugAssign) and type(node.op) in _OP_TOKENS:
            operator("arith", node.target, node.value, _OP_TOKENS[type(node.op)], "=")
        elif isinstance(node, ast.BoolOp):
            for left, right in zip(node.values, node.values[1:]):
                operator("boolop", left, right, _OP_TOKENS[type(node.op)])
        elif isinstance(node, ast.Constant) and type(node.value) is int:
            for new in (node.value + 1, node.value - 1):
                site("constant", start(node), end(node), str(new), node.lineno)
        elif isinstance(node, ast.If):
            lo, hi = start(node.test), end(node.test)
            site("negate_if", lo, hi, f"not ({source[lo:hi]})", node.test.lineno)
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name):
            site("return_none", start(node.value), end(node.value), "None", node.lineno)
    return sorted(sites, key=lambda m: (m.start, m.end, m.kind, m.new))


def source_files(files: dict[str, str]) -> list[str]:
    """The Python files of a repository outside tests/, sorted."""
    return sorted(p for p in files if p.endswith(".py") and not p.startswith(TESTS_DIR))


@functools.cache
def repo_mutations(repo: str) -> tuple[Mutation, ...]:
    """Every mutation site of a repository, in a fixed order: by file path, then position. Indices are task ids."""
    files = swe_repos.REPOS[repo]
    return tuple(m for path in source_files(files) for m in find_mutations(path, files[path]))


def mutated_files(repo: str, m: Mutation) -> dict[str, str]:
    files = dict(swe_repos.REPOS[repo])
    files[m.path] = apply_mutation(files[m.path], m)
    return files


def repo_digest(repo: str) -> str:
    """Digest of a repository's files and mutation sites: the generated table is valid only for this value."""
    payload = json.dumps([sorted(swe_repos.REPOS[repo].items()), [m.to_dict() for m in repo_mutations(repo)]])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# ----------------------------------------------------------------------------- running the tests
# Runs inside the sandbox as `python3 -I -B -c RUNNER` in the repository root. Stdin: "NONCE PER_TEST_SECONDS".
# Prints one line "NONCE {json}" per test (id, verdict, detail) and a final "NONCE {"done": true}".
RUNNER = r'''
import json, os, signal, sys, unittest
nonce, limit = sys.stdin.readline().split()
limit = float(limit)
out = sys.stdout
sys.path.insert(0, os.getcwd())


def emit(**record):
    out.write(nonce + " " + json.dumps(record) + "\n")
    out.flush()


class TestTimeout(Exception):
    pass


def on_alarm(signum, frame):
    raise TestTimeout("the test ran longer than %g s" % limit)


class Result(unittest.TestResult):
    current = None

    def startTest(self, test):
        super().startTest(test)
        self.current, self.verdict, self.detail = test, "ok", ""
        signal.setitimer(signal.ITIMER_REAL, limit)

    def stopTest(self, test):
        signal.setitimer(signal.ITIMER_REAL, 0)
        super().stopTest(test)
        emit(id=test.id(), verdict=self.verdict, detail=self.detail[:2000])
        self.current = None

    def bad(self, verdict, test, err, owner):
        if err[0] is TestTimeout:
            verdict = "TIMEOUT"
        text = self._exc_info_to_string(err, test)
        if owner is not self.current:  # e.g. a failing setUpClass: no startTest for it
            emit(id=owner.id(), verdict=verdict, detail=text[:2000])
        elif self.verdict == "ok":
            self.verdict, self.detail = verdict, text

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.bad("FAIL", test, err, test)

    def addError(self, test, err):
        super().addError(test, err)
        self.bad("ERROR", test, err, test)

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            self.bad("FAIL" if issubclass(err[0], test.failureException) else "ERROR", subtest, err, test)

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.verdict, self.detail = "skipped", reason

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.verdict, self.detail = "FAIL", "unexpected success"


signal.signal(signal.SIGALRM, on_alarm)
signal.setitimer(signal.ITIMER_REAL, limit)  # an import that hangs becomes a failed test module
suite = unittest.defaultTestLoader.discover("tests", top_level_dir=os.getcwd())
signal.setitimer(signal.ITIMER_REAL, 0)
result = Result()
result.buffer = True
suite.run(result)
emit(done=True)
'''


@dataclasses.dataclass
class TestRun:
    """One run of a suite. verdicts: test id -> ok / FAIL / ERROR / TIMEOUT / skipped; details: tracebacks;
    complete: the runner reached its end; note: why not (timeout, crash: the end of stderr)."""

    verdicts: dict[str, str]
    details: dict[str, str]
    complete: bool
    note: str = ""

    def passed(self) -> set[str]:
        return {t for t, v in self.verdicts.items() if v == "ok"}


def parse_runner_output(stdout: str, nonce: str) -> tuple[dict[str, str], dict[str, str], bool]:
    """(verdicts, details, complete) from the runner's lines that carry `nonce`; a test reported twice keeps its
    worst verdict."""
    verdicts: dict[str, str] = {}
    details: dict[str, str] = {}
    complete = False
    for line in stdout.splitlines():
        if not line.startswith(nonce + " "):
            continue
        try:
            record = json.loads(line[len(nonce) + 1:])
        except ValueError:
            continue
        if record.get("done") is True:
            complete = True
        elif isinstance(record.get("id"), str) and record.get("verdict") in ("ok", "FAIL", "ERROR", "TIMEOUT",
                                                                              "skipped"):
            if verdicts.get(record["id"], "ok") == "ok":
                verdicts[record["id"]] = record["verdict"]
                details[record["id"]] = str(record.get("detail", ""))
    return verdicts, details, complete


def run_tests(box: Sandbox, per_test_s: float = 2.0, timeout_s: float = 20.0) -> TestRun:
    """Run the suite under `tests/` of the sandbox's workspace."""
    nonce = secrets.token_hex(16)
    res = box.run(["python3", "-I", "-B", "-c", RUNNER], stdin=f"{nonce} {per_test_s}\n", timeout_s=timeout_s)
    verdicts, details, complete = parse_runner_output(res.stdout, nonce)
    note = ""
    if not complete:
        tail = "\n".join(res.stderr.strip().splitlines()[-6:])
        note = (f"the test run was stopped after {timeout_s:g} s" if res.timed_out
                else f"the test run did not finish (exit code {res.exit_code})") + (f":\n{tail}" if tail else "")
    return TestRun(verdicts, details, complete, note)


def format_report(run: TestRun, expected: list[str], max_chars: int = 6000) -> str:
    """Per-test verdicts (the expected tests first, in order; tests that never ran are "not run"), a summary,
    and the tracebacks of the first few failures."""
    ids = [*expected, *sorted(set(run.verdicts) - set(expected))]
    verdicts = {t: run.verdicts.get(t, "not run") for t in ids}
    passed = sum(v == "ok" for v in verdicts.values())
    lines = [f"tests: {passed} of {len(ids)} passed" + ("" if passed == len(ids) else f", {len(ids) - passed} not")]
    lines += [f"{v:<8} {t}" for t, v in verdicts.items()]
    if run.note:
        lines.append(f"note: {run.note}")
    failed = [t for t, v in verdicts.items() if v not in ("ok", "not run")]
    for t in failed[:MAX_FAILURE_DETAILS]:
        lines += ["", f"---- {verdicts[t]}: {t}", run.details.get(t, "").rstrip()]
    if len(failed) > MAX_FAILURE_DETAILS:
        lines.append(f"\n[{len(failed) - MAX_FAILURE_DETAILS} more failures not shown]")
    return clip("\n".join(lines), max_chars, "test report")


# ----------------------------------------------------------------------------- lint and integrity (pure)
def undefined_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of global names that are read but never bound in the module and are not builtins."""
    top = symtable.symtable(source, "<module>", "exec")
    defined = set(dir(builtins)) | {"__file__", "__builtins__", "__path__"}
    tables, used = [top], set()
    while tables:
        table = tables.pop()
        tables += table.get_children()
        for sym in table.get_symbols():
            if (table is top or sym.is_declared_global()) and (sym.is_assigned() or sym.is_imported()):
                defined.add(sym.get_name())
            if sym.is_referenced() and sym.is_global():
                used.add(sym.get_name())
    missing = used - defined
    lines = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Name) and node.id in missing:
            lines[node.id] = min(lines.get(node.id, node.lineno), node.lineno)
    return sorted((lines.get(name, 0), name) for name in missing)


def lint(files: dict[str, str]) -> list[str]:
    """Syntax errors (compiling without running, as py_compile does) and undefined names of the Python files."""
    problems = []
    for path, text in sorted(files.items()):
        if not path.endswith(".py"):
            continue
        try:
            compile(text, path, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            where = f"{path}:{e.lineno}" if isinstance(e, SyntaxError) else path
            problems.append(f"{where}: {type(e).__name__}: {getattr(e, 'msg', e)}")
            continue
        problems += [f"{path}:{line}: undefined name {name!r}" for line, name in undefined_names(text)]
    return problems


def _features(source: str) -> tuple[set[str], set[str]]:
    """(top-level modules imported absolutely, suspicious names and ".attributes" used) of a module."""
    modules, names = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules.add(node.module.split(".")[0])
        elif isinstance(node, ast.Name) and (node.id in FORBIDDEN_NAMES or re.fullmatch(r"__\w+__", node.id)):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and (node.attr.startswith("_") or node.attr in FORBIDDEN_ATTRS):
            names.add("." + node.attr)
    return modules, names


def integrity_problems(original: dict[str, str], edited: dict[str, str]) -> list[str]:
    """What the edited source files (outside tests/) use that the original ones do not (see the module
    docstring). Files that do not parse are skipped: their tests fail anyway."""
    allowed_modules = {p.split("/")[0] for p in source_files(original)}
    allowed_names: set[str] = set()
    for path in source_files(original):
        modules, names = _features(original[path])
        allowed_modules |= modules
        allowed_names |= names
    problems = []
    for path in source_files(edited):  # the tests come from the original repository anyway
        try:
            modules, names = _features(edited[path])
        except (SyntaxError, ValueError):
            continue
        problems += [f"{path} imports {m!r}, which the original code does not" for m in sorted(modules - allowed_modules)]
        problems += [f"{path} uses {n!r}, which the original code does not" for n in sorted(names - allowed_names)]
    return problems


def swe_reward(passed: set[str], tests: list[str], failing: list[str], problems: list[str] = ()) -> float:
    """The outcome rule of the module docstring: +1 all pass; -1 integrity problem or regression; else the share
    of the initially failing tests that pass, through fraction_to_reward."""
    if problems:
        return -1.0
    if all(t in passed for t in tests):
        return 1.0
    if any(t not in passed for t in tests if t not in failing):
        return -1.0
    return fraction_to_reward(sum(t in passed for t in failing), len(failing))


# ----------------------------------------------------------------------------- parsing actions (pure)
@dataclasses.dataclass(frozen=True)
class Command:
    """name: one of COMMANDS; arg: the rest of the command's line; body: the block's later lines (edit's blocks)."""

    name: str
    arg: str
    body: str


def parse_command(text: str) -> tuple[Command | None, str]:
    """(the first fenced block whose first line starts with a command word, a note or error). With no command the
    second item is the error observation."""
    lines = text.splitlines()
    blocks: list[list[str]] = []
    i = 0
    while i < len(lines):
        if not _FENCE_OPEN.match(lines[i]):
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not _FENCE_CLOSE.match(lines[j]):
            j += 1
        blocks.append(lines[i + 1:j])
        i = j + 1
    for n, block in enumerate(blocks):
        body = list(block)
        while body and not body[0].strip():
            body.pop(0)
        words = body[0].split(None, 1) if body else []
        if words and words[0] in COMMANDS:
            rest = "\n".join(body[1:])
            note = ""
            if len(blocks) > 1:
                note = f"note: your message had {len(blocks)} code blocks; only block {n + 1} was used."
            if words[0] != "edit" and rest.strip():
                note = (note + "\n" if note else "") + f"note: only the first line of the block was used ({words[0]})."
            return Command(words[0], words[1].strip() if len(words) > 1 else "", rest), note
    if blocks:
        return None, (f"No known command in your code block. The first line of the block must be one of: "
                      f"{', '.join(COMMANDS)}.\n{FORMAT_HELP}")
    return None, FORMAT_HELP


class EditError(ValueError):
    """An edit that cannot be applied; the message is the observation."""


def parse_edit_blocks(body: str) -> list[tuple[str, str]]:
    """The (search, replace) pairs of an edit's body; EditError for a malformed body."""
    pairs: list[tuple[str, str]] = []
    state, search, replace = "outside", [], []
    for line in body.split("\n"):
        if state == "outside":
            if _SEARCH.match(line):
                state, search, replace = "search", [], []
            elif line.strip():
                raise EditError(f"edit: unexpected line {line!r} outside a SEARCH/REPLACE block. Format:\n{EDIT_FORMAT}")
        elif state == "search":
            if _DIVIDER.match(line):
                state = "replace"
            else:
                search.append(line)
        elif _REPLACE.match(line):
            if not search:
                raise EditError("edit: a SEARCH part is empty; it must hold the exact lines to replace.")
            pairs.append(("\n".join(search), "\n".join(replace)))
            state = "outside"
        else:
            replace.append(line)
    if state != "outside":
        missing = "=======" if state == "search" else ">>>>>>> REPLACE"
        raise EditError(f"edit: a block is not closed (no {missing!r} line). Format:\n{EDIT_FORMAT}")
    if not pairs:
        raise EditError(f"edit: no SEARCH/REPLACE block found. Format:\n{EDIT_FORMAT}")
    return pairs


def apply_edit(text: str, pairs: list[tuple[str, str]], path: str = "the file") -> tuple[str, list[str]]:
    """`text` with each (search, replace) applied in turn to whole lines; (new text, one summary per block).
    EditError when a SEARCH text does not match exactly once."""
    lines = text.split("\n")
    summary = []
    for n, (search, replace) in enumerate(pairs, 1):
        want = search.split("\n")
        hits = [i for i in range(len(lines) - len(want) + 1) if lines[i:i + len(want)] == want]
        if len(hits) != 1:
            if hits:
                raise EditError(f"edit: the SEARCH text of block {n} occurs {len(hits)} times in {path} (lines "
                                f"{', '.join(str(h + 1) for h in hits)}); include more lines to make it unique. "
                                f"Nothing was changed.")
            loose = [i for i in range(len(lines) - len(want) + 1)
                     if [x.strip() for x in lines[i:i + len(want)]] == [x.strip() for x in want]]
            hint = (f" Ignoring indentation it matches at line {loose[0] + 1}: copy the whitespace exactly."
                    if loose else f" Use `cat {path}` to see the current text.")
            raise EditError(f"edit: the SEARCH text of block {n} was not found in {path} (it must match whole "
                            f"lines exactly).{hint} Nothing was changed.")
        i = hits[0]
        new = replace.split("\n") if replace else []
        lines[i:i + len(want)] = new
        summary.append(f"block {n}: lines {i + 1}-{i + len(want)} replaced by {len(new)} line(s)")
    return "\n".join(lines), summary


def unified_diff(before: dict[str, str], after: dict[str, str | None]) -> str:
    """Unified diff of the files of `before` against `after` (None: the file is gone); "" when nothing changed."""
    chunks = []
    for path in sorted(before):
        new = after.get(path)
        chunks += difflib.unified_diff(before[path].splitlines(keepends=True),
                                       (new or "").splitlines(keepends=True),
                                       f"a/{path}", f"b/{path}" if new is not None else "/dev/null")
    return "".join(c if c.endswith("\n") else c + "\n\\ No newline at end of file\n" for c in chunks)


def normalize_path(arg: str) -> str:
    """A workspace-relative path from the agent's PATH ("" for the root); ValueError if it leaves the workspace."""
    arg = arg.strip().strip("'\"")
    for prefix in ("/workspace/", "./"):
        if arg.startswith(prefix):
            arg = arg[len(prefix):]
    if arg in ("", ".", "/workspace"):
        return ""
    path = posixpath.normpath(arg)
    if path.startswith("/") or path == ".." or path.startswith("../"):
        raise ValueError(f"{arg!r} is outside the repository; paths are relative to its root")
    return path


# ----------------------------------------------------------------------------- the workspace, without symlinks
def _open_dir(root: Path, rel: str) -> int:
    """An fd of directory `rel` under `root` (""-> root), opened one component at a time with O_NOFOLLOW."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in [p for p in rel.split("/") if p]:
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_workspace_file(root: Path, rel: str, text: str) -> None:
    """Overwrite the existing regular file `rel` under `root`; OSError for a symlink (anywhere on the path), a
    missing file or anything else that is not a regular file."""
    head, _, name = rel.rpartition("/")
    dfd = _open_dir(root, head)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    finally:
        os.close(dfd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", rel)
        os.ftruncate(fd, 0)
        with open(fd, "wb", closefd=False) as f:
            f.write(text.encode())
    finally:
        os.close(fd)


def list_workspace(root: Path, rel: str = "") -> list[str]:
    """Paths (relative to `root`) of the files under directory `rel`, sorted; symlinks end with '@' and are not
    followed; __pycache__, .tmp and .git are skipped."""
    fd = _open_dir(root, rel)
    found = []
    try:
        for top, dirs, files, top_fd in os.fwalk(".", dir_fd=fd, follow_symlinks=False):
            dirs[:] = [d for d in dirs if d not in HIDDEN_DIRS]
            for name in dirs + files:
                link = stat.S_ISLNK(os.stat(name, dir_fd=top_fd, follow_symlinks=False).st_mode)
                if link or name in files:
                    found.append(posixpath.normpath(posixpath.join(rel or ".", top, name)) + ("@" if link else ""))
    finally:
        os.close(fd)
    return sorted(found)


def read_files(root: Path, paths: list[str]) -> dict[str, str | None]:
    """The text of each path under `root` (None when it is missing or not a regular file)."""
    out: dict[str, str | None] = {}
    for rel in paths:
        try:
            out[rel] = read_workspace_file(root, rel)
        except OSError:
            out[rel] = None
    return out


def write_files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


# ----------------------------------------------------------------------------- the environment
class SweEnv:
    """One SWE episode at a time (see the module docstring).

    max_turns: steps before the episode ends; suite_timeout_s: wall clock of one test run (also its CPU seconds);
    per_test_timeout_s: wall clock of one test; max_output_chars: per observation section; mode: the sandbox mode.
    """

    setting = SETTING
    tools: list[dict] = []  # commands are fenced blocks in the message text, not tool calls
    observation_role = "user"

    def __init__(self, max_turns: int = 12, suite_timeout_s: float = 20.0, per_test_timeout_s: float = 2.0,
                 max_output_chars: int = 6000, mode: str | None = None) -> None:
        if max_turns < 1 or suite_timeout_s <= 0 or per_test_timeout_s <= 0 or max_output_chars < 1:
            raise ValueError("max_turns, the timeouts and max_output_chars must be positive")
        self.max_turns = max_turns
        self.suite_timeout_s = suite_timeout_s
        self.per_test_timeout_s = per_test_timeout_s
        self.max_output_chars = max_output_chars
        self.mode = mode
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
        self.sandbox = Sandbox(self.workspace, self.limits, mode=self.mode)
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
        if self.sandbox is None or self.task is None:
            raise RuntimeError("no episode: call reset(task) first")
        if self.done:
            raise RuntimeError("the episode is over: call reset(task) to start another")
        self.turns += 1
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
            run = run_tests(Sandbox(ws, self.limits, mode=self.mode), self.per_test_timeout_s, self.suite_timeout_s)
        failing = self.task.data["failing"]
        self.checks = [CheckResult("integrity: no new imports or introspection in the source files", not problems,
                                   "; ".join(problems))]
        for t in self.expected_tests:
            verdict = run.verdicts.get(t, "not run")
            self.checks.append(CheckResult(f"{t}{' (failing at the start)' if t in failing else ''}", verdict == "ok",
                                           verdict))
        self.reward = swe_reward(run.passed(), self.expected_tests, failing, problems)
        return self.reward

    def next_state_text(self, result: StepResult) -> str:
        return result.observation

    def close(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.workspace = self.sandbox = None
        self.task = None

    def __enter__(self) -> SweEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
                               f"`python -c \"from slime_ext.envs.swe import write_table; write_table()\"`")
        sites = repo_mutations(repo)
        for index, failing in entry["tasks"].items():
            tasks.append(make_task(repo, index, sites[index], entry["tests"], [entry["tests"][i] for i in failing]))
    return tasks


# ----------------------------------------------------------------------------- generating the task table
def run_files(files: dict[str, str], per_test_s: float = 1.0, timeout_s: float = 20.0,
              mode: str | None = None) -> TestRun:
    """Run the suite of a repository given as files, in a fresh workspace and sandbox."""
    with fresh_workspace("swe-gen-") as ws:
        write_files(ws, files)
        limits = SandboxLimits(cpu_s=max(1, int(timeout_s)), wall_s=timeout_s, output_bytes=256 * 1024)
        return run_tests(Sandbox(ws, limits, mode=mode), per_test_s, timeout_s)


def qualify(run: TestRun, tests: list[str]) -> list[str] | None:
    """The failing tests if a mutant's run makes it a task (complete, the same tests ran, none timed out, at least
    one failed), else None."""
    if not run.complete or sorted(run.verdicts) != sorted(tests) or "TIMEOUT" in run.verdicts.values():
        return None
    failing = [t for t in tests if run.verdicts[t] != "ok"]
    return failing or None


def generate_table(repos: list[str] | None = None, workers: int = 2, mode: str | None = None) -> dict:
    """Run every mutant of `repos` (default: all) and return the table that ``swe_repos.TABLE`` holds."""
    table = {}
    for repo in repos or list(swe_repos.REPOS):
        base = run_files(swe_repos.REPOS[repo], mode=mode)
        tests = sorted(base.verdicts)
        if not base.complete or base.passed() != set(tests) or not tests:
            raise RuntimeError(f"repository {repo} does not pass its own tests: {base.verdicts} {base.note}")
        sites = repo_mutations(repo)

        def check(index: int, repo: str = repo, tests: list[str] = tests, sites=sites) -> list[str] | None:
            files = mutated_files(repo, sites[index])
            try:
                ast.parse(files[sites[index].path])
            except SyntaxError:
                return None
            return qualify(run_files(files, mode=mode), tests)

        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(check, range(len(sites))))
        tasks = {i: [tests.index(t) for t in failing] for i, failing in enumerate(results) if failing}
        table[repo] = {"digest": repo_digest(repo), "tests": tests, "tasks": tasks}
    return table


TABLE_MARKER = "# ----------------------------------------------------------------------------- generated task table"


def format_table(table: dict) -> str:
    lines = [TABLE_MARKER, "# Written by slime_ext.envs.swe.write_table(); do not edit by hand. Per repository: the",
             "# digest of its files and mutation sites, its test ids, and mutation site index -> indices (in",
             "# `tests`) of the tests that fail with that mutation.", "TABLE: dict[str, dict] = {"]
    for repo, entry in table.items():
        lines += [f"    {json.dumps(repo)}: {{", f"        \"digest\": {json.dumps(entry['digest'])},", "        \"tests\": ["]
        lines += [f"            {json.dumps(t)},  # {i}" for i, t in enumerate(entry["tests"])]
        lines += ["        ],", "        \"tasks\": {"]
        lines += [f"            {i}: {failing!r}," for i, failing in entry["tasks"].items()]
        lines += ["        },", "    },"]
    return "\n".join([*lines, "}", ""])


def write_table(table: dict | None = None, path: Path | None = None) -> Path:
    """Regenerate (or write `table`) into swe_repos.py, replacing everything from TABLE_MARKER on."""
    path = path or Path(swe_repos.__file__)
    text = path.read_text()
    head = text.split(TABLE_MARKER)[0].rstrip("\n")
    path.write_text(head + "\n\n\n" + format_table(table if table is not None else generate_table()))
    return path


register_setting(SETTING, list_swe_tasks, SweEnv)
