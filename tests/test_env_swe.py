"""The SWE setting (swe-rl/swe.py, swe_repos.py).

Mutations (each kind, exact-span editing), the pure parts (commands, edits, lint, integrity, the reward rule,
the runner's output), the task table (fresh, re-verified on a sample), and episodes: hand-written fixes earn
+1, submitting at once earns -1, editing or deleting tests, tampering with unittest and regressions earn -1,
malformed commands get error observations, turn limits, symlinks are never followed, and the ``env`` CLI.
Each sandboxed test run costs ~0.3 s.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from swe import SweEnv, revert_edit
from swe_checks import format_report, integrity_problems, lint, parse_runner_output, swe_reward
from swe_commands import (
    FORMAT_HELP,
    EditError,
    apply_edit,
    normalize_path,
    parse_command,
    parse_edit_blocks,
    unified_diff,
)
from swe_mutations import (
    MUTATION_KINDS,
    Mutation,
    apply_mutation,
    find_mutations,
    mutated_files,
    repo_digest,
    repo_mutations,
)
from swe_repos import REPOS, TABLE
from swe_table import qualify, run_files

from slime_ext.envs import Env, get_task, list_tasks, make_env, play_episode
from slime_ext.envs.checks import split_of

REPO = Path(__file__).resolve().parents[1]
TASKS = list_tasks("swe")


def block(*lines: str) -> str:
    body = "\n".join(lines)
    return f"Next step.\n```\n{body}\n```\n"


def edit(path: str, search: str, replace: str) -> str:
    return block(f"edit {path}", "<<<<<<< SEARCH", search, "=======", replace, ">>>>>>> REPLACE")


TEST, DIFF, SUBMIT = block("test"), block("diff"), block("submit")

# Hand-written fixes: the messages a model would send, in order.
SOLUTIONS: dict[str, list[str]] = {
    "swe-stackq-01": [  # compare, train
        block("cat stackq/structures.py"),
        edit("stackq/structures.py",
             '        if len(self._items) != 0:\n            raise EmptyError("pop from an empty stack")',
             '        if len(self._items) == 0:\n            raise EmptyError("pop from an empty stack")'),
        TEST, SUBMIT],
    "swe-stackq-15": [  # negate_if, train
        block("grep is_full"),
        edit("stackq/structures.py", "        if not (self.is_full()):", "        if self.is_full():"),
        SUBMIT],
    "swe-vecmat-10": [  # arith, heldout
        block("cat vecmat/linalg.py"),
        edit("vecmat/linalg.py", "    return [k // x for x in v]", "    return [k * x for x in v]"),
        TEST, DIFF, SUBMIT],
    "swe-spans-54": [  # return_none, heldout: `return None` also occurs just above, so the SEARCH needs context
        block("cat spans/intervals.py"),
        edit("spans/intervals.py",
             "        common = Interval(max(self.start, other.start), min(self.end, other.end))\n        return None",
             "        common = Interval(max(self.start, other.start), min(self.end, other.end))\n        return common"),
        SUBMIT],
    "swe-spans-39": [  # boolop, heldout
        block("cat spans/dates.py"),
        edit("spans/dates.py", "    if day < 1 and day > days_in_month(year, month):",
             "    if day < 1 or day > days_in_month(year, month):"),
        TEST, SUBMIT],
    "swe-textutil-09": [  # constant, heldout
        block("cat textutil/text.py"),
        edit("textutil/text.py", "    return chars == chars[::-2]", "    return chars == chars[::-1]"),
        SUBMIT],
}


def derived_sample() -> list[str]:
    """One task per mutation kind from the repositories the hand-written fixes do not touch, alternating splits."""
    picked = []
    for n, kind in enumerate(MUTATION_KINDS):
        split = ("train", "heldout")[n % 2]
        picked += [t.id for t in TASKS if t.data["category"] == kind and t.split == split
                   and t.data["repo"] in ("calc", "bank", "inventory", "roman")][:1]
    return picked


# ----------------------------------------------------------------------------- mutations
SAMPLE = """\
def f(a, b):  # a comment that must survive
    total = 0
    if a < b and b != 3:
        total += a * b
    return total


