"""The tool-call setting (toolcall-rl/toolcall.py): math word problems, a sandboxed python tool, answer reward.

Hand-written messages in the exact text the model emits (``<tool_call>`` blocks, then a final answer) earn +1
on train and held-out tasks of every kind; wrong, missing or number-free answers earn -1. Plus the tool-call
parser, error observations, turn limits, the observation format, the sandbox seen through the tool (no
secrets, no network, timeouts, CPU and memory limits) and the ``env`` CLI run as a subprocess. Each python
call costs ~0.1-0.3 s.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from toolcall import (
    FINAL_OBSERVATION,
    FORMAT_HELP,
    PYTHON_TOOL,
    SPLIT_COUNTS,
    ToolCallEnv,
    final_number,
    parse_tool_requests,
)

from slime_ext.envs import Env, EnvTask, get_task, isolation_status, list_tasks, make_env, play_episode
from slime_ext.simulate.tasks import split_of

REPO = Path(__file__).resolve().parents[1]
KINDS = ("shopping", "sharing", "rate", "multistep")
CATEGORIES = [k + v for k in KINDS for v in ("", "-big")]


def call(code: str, name: str = "python") -> str:
    """A tool call exactly as the model writes it (Hermes / Qwen convention)."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": {"code": code}}) + "\n</tool_call>"


# The program a solver would write for each kind: the problem's numbers, in order, and the arithmetic.
PROGRAMS = {
    "shopping": "a, p, b, q = {nums}\nprint(a * p + b * q)",
    "sharing": "total, *kept, friends = {nums}\nprint((total - sum(kept)) // friends)",
    "rate": "speed, hours = {nums}\nprint(speed * hours)",
    "multistep": "start, got, gave, times = {nums}\nprint((start + got - gave) * times)",
}


def program(task: EnvTask) -> str:
    nums = [int(n) for n in re.findall(r"[0-9]+", task.instruction)]
    return PROGRAMS[task.data["kind"]].format(nums=nums)


def play(task: EnvTask, actions: list[str], **kwargs):
    with ToolCallEnv(**kwargs) as env:
        first, results, reward = play_episode(env, task, actions)
        return reward, results, env, first


def sample_tasks() -> list[EnvTask]:
    """The first task of every (split, category): 16 tasks, basic and big, train and held-out."""
    picked: dict[tuple[str, str], EnvTask] = {}
    for t in list_tasks("toolcall"):
        picked.setdefault((t.split, t.data["category"]), t)
    return list(picked.values())


