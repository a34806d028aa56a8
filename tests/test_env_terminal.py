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
from terminal_solutions import DONE, SOLUTIONS, bash
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