def g(xs):
    return {"k": 1}[("k")] + len([7, 8]) + f"{xs[0]}".count("1")
"""


def sites_by_kind(source: str) -> dict[str, list[Mutation]]:
    out: dict[str, list[Mutation]] = {}
    for m in find_mutations("m.py", source):
        out.setdefault(m.kind, []).append(m)
    return out


def test_mutation_kinds_and_exact_spans():
    sites = sites_by_kind(SAMPLE)
    assert set(sites) == set(MUTATION_KINDS)
    got = {k: [(m.old, m.new, m.line) for m in v] for k, v in sites.items()}
    assert got["compare"] == [("<", "<=", 3), ("!=", "==", 3)]
    assert got["boolop"] == [("and", "or", 3)]
    assert got["arith"] == [("+=", "-=", 4), ("*", "//", 4), ("+", "-", 9), ("+", "-", 9)]
    # ints in collection literals, in f-strings and bools are not sites; 0 and 3 are, both ways
    assert got["constant"] == [("0", "-1", 2), ("0", "1", 2), ("3", "2", 3), ("3", "4", 3)]
    assert got["negate_if"] == [("a < b and b != 3", "not (a < b and b != 3)", 3)]
    assert got["return_none"] == [("total", "None", 5)]
    for m in find_mutations("m.py", SAMPLE):  # one edit, in one line, the rest of the file byte-identical
        out = apply_mutation(SAMPLE, m)
        changed = [(a, b) for a, b in zip(SAMPLE.splitlines(), out.splitlines()) if a != b]
        assert len(changed) == 1 and len(out.splitlines()) == len(SAMPLE.splitlines())
        assert out[:m.start] == SAMPLE[:m.start] and out[m.start + len(m.new):] == SAMPLE[m.end:]
    m = sites["compare"][0]
    assert apply_mutation(SAMPLE, m).splitlines()[2] == "    if a <= b and b != 3:"
    assert apply_mutation(SAMPLE, sites["negate_if"][0]).splitlines()[2] == "    if not (a < b and b != 3):"
    assert "# a comment that must survive" in apply_mutation(SAMPLE, m)
    with pytest.raises(ValueError, match="expected"):
        apply_mutation(SAMPLE.replace("a < b", "a > b"), m)


def test_operator_spans_with_parentheses_multiline_and_unicode():
    src = "x = (a + 1) * (b)\ny = 'é' if (c\n      >= 2) else 0\n"
    sites = sites_by_kind(src)
    mult = next(m for m in sites["arith"] if m.old == "*")
    assert apply_mutation(src, mult).splitlines()[0] == "x = (a + 1) // (b)"
    ge = sites["compare"][0]
    assert (ge.old, ge.line) == (">=", 3)
    assert apply_mutation(src, ge).splitlines()[2] == "      > 2) else 0"


def test_every_repo_site_applies_and_parses():
    import ast

    for repo in REPOS:
        sites = repo_mutations(repo)
        assert len(sites) >= 15
        for m in sites:
            assert not m.path.startswith("tests/")
            files = mutated_files(repo, m)
            ast.parse(files[m.path])
            assert integrity_problems(REPOS[repo], files) == []  # the guard never fires on the code as given


# ----------------------------------------------------------------------------- pure helpers
def test_parse_command():
    cmd, note = parse_command("Let me look.\n```bash\ncat  stackq/structures.py \n```")
    assert (cmd.name, cmd.arg, note) == ("cat", "stackq/structures.py", "")
    cmd, note = parse_command("```python\nprint(1)\n```\nthen\n```\n\ntest\n```\n```\ndiff\n```")
    assert cmd.name == "test" and "3 code blocks" in note
    cmd, note = parse_command("```\nls\nrm -rf /\n```")
    assert cmd.name == "ls" and "only the first line" in note
    assert parse_command("just words, test") == (None, FORMAT_HELP)
    cmd, note = parse_command("```\nrun the tests\n```")
    assert cmd is None and "No known command" in note
    cmd, _ = parse_command(edit("a.py", "x = 1", "x = 2"))
    assert (cmd.name, cmd.arg) == ("edit", "a.py") and cmd.body.startswith("<<<<<<< SEARCH")


def test_edit_blocks_and_apply():
    text = "a = 1\nb = 2\n    c = 3\nb = 2\n"
    pairs = parse_edit_blocks("<<<<<<< SEARCH\na = 1\n=======\na = 10\n>>>>>>> REPLACE\n\n"
                              "<<<<<<< SEARCH\nb = 2\n    c = 3\n=======\n>>>>>>> REPLACE")
    new, summary = apply_edit(text, pairs)
    assert new == "a = 10\nb = 2\n" and len(summary) == 2
    with pytest.raises(EditError, match="occurs 2 times"):
        apply_edit(text, [("b = 2", "b = 3")])
    with pytest.raises(EditError, match="Ignoring indentation it matches at line 3"):
        apply_edit(text, [("c = 3", "c = 4")])
    with pytest.raises(EditError, match="not found"):
        apply_edit(text, [("a = 1", "a = 2"), ("a = 1", "a = 3")])  # the second block sees the first's result
    with pytest.raises(EditError, match="not found"):
        apply_edit(text, [("a =", "a = 2")])  # whole lines only
    for body, msg in [("", "no SEARCH/REPLACE"), ("x = 1", "unexpected line"),
                      ("<<<<<<< SEARCH\na\n=======\nb", "not closed"),
                      ("<<<<<<< SEARCH\n=======\nb\n>>>>>>> REPLACE", "empty")]:
        with pytest.raises(EditError, match=msg):
            parse_edit_blocks(body)


def test_lint_and_diff():
    assert lint({"ok.py": "import re\n\n\ndef f(x):\n    return re.sub('a', 'b', x) + len(x)\n"}) == []
    assert lint({"bad.py": "def f(:\n    pass\n"})[0].startswith("bad.py:1: SyntaxError")
    assert lint({"u.py": "def f():\n    return [y for y in range(3)] + nope\n"}) == ["u.py:2: undefined name 'nope'"]
    assert lint({"notes.txt": "def f(:"}) == []
    diff = unified_diff({"a.py": "x = 1\ny = 2\n", "b.py": "z\n"}, {"a.py": "x = 1\ny = 3\n", "b.py": None})
    assert "--- a/a.py\n+++ b/a.py" in diff and "-y = 2\n+y = 3" in diff and "+++ /dev/null" in diff
    assert unified_diff({"a.py": "x\n"}, {"a.py": "x\n"}) == ""


def test_integrity_problems():
    original = {"pkg/m.py": "import re\n\ndef f(self):\n    return self.__class__\n", "tests/t.py": "import os\n"}
    assert integrity_problems(original, {"pkg/m.py": "import re\nfrom pkg import m\nx = 1\n"}) == []
    assert integrity_problems(original, {"pkg/m.py": "def f(self):\n    return self.__class__\n"}) == []
    probs = integrity_problems(original, {"pkg/m.py": "import unittest, os.path\nfrom sys import modules\n"})
    assert [p.split("imports ")[1].split(",")[0] for p in probs] == ["'os'", "'sys'", "'unittest'"]
    sneaky = "def g():\n    yield 1\nx = g().gi_frame.f_back\ny = getattr(x, 'a')\nz = ().__doc__\n"
    assert len(integrity_problems(original, {"pkg/m.py": sneaky})) == 4
    chain = "import re\nre.enum.sys.modules['unittest'].x = 1\nre.enum.bltns.eval('1')\nself._cache = 1\n"
    assert sorted(p.split("uses ")[1].split(",")[0] for p in integrity_problems(original, {"pkg/m.py": chain})) == [
        "'._cache'", "'.eval'", "'.modules'", "'.sys'"]
    assert integrity_problems(original, {"pkg/m.py": "def f(:"}) == []


def test_reward_rule():
    tests, failing = ["a", "b", "c", "d"], ["c", "d"]
    assert swe_reward({"a", "b", "c", "d"}, tests, failing) == 1.0
    assert swe_reward({"a", "b"}, tests, failing) == -1.0  # nothing fixed
    assert swe_reward({"a", "b", "c"}, tests, failing) == 0.0  # half of the failing tests fixed
    assert swe_reward({"a", "c", "d"}, tests, failing) == -1.0  # a regression
    assert swe_reward({"a", "b", "c", "d"}, tests, failing, ["x imports 'os'"]) == -1.0


def test_runner_output_parsing_and_report():
    out = ('N {"id": "t.A.a", "verdict": "ok", "detail": ""}\nnoise\n'
           'X {"id": "t.A.b", "verdict": "ok"}\n'  # a line without the nonce is ignored
           'N {"id": "t.A.b", "verdict": "FAIL", "detail": "AssertionError: 1 != 2"}\n'
           'N {"id": "t.A.b", "verdict": "ok", "detail": ""}\n'  # the worst verdict is kept
           'N {"done": true}\n')
    verdicts, details, complete = parse_runner_output(out, "N")
    assert verdicts == {"t.A.a": "ok", "t.A.b": "FAIL"} and complete and "1 != 2" in details["t.A.b"]
    assert parse_runner_output(out.replace('N {"done": true}', ""), "N")[2] is False
    from swe_checks import TestRun

    report = format_report(TestRun(verdicts, details, True), ["t.A.a", "t.A.b", "t.A.c"])
    assert report.splitlines()[:4] == ["tests: 1 of 3 passed, 2 not", "ok       t.A.a", "FAIL     t.A.b",
                                       "not run  t.A.c"]
    assert "---- FAIL: t.A.b\nAssertionError: 1 != 2" in report


def test_normalize_path():
    assert normalize_path("./stackq/x.py") == normalize_path("/workspace/stackq/x.py") == "stackq/x.py"
    assert normalize_path("") == normalize_path(".") == ""
    for bad in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError):
            normalize_path(bad)


# ----------------------------------------------------------------------------- tasks and the table
def test_task_list():
    start = time.monotonic()
    tasks = list_tasks("swe")
    assert time.monotonic() - start < 1.0
    assert len(tasks) >= 40 and len({t.id for t in tasks}) == len(tasks)
    assert {t.split for t in tasks} == {"train", "heldout"}
    assert 0.1 < sum(t.split == "heldout" for t in tasks) / len(tasks) < 0.3
    assert {t.data["category"] for t in tasks} == set(MUTATION_KINDS)
    assert {t.data["repo"] for t in tasks} == set(REPOS)
    for t in tasks:
        repo, index = t.data["repo"], int(t.id.rsplit("-", 1)[1])
        assert t.id == f"swe-{repo}-{index:02d}" and t.split == split_of(t.id)
        assert repo_mutations(repo)[index] == Mutation(**t.data["mutation"])
        assert t.data["failing"] and set(t.data["failing"]) <= set(t.data["tests"])
        assert all(name in t.instruction for name in t.data["failing"])
    assert all(TABLE[r]["digest"] == repo_digest(r) for r in REPOS)  # the generated table is fresh


def test_repos_pass_their_own_tests_and_table_sample():
    for repo, files in REPOS.items():
        assert 1 <= len([p for p in files if p.endswith(".py") and not p.startswith("tests/")]) <= 3
        run = run_files(files)
        assert run.complete and sorted(run.verdicts) == TABLE[repo]["tests"], (repo, run.note)
        assert set(run.verdicts.values()) == {"ok"}, repo
        assert 5 <= len(run.verdicts) <= 12
    for task_id in ("swe-stackq-01", "swe-spans-54", "swe-calc-22", "swe-roman-05", "swe-bank-04"):
        t = get_task("swe", task_id)
        run = run_files(mutated_files(t.data["repo"], Mutation(**t.data["mutation"])))
        assert qualify(run, t.data["tests"]) == t.data["failing"], task_id


# ----------------------------------------------------------------------------- episodes
def test_env_protocol_and_first_message():
    with make_env("swe", max_turns=3) as env:
        assert isinstance(env, Env) and isinstance(env, SweEnv)
        assert env.tools == [] and env.observation_role == "user" and env.max_turns == 3
        first = env.reset(get_task("swe", "swe-stackq-01"))
        assert "test_pop_empty_raises" in first and "  stackq/structures.py" in first and "  tests/__init__.py" in first
        for word in ("cat PATH", "ls [PATH]", "grep PATTERN", "edit PATH", "<<<<<<< SEARCH", "test", "diff", "submit"):
            assert word in first
        assert "at most 3 turns" in first


@pytest.mark.parametrize("task_id", [*SOLUTIONS, *derived_sample()])
def test_hand_written_fix_earns_top_reward_and_submit_earns_bottom(task_id):
    task = get_task("swe", task_id)
    actions = SOLUTIONS.get(task_id) or [revert_edit(task), SUBMIT]
    with SweEnv() as env:
        _, results, reward = play_episode(env, task, actions)
        assert reward == 1.0, "\n\n".join(r.observation for r in results)
        assert results[-1].info["reason"] == "submit" and [r.info["turn"] for r in results] == list(
            range(1, len(actions) + 1))
        edit_obs = next(r for r in results if r.info.get("edited"))
        assert edit_obs.info["tests_passed"] == len(task.data["tests"])
        assert env.next_state_text(edit_obs) == edit_obs.observation
        for section in ("lint:\nok", f"tests: {len(task.data['tests'])} of {len(task.data['tests'])} passed",
                        "diff:\n--- a/"):
            assert section in edit_obs.observation
        assert all(c.passed for c in env.checks)
        _, results, reward = play_episode(env, task, [SUBMIT])
        assert reward == -1.0 and len(results) == 1
        assert [c.description for c in env.checks if not c.passed] == [f"{t} (failing at the start)"
                                                                          for t in task.data["failing"]]


def test_observations_of_read_commands():
    with SweEnv(max_turns=20) as env:
        env.reset(get_task("swe", "swe-stackq-01"))
        obs = env.step(block("cat stackq/structures.py")).observation
        assert "  18          if len(self._items) != 0:" in obs.splitlines()
        assert env.step(block("ls")).observation.splitlines() == sorted(REPOS["stackq"])
        assert env.step(block("ls tests")).observation.splitlines() == ["tests/__init__.py", "tests/test_structures.py"]
        assert env.step(block("grep 'EmptyError\\(\"pop'")).observation == (
            'stackq/structures.py:19:             raise EmptyError("pop from an empty stack")')
        obs = env.step(TEST).observation
        assert obs.startswith("tests: 8 of 10 passed, 2 not") and "ERROR    tests.test_structures.StackTest" in obs
        assert env.step(DIFF).observation == "No changes."
        for msg, want in [(block("cat nope.py"), "no such file"), (block("cat ../etc/passwd"), "outside"),
                          (block("cat tests"), "is a directory"), (block("grep ("), "bad regular expression"),
                          (block("cat"), "needs a PATH"), (block("test now"), "takes no arguments")]:
            result = env.step(msg)
            assert want in result.observation and result.info["error"], msg
        assert not env.done


def test_malformed_edits_change_nothing_and_max_turns():
    with SweEnv(max_turns=5) as env:
        env.reset(get_task("swe", "swe-stackq-01"))
        r = env.step(block("edit stackq/structures.py", "if len(self._items) != 0:", "fix it"))
        assert "unexpected line" in r.observation and r.info["error"] and not r.done
        r = env.step(edit("stackq/structures.py", "if len(self._items) != 0:", "if len(self._items) == 0:"))
        assert "not found" in r.observation and "Ignoring indentation it matches at line 18" in r.observation
        r = env.step(edit("stackq/structures.py", "        return len(self._items)", "        return 0"))
        assert "occurs 2 times" in r.observation
        r = env.step("I think the bug is in pop.")
        assert r.observation == FORMAT_HELP and r.info["format_error"] and r.info["turn"] == 4
        r = env.step(DIFF)
        assert r.observation == "No changes." and r.done and r.info["reason"] == "max_turns"
        with pytest.raises(RuntimeError):
            env.step(DIFF)
        assert env.outcome() == -1.0


def test_editing_or_deleting_tests_does_not_help():
    task = get_task("swe", "swe-stackq-01")
    with SweEnv() as env:
        env.reset(task)
        path = "tests/test_structures.py"
        obs = env.step(edit(path, "        self.assertEqual([s.pop(), s.pop(), s.pop()], [3, 2, 1])\n"
                                  "        self.assertEqual(len(s), 0)", "        pass")).observation
        obs = env.step(edit(path, "            Stack().pop()", "            raise EmptyError()")).observation
        assert "tests: 10 of 10 passed" in obs  # the agent's own copy of the tests now passes...
        assert env.outcome() == -1.0  # ...but the original tests grade the source
        env.reset(task)
        os.remove(env.workspace / path)  # as code run by `test` could do
        assert "tests: 0 of 10 passed" in env.step(TEST).observation
        assert env.outcome() == -1.0


def test_regression_and_tampering_earn_bottom_reward():
    task = get_task("swe", "swe-stackq-01")
    with SweEnv() as env:
        env.reset(task)  # fixes pop but breaks peek: a regression
        env.step(SOLUTIONS["swe-stackq-01"][1])
        env.step(edit("stackq/structures.py", "        return self._items[-1]", "        return self._items[0]"))
        assert env.outcome() == -1.0
        assert [c.description for c in env.checks if not c.passed] == [
            "tests.test_structures.StackTest.test_peek_does_not_remove"]
        env.reset(task)  # makes every test "pass" from inside the package: the integrity check catches it
        tamper = "unittest.TestCase.run = lambda self, r: (r.startTest(self), r.addSuccess(self), r.stopTest(self))"
        obs = env.step(edit("stackq/__init__.py", "from stackq.structures import BoundedQueue, EmptyError, Stack",
                            f"import unittest\n{tamper}\n"
                            "from stackq.structures import BoundedQueue, EmptyError, Stack")).observation
        assert "tests: 10 of 10 passed" in obs
        assert env.outcome() == -1.0 and not env.checks[0].passed and "'unittest'" in env.checks[0].detail


def test_hanging_import_is_cut_by_the_time_limit():
    with SweEnv(per_test_timeout_s=0.5) as env:
        env.reset(get_task("swe", "swe-stackq-01"))
        obs = env.step(edit("stackq/__init__.py", "from stackq.structures import BoundedQueue, EmptyError, Stack",
                            "while True:\n    pass\nfrom stackq.structures import BoundedQueue, EmptyError, Stack"))
        assert "tests: 0 of 11 passed" in obs.observation and "TestTimeout" in obs.observation
        assert "ERROR    unittest.loader._FailedTest.tests.test_structures" in obs.observation
        assert env.outcome() == -1.0


def test_symlinks_are_not_followed(tmp_path):
    secret = tmp_path / "secret.py"
    secret.write_text("TOKEN = 'host secret'\n")
    task = get_task("swe", "swe-stackq-01")
    with SweEnv() as env:
        env.reset(task)
        os.symlink(secret, env.workspace / "link.py")
        assert "symlink" in env.step(block("cat link.py")).observation
        assert "link.py@" in env.step(block("ls")).observation.splitlines()
        assert env.step(block("grep TOKEN")).observation.startswith("No line matches")
        assert "cannot be read" in env.step(edit("link.py", "TOKEN = 'host secret'", "TOKEN = 1")).observation
        assert secret.read_text() == "TOKEN = 'host secret'\n"
        module = env.workspace / "stackq/structures.py"  # a source file replaced by a link to a fixed copy
        (tmp_path / "fixed.py").write_text(REPOS["stackq"]["stackq/structures.py"])
        module.unlink()
        os.symlink(tmp_path / "fixed.py", module)
        assert env.outcome() == -1.0


# ----------------------------------------------------------------------------- the CLI
def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", *args], input=stdin, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_cli_play_and_list():
    stdin = "\n---\n".join(SOLUTIONS["swe-stackq-01"]) + "\n"
    proc = _cli("play", "--setting", "swe", "--task", "swe-stackq-01", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "[task swe-stackq-01 | setting swe | split train]"
    assert "[observation 4]" in lines and "[episode over: submit]" in lines
    assert "check 1: PASS  integrity: no new imports or introspection in the source files" in lines
    assert lines[-1] == "reward: 1.000"
    proc = _cli("list", "--setting", "swe")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert {r[0] for r in rows} == {t.id for t in TASKS} and {r[1] for r in rows} == {"train", "heldout"}
    assert {r[2] for r in rows} == set(MUTATION_KINDS)