# ----------------------------------------------------------------------------- tasks
def test_task_set_shape_and_split():
    tasks = list_tasks("toolcall")
    train, heldout = list_tasks("toolcall", "train"), list_tasks("toolcall", "heldout")
    assert (len(train), len(heldout)) == (SPLIT_COUNTS["train"], SPLIT_COUNTS["heldout"]) == (200, 50)
    assert len({t.id for t in tasks}) == 250
    assert {t.data["category"] for t in train} == {t.data["category"] for t in heldout} == set(CATEGORIES)
    for t in tasks:
        m = re.fullmatch(r"tc-(shopping|sharing|rate|multistep)(-big)?-([0-9a-f]{12})", t.id)
        assert m and m.group(1) == t.data["kind"] and bool(m.group(2)) == (t.data["variant"] == "big"), t.id
        assert isinstance(t.data["answer"], int) and t.data["answer"] >= 0
        nums = [int(n) for n in re.findall(r"[0-9]+", t.instruction)]
        if t.data["variant"] == "big":
            assert t.data["answer"] > 100 and any(n >= 100 for n in [*nums, t.data["answer"]]), t
    # a basic task's split is math_tasks' split of its numbers (the key), so its id can never change split
    for t in tasks:
        if t.data["variant"] == "basic":
            nums = tuple(int(n) for n in re.findall(r"[0-9]+", t.instruction))
            if t.data["kind"] == "sharing":  # key (k, m, r) from the text's (total, [kept,] friends)
                total, *kept, k = nums
                r = kept[0] if kept else 0
                nums = (k, (total - r) // k, r)
            assert split_of((t.data["kind"], *nums)) == t.split, t.id
    assert list_tasks("toolcall") == tasks  # deterministic
    assert get_task("toolcall", tasks[0].id) == tasks[0]


# ----------------------------------------------------------------------------- solutions
@pytest.mark.parametrize("task", sample_tasks(), ids=lambda t: t.id)
def test_tool_computed_answer_earns_top_reward_and_a_wrong_one_the_bottom(task):
    with ToolCallEnv() as env:
        env.reset(task)
        r = env.step(f"Let me compute this with Python.\n{call(program(task))}")
        assert not r.done and r.info["exit_code"] == 0 and r.observation == str(task.data["answer"])
        r = env.step(f"The tool printed {r.observation}.\n\nFinal answer: {int(r.observation):,}")
        assert r.done and r.info["reason"] == "answered" and r.observation == FINAL_OBSERVATION
        assert env.outcome() == 1.0 and env.checks[0].passed
    reward, _, env, _ = play(task, [f"Final answer: {task.data['answer'] + 1}"])
    assert reward == -1.0 and "last number is" in env.checks[0].detail


def test_exact_model_format_and_answer_styles():
    task = EnvTask("tc-test", "toolcall", "train", "What is 3 times 7 plus 2?", {"kind": "test", "answer": 23})
    exact = '<tool_call>\n{"name": "python", "arguments": {"code": "print(3*7+2)"}}\n</tool_call>'
    for final in ("Final answer: 23", "The answer is **23**.", "$\\boxed{23}$", "3*7 is 21, plus 2: 23.0"):
        reward, results, _, first = play(task, [exact, final])
        assert results[0].observation == "23" and reward == 1.0, final
    assert first.startswith("What is 3 times 7 plus 2?\n\n") and '"name": "python"' in first and "Final answer" in first
    big = EnvTask("tc-test", "toolcall", "train", "1200 + 34?", {"kind": "test", "answer": 1234})
    assert play(big, ["So the total is 1,234 dollars."])[0] == 1.0  # no tool needed; commas are fine


def test_wrong_missing_and_numberless_answers_earn_the_bottom_reward():
    task = sample_tasks()[0]
    answer = task.data["answer"]
    cases = {
        f"It is {answer}, no wait, {answer + 10}.": "last number is",  # the last number counts
        "I cannot solve this.": "no number",
        f"Final answer: {answer}.5": "last number is",
    }
    for final, detail in cases.items():
        reward, _, env, _ = play(task, [final])
        assert reward == -1.0 and detail in env.checks[0].detail, final
    # tool calls only, until the turn limit: no final answer
    reward, results, env, _ = play(task, [call(f"print({answer})")] * 2, max_turns=2)
    assert reward == -1.0 and results[-1].done and results[-1].info["reason"] == "max_turns"
    assert "no final answer" in env.checks[0].detail and results[-1].observation == str(answer)
    # outcome before any answer ends the episode with -1
    with ToolCallEnv() as env:
        env.reset(task)
        assert env.outcome() == -1.0
        with pytest.raises(RuntimeError, match="over"):
            env.step("Final answer: 1")


def test_final_number():
    cases = {"Final answer: 42": 42, "1,200": 1200, "$12,345,678.": 12345678, "answer: -5": -5, "10-3": 3,
             "42.0": Decimal("42.0"), "3,4": 4, "1,2000": 2000, "x2 y": None, "none": None, "\\boxed{7}": 7,
             "v1.5 gives 12.": 12}
    for text, want in cases.items():
        assert final_number(text) == want, text


# ----------------------------------------------------------------------------- parsing tool calls
def test_parse_tool_requests():
    assert parse_tool_requests("Final answer: 3") == []
    [req] = parse_tool_requests("thinking...\n" + call("print(1)") + "\ntrailing text")
    assert req.code == "print(1)" and req.error is None and req.call["function"]["name"] == "python"
    [req] = parse_tool_requests('<tool_call>{"name": "python", "parameters": {"code": "print(2)"}}</tool_call>')
    assert req.code == "print(2)"  # parse_tool_call's conventions: "parameters", arguments as a JSON string
    as_string = json.dumps({"name": "python", "arguments": json.dumps({"code": "print(3)"})})
    [req] = parse_tool_requests(f"<tool_call>{as_string}</tool_call>")
    assert req.code == "print(3)"
    errors = {
        call("1", name="calculator"): "unknown tool 'calculator'; the only tool is 'python'",
        '<tool_call>{"arguments": {"code": "1"}}</tool_call>': 'no tool "name"',
        "<tool_call>\nprint(1)\n</tool_call>": "not valid JSON",
        "<tool_call>[1, 2]</tool_call>": "must hold a JSON object",
        '<tool_call>{"name": "python", "arguments": "print(1)"}</tool_call>': '"arguments" of python must be',
        '<tool_call>{"name": "python", "arguments": {"source": "print(1)"}}</tool_call>': 'string argument "code"',
        '<tool_call>{"name": "python", "arguments": {"code": 7}}</tool_call>': 'string argument "code"',
        call("x" * 20_001): "at most 20000",
        '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}': "without a closing </tool_call>",
    }
    for text, message in errors.items():
        [req] = parse_tool_requests(text)
        assert req.code is None and message in req.error, (text, req)
    assert [r.code for r in parse_tool_requests(call("print(1)") + call("print(2)"))] == ["print(1)", "print(2)"]


def test_error_observations_count_as_turns_and_max_turns_ends():
    task = sample_tasks()[0]
    with ToolCallEnv(max_turns=3) as env:
        first = env.reset(task)
        assert "at most 3 messages" in first
        r = env.step(call("print(1)", name="calculator"))
        assert not r.done and r.info["turn"] == 1 and r.info["format_error"] and r.info["calls"] == []
        assert r.observation.startswith("error: unknown tool 'calculator'") and '"name": "python"' in r.observation
        r = env.step("<tool_call>\n{'name': 'python', 'arguments': {'code': 'print(1)'}}\n</tool_call>")
        assert not r.done and r.observation.startswith("error: the <tool_call> block is not valid JSON")
        r = env.step("   \n")
        assert r.done and r.observation == FORMAT_HELP and r.info == {"turn": 3, "format_error": True,
                                                                      "reason": "max_turns"}
        assert env.next_state_text(r) == r.observation
        with pytest.raises(RuntimeError, match="over"):
            env.step("Final answer: 1")
        assert env.outcome() == -1.0


# ----------------------------------------------------------------------------- observations
def test_observation_formats():
    task = sample_tasks()[0]
    with ToolCallEnv(max_turns=10, max_output_chars=50) as env:
        env.reset(task)
        assert env.step(call("x = 6 * 7")).observation == "(no output: print() the values you need)"
        r = env.step(call("print('partial')\nprint(x)"))  # a fresh interpreter: x is gone
        assert r.info["exit_code"] == 1
        assert r.observation.startswith("stdout:\npartial\nstderr:\n[... stderr truncated: ")
        assert r.observation.endswith("NameError: name 'x' is not defined\n[exit status 1]")  # the end of stderr
        r = env.step(call("open('notes.txt', 'w').write('kept')\nimport sys\nprint('warn', file=sys.stderr)"))
        assert r.observation == "stderr:\nwarn" and r.info["exit_code"] == 0
        assert env.step(call("print(open('notes.txt').read())")).observation == "kept"  # files do persist
        r = env.step(call("print('y' * 120)"))
        assert r.observation == "y" * 50 + "\n[... stdout truncated: 70 more characters not shown]"
        r = env.step(call("print('start')\nx = bytearray(1024 ** 3)"))  # 1 GiB > the 256 MB address space
        assert "MemoryError" in r.observation and r.observation.endswith("[exit status 1]")
        r = env.step(call("print(1)") + "\n" + call("print(2)", name="calc") + "\n" + call("print(input())"))
        assert r.observation.startswith("[tool call 1 of 3]\n1\n\n[tool call 2 of 3]\nerror: unknown tool 'calc'")
        assert "[tool call 3 of 3]\nstderr:\n" in r.observation and "EOFError: EOF when reading" in r.observation
        assert len(r.info["calls"]) == 2 and len(r.info["results"]) == 3 and r.info["format_error"]


def test_tool_schema_protocol_and_episode_lifecycle():
    env = make_env("toolcall", max_turns=2)
    assert isinstance(env, Env) and env.observation_role == "tool" and env.tools == [PYTHON_TOOL]
    fn = PYTHON_TOOL["function"]
    assert fn["name"] == "python" and fn["parameters"]["required"] == ["code"]
    assert fn["parameters"]["properties"]["code"]["type"] == "string"
    with pytest.raises(RuntimeError, match="reset"):
        env.step("Final answer: 1")
    with pytest.raises(ValueError, match="not 'toolcall'"):
        env.reset(get_task("terminal", "term-count-lines"))
    task = sample_tasks()[0]
    env.reset(task)
    first = env.workspace
    env.step(call("open('f', 'w').write('x')"))
    env.reset(task)
    assert env.workspace != first and not first.exists() and not (env.workspace / "f").exists()
    assert env.step(call("import os; print(os.path.exists('f'))")).observation == "False"
    ws = env.workspace
    env.close()
    env.close()
    assert not ws.exists()


# ----------------------------------------------------------------------------- the sandbox, through the tool
def test_python_tool_cannot_read_the_parents_secrets(monkeypatch):
    monkeypatch.setenv("TOOLCALL_TEST_SECRET", "hunter2")
    code = "import os\nprint(os.environ.get('TOOLCALL_TEST_SECRET', 'absent'), sorted(os.environ))"
    reward, results, _, _ = play(sample_tasks()[0], [call(code)], max_turns=1)
    assert results[0].observation.startswith("absent ['HOME', 'LANG', 'PATH', 'TMPDIR']")
    assert "hunter2" not in results[0].observation


@pytest.mark.skipif(isolation_status()[0] != "namespaces", reason=f"needs namespaces: {isolation_status()[1]}")
def test_python_tool_has_no_network():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]
        code = ("import socket\n"
                f"for host, port in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n"
                "    try:\n"
                "        socket.create_connection((host, port), timeout=2).close()\n"
                "        print('connected', host)\n"
                "    except OSError as e:\n"
                "        print('blocked', host, type(e).__name__)")
        _, results, _, _ = play(sample_tasks()[0], [call(code)], max_turns=1)
    lines = results[0].observation.splitlines()
    assert [line.split()[:2] for line in lines] == [["blocked", "127.0.0.1"], ["blocked", "1.1.1.1"]], lines


