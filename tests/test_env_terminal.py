"""The terminal setting (terminal-rl/terminal.py, terminal_tasks.py; slime_ext.envs base, cli).

Every task: a hand-written solution earns +1, doing nothing (DONE at once) earns -1. Plus the action parser,
the observation format, turn limits, partial rewards, the registry's errors, the checker's refusal to follow
symlinks out of the workspace, and the ``env`` CLI run as a subprocess. Each sandboxed command costs ~50-90 ms.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from terminal import (
    FORMAT_HELP,
    TerminalEnv,
    format_observation,
    normalize,
    parse_action,
    read_workspace_file,
    validate_task_data,
)
from terminal_tasks import CATEGORIES
from toolcall import format_result

from slime_ext.envs import (
    Env,
    EnvTask,
    StepResult,
    fraction_to_reward,
    get_task,
    list_tasks,
    make_env,
    play_episode,
)
from slime_ext.envs.base import register_setting
from slime_ext.envs.checks import split_of
from slime_ext.envs.cli import split_messages
from slime_ext.envs.sandbox import RunResult

REPO = Path(__file__).resolve().parents[1]


def bash(code: str) -> str:
    return f"I will run this.\n```bash\n{code.strip()}\n```\n"


DONE = "The task is complete.\nDONE"

# One hand-written solution per task: the messages a model would send, in order.
SOLUTIONS: dict[str, list[str]] = {
    "term-make-dirs": [bash("mkdir -p project/src project/tests project/docs && touch project/README.md"), DONE],
    "term-rename-ext": [bash('cd docs && for f in *.txt; do mv "$f" "${f%.txt}.md"; done && ls'), DONE],
    "term-move-logs": [bash("mkdir logs && find app -name '*.log' -exec mv {} logs/ \\;"), DONE],
    "term-find-large": [bash("find data -type f -size +1000c | sort > big.txt"), DONE],
    "term-copy-tree": [bash("cp -a site site.bak"), DONE],
    "term-symlink": [bash("ln -s releases/v2 current && cat current/VERSION"), DONE],
    "term-delete-empty": [bash("find tmp -type f -empty -delete")],
    "term-count-lines": [bash("wc -l < access.log > count.txt"), DONE],
    "term-grep-errors": [bash("grep ERROR app.log > errors.txt"), DONE],
    "term-sed-replace": [bash("sed -i 's/localhost/db.internal/g' config.ini"), DONE],
    "term-sort-uniq": [bash("sort -u names.txt > unique.txt"), DONE],
    "term-word-freq": [bash("sort words.txt | uniq -c | sort -rn | head -3 | awk '{print $2, $1}' > top3.txt"), DONE],
    "term-csv-sum": [bash("awk -F, 'NR > 1 { s += $3 } END { print s }' sales.csv > total.txt"), DONE],
    "term-cut-field": [bash("awk -F: '$3 == \"/bin/bash\" { print $1 }' users.txt > bash_users.txt"), DONE],
    "term-line-range": [bash("sed -n '10,20p' numbers.txt > middle.txt"), DONE],
    "term-dedupe-keep-order": [bash("awk '!seen[$0]++' todo.txt > t && mv t todo.txt"), DONE],
    "term-count-matches": [bash("grep -ci timeout server.log > timeouts.txt"), DONE],
    "term-tar-create": [bash("tar -czf project.tar.gz project"), DONE],
    "term-tar-extract": [bash("mkdir unpacked && tar -xzf bundle.tar.gz -C unpacked"), DONE],
    "term-gunzip-count": [bash("gunzip measurements.csv.gz"), bash("tail -n +2 measurements.csv | wc -l > rows.txt"),
                          DONE],
    "term-tar-list": [bash("tar -tf release.tar | grep -v '/$' | sort > contents.txt"), DONE],
    "term-tar-exclude": [bash("tar --exclude='*.o' -czf src.tar.gz src"), DONE],
    "term-gzip-logs": [bash("gzip logs/*.log && ls logs"), DONE],
    "term-tar-extract-one": [bash("tar -xzf archive.tar.gz docs/guide.txt"), DONE],
    "term-git-init-commit": [bash("git init -q && git add README.md main.py && git commit -qm 'Initial commit'"), DONE],
    "term-git-branch": [bash("git checkout -b feature && echo 'new feature' > feature.txt && git add feature.txt && "
                             "git commit -m 'Add feature'"), DONE],
    "term-git-amend": [bash("git commit --amend -m 'Fix bug'"), DONE],
    "term-git-ignore": [bash("printf '*.pyc\\nbuild/\\n' > .gitignore && git add .gitignore && git commit -m ignore"),
                        DONE],
    "term-git-restore": [bash("git checkout -- . && git status --short"), DONE],
    "term-git-merge": [bash("git merge --no-edit fix"), DONE],
    "term-git-file-history": [bash("git log --reverse --format=%s -- lib.py > history.txt"), DONE],
    "term-chmod-run": [bash("chmod u+x run.sh && ./run.sh"), DONE],
    "term-chmod-private": [bash("chmod 600 secret.key"), DONE],
    "term-chmod-tree": [bash("find share -type d -exec chmod 755 {} + && find share -type f -exec chmod 644 {} +"),
                        DONE],
    "term-list-executables": [bash("find bin -type f -perm -u+x | sort > exec.txt"), DONE],
    "term-read-only": [bash("chmod -R a-w archive"), DONE],
    "term-script-greet": [bash("cat > greet.sh <<'EOF'\n#!/bin/sh\necho \"Hello, ${1:-world}!\"\nEOF\n"
                               "chmod +x greet.sh"),
                          DONE],
    "term-script-sum": [bash("cat > sum.sh <<'EOF'\n#!/bin/sh\ns=0\nwhile read -r n; do s=$((s + n)); done\necho $s\n"
                             "EOF\nchmod +x sum.sh && printf '1\\n2\\n' | ./sum.sh"), DONE],
    "term-script-count-ext": [bash("cat > count_ext.sh <<'EOF'\n#!/bin/sh\nfind \"$1\" -type f -name \"*.$2\" | wc -l\n"
                                   "EOF\nchmod +x count_ext.sh"), DONE],
    "term-script-fizzbuzz": [bash("cat > fizzbuzz.sh <<'EOF'\n#!/bin/bash\nfor ((i = 1; i <= $1; i++)); do\n"
                                  "  if ((i % 15 == 0)); then echo FizzBuzz; elif ((i % 3 == 0)); then echo Fizz;\n"
                                  "  elif ((i % 5 == 0)); then echo Buzz; else echo $i; fi\ndone\nEOF\n"
                                  "chmod +x fizzbuzz.sh"), DONE],
    "term-script-max": [bash("cat > max.sh <<'EOF'\n#!/bin/sh\n"
                             "[ $# -eq 0 ] && { echo 'usage: max.sh N...' >&2; exit 2; }\n"
                             "m=$1\nfor n; do [ \"$n\" -gt \"$m\" ] && m=$n; done\necho $m\nEOF\n"
                             "chmod +x max.sh"), DONE],
}

TASKS = list_tasks("terminal")


def play(task: EnvTask, actions: list[str], **kw) -> tuple[float, list[StepResult], TerminalEnv]:
    with TerminalEnv(**kw) as env:
        _, results, reward = play_episode(env, task, actions)
        return reward, results, env


# ----------------------------------------------------------------------------- every task
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.id)
def test_solution_earns_top_reward_and_doing_nothing_the_bottom(task):
    reward, results, env = play(task, SOLUTIONS[task.id])
    failed = [f"{c.description}: {c.detail}" for c in env.checks if not c.passed]
    assert reward == 1.0, f"{failed}\n" + "\n".join(r.observation for r in results)
    assert all(r.info.get("exit_code") in (0, None) for r in results), [r.observation for r in results]
    reward, results, env = play(task, [DONE])
    assert reward == -1.0, [c for c in env.checks if c.passed]
    assert results[-1].done and results[-1].info["reason"] == "done"


def test_task_set_shape():
    assert set(SOLUTIONS) == {t.id for t in TASKS}
    assert len(TASKS) >= 30
    assert {t.data["category"] for t in TASKS} == set(CATEGORIES)
    heldout = [t for t in TASKS if t.split == "heldout"]
    assert 0.1 <= len(heldout) / len(TASKS) <= 0.3
    for t in TASKS:
        assert t.split == split_of(t.id) and t.id.startswith("term-")
        assert 1 <= len(t.data["checks"]) <= 4
    assert list_tasks("terminal", "train") + list_tasks("terminal", "heldout") != []
    assert {t.id for t in list_tasks("terminal", "heldout")} == {t.id for t in heldout}


# ----------------------------------------------------------------------------- parsing and formatting (pure)
def test_parse_action_code_blocks():
    assert parse_action("run:\n```bash\nls -la\n```\n").command == "ls -la\n"
    assert parse_action("```sh\necho a\necho b\n```").command == "echo a\necho b\n"
    assert parse_action("```\npwd\n```").command == "pwd\n"
    assert parse_action("```shell\npwd\n```").command == "pwd\n"
    p = parse_action("```python\nprint(1)\n```\n```bash\necho 2\n```\n```bash\necho 3\n```")
    assert p.command == "echo 2\n" and p.blocks == 3 and not p.done
    assert parse_action("```bash\necho unclosed").command == "echo unclosed\n"
    assert parse_action("```bash\n   \n```").command is None
    assert parse_action("no code here, use `ls`").command is None


def test_parse_action_done():
    assert parse_action("All set.\nDONE").done
    assert parse_action("**DONE**").done and parse_action("  DONE.  ").done
    assert not parse_action("Done.").done and not parse_action("I am DONE now").done
    assert not parse_action("```bash\necho\nDONE\n```").done  # inside a code block it is code
    both = parse_action("```bash\ntouch x\n```\nDONE")
    assert both.done and both.command == "touch x\n"


def test_format_observation():
    res = RunResult(exit_code=3, stdout="out\n", stderr="", timed_out=False, truncated=False, signal=None, wall_s=0.1)
    assert format_observation(res, 10, 100) == "exit code: 3\nstdout:\nout\nstderr: (empty)"
    res = RunResult(exit_code=None, stdout="x" * 50, stderr="err", timed_out=True, truncated=True, signal=9, wall_s=10)
    obs = format_observation(res, 10, 20)
    assert obs.startswith("exit code: none (killed by signal 9)\ntimed out after 10 s\nstdout:\n" + "x" * 20)
    assert "[... stdout truncated: 30 more characters not shown]" in obs
    assert "stderr:\nerr" in obs and "[output truncated" in obs
    res = RunResult(exit_code=None, stdout="", stderr="", timed_out=False, truncated=False, signal=9, wall_s=1,
                    stopped_by="memory_mb", stop_reason="the run used more than 512 MB of memory (memory_mb)")
    assert "stopped: the run used more than 512 MB of memory (memory_mb)" in format_observation(res, 10, 100)
    assert "[stopped: the run used more than 512 MB" in format_result(res, 10, 5, 100)


def test_normalize_and_reward_mapping():
    assert normalize("a  \nb\n\n") == normalize("a\nb") == "a\nb"
    assert normalize("  a") != normalize("a")
    assert fraction_to_reward(0, 3) == -1.0 and fraction_to_reward(3, 3) == 1.0 and fraction_to_reward(1, 2) == 0.0
    for bad in ((1, 0), (-1, 2), (3, 2)):
        with pytest.raises(ValueError):
            fraction_to_reward(*bad)


def test_split_messages_for_play():
    text = "```bash\necho a\n```\n---\n\n---\n```bash\ncat <<EOF\n---\nEOF\n```\n---\nDONE\n"
    msgs = list(split_messages(text.splitlines(keepends=True)))
    assert msgs == ["```bash\necho a\n```\n", "```bash\ncat <<EOF\n---\nEOF\n```\n", "DONE\n"]


def test_validate_task_data_rejects_malformed():
    validate_task_data("ok", {"checks": [{"file": "a", "equals": "x"}]})
    for bad in ({"checks": []}, {"checks": [{"file": "a"}]}, {"checks": [{"file": "../a", "equals": ""}]},
                {"checks": [{"sh": "true", "file": "a"}]}, {"checks": [{"path": "a", "kind": "fifo"}]},
                {"chekcs": [{"sh": "true"}]}, {"modes": {"a": "rwx"}, "checks": [{"sh": "true"}]}):
        with pytest.raises(ValueError):
            validate_task_data("bad", bad)


# ----------------------------------------------------------------------------- episodes
def _task(checks: list[dict], **data) -> EnvTask:
    return EnvTask("term-test", "terminal", "train", "A test task.", {"category": "files", **data, "checks": checks})


def test_first_message_format_help_and_max_turns():
    task = _task([{"file": "x.txt", "equals": "x"}])
    with TerminalEnv(max_turns=3) as env:
        first = env.reset(task)
        assert first.startswith("A test task.") and "```bash" in first and "DONE" in first and "3 turns" in first
        r = env.step("I think we should look around first.")
        assert r.observation == FORMAT_HELP and not r.done and r.info == {"turn": 1, "ran": False, "format_error": True}
        r = env.step(bash("echo hi; echo oops >&2; exit 4"))
        assert r.observation == "exit code: 4\nstdout:\nhi\nstderr:\noops" and not r.done
        assert env.next_state_text(r) == r.observation
        r = env.step(bash("echo x > x.txt"))
        assert r.done and r.info["reason"] == "max_turns" and r.info["turn"] == 3
        with pytest.raises(RuntimeError, match="over"):
            env.step(DONE)
        assert env.outcome() == 1.0


def test_partial_reward_and_state_between_turns():
    task = get_task("terminal", "term-make-dirs")
    reward, results, _ = play(task, [bash("cd project 2>/dev/null; mkdir -p project/src project/docs"), DONE])
    assert reward == fraction_to_reward(2, 4) == 0.0  # two of four checks
    reward, results, _ = play(task, [bash("mkdir -p project && cd project && export D=docs"),
                                     bash('mkdir -p src tests "${D:-docs}" && touch README.md && pwd'), DONE])
    assert results[1].observation.startswith("exit code: 0\nstdout:\n/")
    assert reward == -1.0  # cd and variables do not carry over: everything landed at the top, not in project/


def test_command_timeout_is_reported():
    with TerminalEnv(command_timeout_s=0.5) as env:
        env.reset(_task([{"sh": "false"}]))
        r = env.step(bash("echo started; sleep 5"))
        assert r.info["timed_out"] and "timed out after 0.5 s" in r.observation and "started" in r.observation


def test_reset_starts_from_scratch_and_close_removes_workspace():
    task = _task([{"file": "a.txt", "equals": "seed"}], files={"a.txt": "seed\n"})
    env = TerminalEnv()
    env.reset(task)
    first = env.workspace
    env.step(bash("echo changed > a.txt; touch b.txt"))
    env.reset(task)
    assert env.workspace != first and not first.exists()
    assert read_workspace_file(env.workspace, "a.txt") == "seed\n" and not (env.workspace / "b.txt").exists()
    assert env.outcome() == 1.0
    ws = env.workspace
    env.close()
    env.close()
    assert not ws.exists()


def test_broken_setup_is_an_error_not_a_reward():
    with TerminalEnv() as env, pytest.raises(RuntimeError, match="set-up of task term-test failed"):
        env.reset(_task([{"sh": "true"}], setup="echo nope >&2; exit 3"))


# ----------------------------------------------------------------------------- the checker does not follow symlinks
def test_parent_side_checks_never_follow_symlinks_out_of_the_workspace(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("SECRET\n")
    checks = [{"file": "answer.txt", "equals": "SECRET"}, {"file": "answer.txt", "contains": "SECRET"},
              {"file": "dir/secret.txt", "equals": "SECRET"}, {"path": "dir/secret.txt", "kind": "file"}]
    actions = [bash(f"ln -s {outside}/secret.txt answer.txt && ln -s {outside} dir"), DONE]
    reward, _, env = play(_task(checks), actions)
    assert reward == -1.0
    assert all("symlink" in c.detail for c in env.checks), env.checks
    # a link that stays inside the workspace is not followed either: the checker reads only regular files
    inside = [{"file": "b.txt", "equals": "x"}, {"path": "b.txt", "kind": "symlink", "target": "a.txt"}]
    reward, _, env = play(_task(inside), [bash("echo x > a.txt && ln -s a.txt b.txt"), DONE])
    assert [c.passed for c in env.checks] == [False, True]


def test_checker_is_not_blocked_by_a_fifo():
    reward, _, env = play(_task([{"file": "pipe", "equals": ""}]), [bash("mkfifo pipe"), DONE])
    assert reward == -1.0 and "not a regular file" in env.checks[0].detail


# ----------------------------------------------------------------------------- registry
def test_registry_errors_name_the_known_settings_and_ids():
    assert isinstance(make_env("terminal", max_turns=2), Env)
    with pytest.raises(ValueError, match="unknown setting 'nosuch'; known settings: .*terminal"):
        list_tasks("nosuch")
    with pytest.raises(ValueError, match="did you mean term-count-lines"):
        get_task("terminal", "term-count-line")
    with pytest.raises(ValueError, match="split must be"):
        list_tasks("terminal", "test")
    with pytest.raises(ValueError, match="already registered"):
        register_setting("terminal", list, TerminalEnv)
    with pytest.raises(ValueError, match="split"):
        EnvTask("x", "terminal", "dev", "do it")
    with pytest.raises(ValueError, match="JSON"):
        EnvTask("x", "terminal", "train", "do it", {"f": object()})


# ----------------------------------------------------------------------------- the CLI
def _cli_module() -> str:
    """`openclaw-rl` itself (slime_ext.cli) once `env` is wired into it, else the stand-alone entry of the same code."""
    import argparse

    from slime_ext import cli

    commands = [a.choices for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return "slime_ext.cli" if any("env" in c for c in commands) else "slime_ext.envs.cli"


def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", _cli_module(), "env", *args], input=stdin, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_cli_play_solves_a_task_from_stdin():
    stdin = "\n---\n".join(SOLUTIONS["term-word-freq"]) + "\n"
    proc = _cli("play", "--setting", "terminal", "--task", "term-word-freq", stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "[task term-word-freq | setting terminal | split heldout]"
    assert "[observation 1]" in lines and "exit code: 0" in lines and "[episode over: done]" in lines
    assert lines[-1] == "reward: 1.000"
    proc = _cli("play", "--setting", "terminal", "--task", "term-word-freq", "--max-turns", "1",
                stdin="```bash\nls\n```\n---\n" + SOLUTIONS["term-word-freq"][0])
    assert proc.returncode == 0 and "[episode over: max_turns]" in proc.stdout
    assert proc.stdout.splitlines()[-1] == "reward: -1.000"


def test_cli_list_and_errors():
    proc = _cli("list", "--setting", "terminal")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert {r[0] for r in rows} == {t.id for t in TASKS} and {r[1] for r in rows} == {"train", "heldout"}
    proc = _cli("list", "--setting", "terminal", "--split", "heldout")
    assert {line.split("\t")[1] for line in proc.stdout.splitlines()} == {"heldout"}
    proc = _cli("play", "--setting", "nosuch", "--task", "x")
    assert proc.returncode == 2 and "unknown setting 'nosuch'; known settings: " in proc.stderr and "terminal" in proc.stderr
