"""Generating the SWE task table (``swe_repos.TABLE``): which mutation sites qualify as tasks.

A site qualifies when the mutated module still parses, every test of the suite is still discovered and run
(the package imports), no test runs past the per-test time limit (1 s here), and at least one test fails
(``qualify``). This is decided once, by running each mutant's suite in a fresh sandbox (``generate_table``), and
stored as data at the end of ``swe_repos.py`` (``write_table``), so listing tasks runs no test. Per repository
the table holds ``repo_digest`` (its files and mutation sites), its test ids, and site index -> indices (in
``tests``) of the tests that fail with that mutation. ``swe.list_swe_tasks`` raises when a digest is stale.

Invariant: the table is a pure function of ``swe_repos.REPOS``, the mutation rules and the runner; regenerate it
with ``PYTHONPATH=swe-rl .venv/bin/python -c "from swe_table import write_table; write_table()"`` (about a minute
on 2 cores). ``write_table`` replaces only the text from ``TABLE_MARKER`` on.
"""

from __future__ import annotations

import ast
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import swe_repos
from swe_checks import TestRun, run_tests
from swe_mutations import mutated_files, repo_digest, repo_mutations

from slime_ext.envs.sandbox import Sandbox, SandboxLimits, fresh_workspace
from slime_ext.envs.workspace import write_files


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
    lines = [TABLE_MARKER, "# Written by swe_table.write_table(); do not edit by hand. Per repository: the",
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