def test_infinite_loop_times_out_and_the_episode_goes_on():
    task = sample_tasks()[0]
    with ToolCallEnv(timeout_s=2.0) as env:
        env.reset(task)
        r = env.step(call("print('looping')\nwhile True:\n    pass"))
        assert r.info["timed_out"] and not r.done
        assert r.observation == "stdout:\nlooping\n[timed out after 2 s]"
        r = env.step(f"Final answer: {task.data['answer']}")
        assert r.done and env.outcome() == 1.0
    with ToolCallEnv(timeout_s=30.0, cpu_s=1) as env:  # the CPU limit stops it before the wall clock
        env.reset(task)
        r = env.step(call("while True:\n    pass"))
        assert not r.info["timed_out"] and r.observation == "[killed by signal SIGXCPU (CPU time limit of 1 s)]"


# ----------------------------------------------------------------------------- the CLI
def _cli(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", *args], input=stdin, cwd=REPO,
                          capture_output=True, text=True, timeout=60)


def test_cli_play_solves_a_task_from_stdin():
    task = next(t for t in list_tasks("toolcall", "heldout") if t.data["variant"] == "big")
    stdin = f"I'll use Python.\n{call(program(task))}\n---\nFinal answer: {task.data['answer']}\n"
    proc = _cli("play", "--setting", "toolcall", "--task", task.id, stdin=stdin)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"[task {task.id} | setting toolcall | split heldout]"
    assert lines[1] == task.instruction
    i = lines.index("[observation 1]")
    assert lines[i + 1] == str(task.data["answer"]) and "[episode over: answered]" in lines
    assert f"check 1: PASS  final answer equals {task.data['answer']}" in lines
    assert lines[-1] == "reward: 1.000"
    proc = _cli("play", "--setting", "toolcall", "--task", task.id, stdin="Final answer: 0\n")
    assert proc.stdout.splitlines()[-1] == "reward: -1.000"


def test_cli_list_shows_both_splits():
    proc = _cli("list", "--setting", "toolcall")
    assert proc.returncode == 0, proc.stderr
    rows = [line.split("\t") for line in proc.stdout.splitlines()]
    assert len(rows) == 250 and {r[1] for r in rows} == {"train", "heldout"}
    assert {r[2] for r in rows} == set(CATEGORIES) and all(r[0].startswith("tc-") for r in rows)
    heldout = _cli("list", "--setting", "toolcall", "--split", "heldout").stdout.splitlines()
    assert len(heldout) == 50 and all("\theldout\t" in line for line in heldout)
