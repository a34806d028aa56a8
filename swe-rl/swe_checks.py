"""Checking a SWE repository: the sandboxed unittest run and its verdicts, lint, the integrity check, the reward.

Test run. ``run_tests`` runs ``RUNNER`` (``python3 -I -B -c``, unittest discovery under ``tests/``) in a
``Sandbox`` and is the only function here with side effects. Each test, and the import of the test modules,
gets ``per_test_s``; the whole run ``timeout_s``. Verdicts are ok, FAIL, ERROR, TIMEOUT or skipped
(``format_report`` shows "not run" for an expected test that did not run). Each verdict line carries a random
nonce that the runner reads from stdin before it imports any test, and ``parse_runner_output`` reads only lines
with that nonce, so a module cannot print fake verdicts without reaching into the runner; a test reported twice
keeps its worst verdict. A run is ``complete`` only if the runner reached its final line.

Lint (``lint``): syntax errors, as ``py_compile`` reports them, and undefined global names.

Integrity (``integrity_problems``), a static guard against code that tampers with the test run from inside
the process: the edited source files may not import a module the original source files do not import (the
repository's own package and relative imports excepted), nor use, where the originals do not, a name in
``FORBIDDEN_NAMES`` (``getattr``, ``exec``, ``open``, ...) or ``__dunder__``, or an attribute that is
``_private`` (dunders included) or in ``FORBIDDEN_ATTRS`` (those builtins, frame / generator / traceback
internals such as ``f_back``, and module names that lead to the interpreter's state: ``sys``, ``os``,
``builtins``, ``modules``, ``unittest``, ...; so ``re.enum.sys.modules`` is refused too). A one-token bug fix
needs none of them.

Reward (``swe_reward``), with T the repository's tests and F the tests that failed at the start:

- +1.0 if every test in T passes;
- -1.0 if any test in T - F fails (a regression), or if the integrity check fails;
- otherwise ``fraction_to_reward(passed in F, |F|)``: the share of the initially failing tests that now pass,
  mapped to [-1, 1) (never +1, since some test still fails). Doing nothing earns -1.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import json
import re
import secrets
import symtable

from swe_mutations import source_files

from slime_ext.envs.base import fraction_to_reward
from slime_ext.envs.checks import clip
from slime_ext.envs.sandbox import Sandbox

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


# ----------------------------------------------------------------------------- lint, integrity, reward (pure)
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

