"""The GUI setting in a real headless Chromium: scripted solutions, wrong and cut-short episodes, errors,
screenshots, isolation between concurrent episodes, a browser that dies, and `openclaw-rl env` as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections import Counter

import pytest
from gui_server import inject, site
from gui_tasks import solution_messages

from slime_ext.envs import get_task, list_tasks, make_env
from tests.conftest import require_chromium

TASKS = list_tasks("gui")
CATEGORIES = ("forms", "menus", "search", "flow", "scroll", "infeasible")


@pytest.fixture(scope="module", autouse=True)
def chromium():
    return require_chromium()


def play(task, messages, **env_kw):
    """Run `messages` (or the task's scripted solution when None) as an episode; (env, results, reward)."""
    env = make_env("gui", **{"max_turns": 20, **env_kw})
    try:
        env.reset(task)
        results = []
        source = solution_messages(task, lambda: env.lines) if messages is None else messages
        for msg in source:
            results.append(env.step(msg))
            if results[-1].done:
                break
        return env, results, env.outcome()
    finally:
        env.close()


def test_the_catalog_has_every_kind_of_task_in_both_disjoint_splits():
    assert len(TASKS) >= 20
    by = Counter((t.data["category"], t.split) for t in TASKS)
    for category in CATEGORIES:
        assert by[category, "train"] >= 1 and by[category, "heldout"] >= 1, (category, by)
    train = [t for t in TASKS if t.split == "train"]
    heldout = [t for t in TASKS if t.split == "heldout"]
    assert not {t.id for t in train} & {t.id for t in heldout}
    # a held-out task is another variant, never a train task under another id
    assert not {t.instruction for t in train} & {t.instruction for t in heldout}
    assert sum(not t.data["feasible"] for t in TASKS) >= 2


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_the_scripted_solution_earns_the_top_reward(task):
    env, results, reward = play(task, None)
    assert reward == 1.0, [(c.description, c.detail) for c in env.checks]
    assert results[-1].info["reason"] == ("done" if task.data["feasible"] else "infeasible")


@pytest.mark.parametrize("task", TASKS, ids=[t.id for t in TASKS])
def test_wrong_and_cut_short_episodes_never_earn_the_top_reward(task):
    solution = task.data["solution"]
    # claiming success (or failure) at once
    _, _, reward = play(task, ["done"])
    assert reward < 1.0 if task.data["feasible"] else reward == -1.0
    _, _, reward = play(task, ["infeasible"])
    assert reward == (1.0 if not task.data["feasible"] else -1.0)
    # the whole solution but its declaration: the turn limit ends the episode
    env, results, reward = play(task, None, max_turns=max(1, len(solution) - 1))
    assert results[-1].info["reason"] == "max_turns"
    assert reward < 1.0 if task.data["feasible"] else reward == -1.0


# (task, {solution step: the wrong step, or None to leave it out}): each wrong episode still ends with `done`
WRONG = [
    ("gui-shop-mug", {("click", "button", "Add Stone Mug to cart"): ("click", "button", "Add Red Mug to cart")}),
    ("gui-checkout-ada", {("click", "radio", "Express"): ("click", "radio", "Standard")}),
    ("gui-booking-sat", {("click", "radio", "19:30"): ("click", "radio", "20:15")}),
    ("gui-editor-dark", {("click", "menuitemradio", "Dark"): ("click", "menuitemradio", "High contrast")}),
    ("gui-inbox-invoice", {("click", "checkbox", "Priya Nair: Invoice 7781"):
                           ("click", "checkbox", "Quinn Adams: Survey results")}),
    ("gui-support-login", {("click", "radio", "Technical problem"): ("click", "radio", "Account")}),
    ("gui-docmenu-share", {("select", "combobox", "Permission", "Editor"): None}),  # left at its default
]


@pytest.mark.parametrize("task_id, edits", WRONG, ids=[w[0] for w in WRONG])
def test_a_wrong_action_is_recorded_and_costs_the_top_reward(task_id, edits):
    import dataclasses

    task = get_task("gui", task_id)
    solution = [list(edits.get(tuple(s), s)) for s in task.data["solution"] if edits.get(tuple(s), s) is not None]
    assert len(solution) + sum(v is None for v in edits.values()) == len(task.data["solution"])
    assert solution != task.data["solution"] and solution[-1] == ["done"]
    wrong_task = dataclasses.replace(task, data={**task.data, "solution": solution})
    env, results, reward = play(wrong_task, None)
    assert results[-1].info["reason"] == "done" and -1.0 < reward < 1.0  # partial credit, never the top
    failed = [c for c in env.checks if not c.passed]
    assert failed and all(c.description != "the agent said done" for c in failed)


def test_actions_that_cannot_run_say_why_and_the_episode_goes_on(tmp_path):
    task = get_task("gui", "gui-signup-ada")
    with make_env("gui", max_turns=6) as env:
        env.reset(task)
        name = next(line.id for line in env.lines if line.text.startswith('textbox "Full name"'))
        button = next(line.id for line in env.lines if line.text.startswith("button"))
        plan = next(line.id for line in env.lines if line.text.startswith("combobox"))
        r = env.step("click [999]")
        assert "there is no node [999]" in r.observation and r.info["action_error"] and not r.done
        r = env.step(f'type [{button}] "hello"')
        assert f"cannot type [{button}]" in r.observation and "not a text field" in r.observation
        r = env.step(f'select [{plan}] "Platinum"')
        assert 'no option "Platinum"' in r.observation and '"Pro"' in r.observation
        r = env.step("press Hyper")
        assert "unknown key" in r.observation
        r = env.step("I am not sure what to do.")
        assert r.info["format_error"] and "Your message had no action" in r.observation and "[1] page" in r.observation
        # several actions in one message run in order; the first failure stops the rest
        r = env.step(f'type [{name}] "Ada"\nclick [998]\ntype [{name}] "Bob"')
        assert r.done and r.info["reason"] == "max_turns"
        assert 'value="Ada"' in next(line.text for line in env.lines if line.id == name)
        with pytest.raises(RuntimeError, match="episode is over"):
            env.step("done")
        assert env.outcome() == -1.0


def test_actions_after_one_that_loads_a_new_page_are_not_run():
    task = get_task("gui", "gui-checkout-ada")
    with make_env("gui") as env:
        env.reset(task)
        proceed = next(line.id for line in env.lines if line.text == 'button "Proceed to checkout"')
        r = env.step(f"click [{proceed}]\nclick [{proceed}]\ndone")
        assert "a new page loaded, so the 2 action(s) after this one were not run" in r.observation
        assert not r.done and env.ending is None
        assert "url=/address.html" in env.lines[0].text and 'textbox "Full name"' in r.observation


def test_a_link_that_would_open_another_tab_opens_in_the_episodes_tab():
    from slime_ext.envs.base import EnvTask

    pages = {"index.html": "<html><head><title>A</title></head><body><a href='b.html' target='_blank'>next</a>"
                           "<button onclick=\"window.open('b.html')\">pop</button></body></html>",
             "b.html": "<html><head><title>B</title></head><body><button onclick=\"record('ok', 1)\">finish</button>"
                       "</body></html>"}
    task = EnvTask("gui-tabs", "gui", "train", "Finish.", {"pages": pages, "start": "index.html",
                                                          "checks": [["finished", "ok", 1]], "feasible": True})
    for opener in ('link "next"', 'button "pop"'):
        with make_env("gui") as env:
            env.reset(task)
            r = env.step(f"click [{next(line.id for line in env.lines if line.text == opener)}]")
            assert env.lines[0].text.startswith('page "B"'), r.observation
            finish = next(line.id for line in env.lines if line.text == 'button "finish"')
            env.step(f"click [{finish}]\ndone")
            assert env.outcome() == 1.0


def test_next_state_is_the_tree_diff_and_task_progress():
    task = get_task("gui", "gui-signup-ada")
    with make_env("gui") as env:
        env.reset(task)
        messages = list(solution_messages(task, lambda: env.lines))[:1]
        r = env.step(messages[0])
        state = env.next_state_text(r)
        assert state.startswith('typed "Ada Lovelace" into')
        assert '~ [' in state and 'value="Ada Lovelace"' in state
        assert state.endswith("task progress: 0/1 checks pass")


def test_a_screenshot_of_every_step_is_saved_to_the_run_directory(tmp_path):
    task = get_task("gui", "gui-signup-ada")
    env, results, reward = play(task, None, run_dir=tmp_path)
    shots = sorted((tmp_path / "screenshots").glob(f"{task.id}-*/step-*.png"))
    assert len(shots) == len(results) and reward == 1.0
    for shot in shots:
        data = shot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000


def test_concurrent_episodes_share_the_browser_but_not_their_state():
    task = get_task("gui", "gui-signup-ada")
    names = ["Ada Lovelace", "Someone Else"]
    rewards: dict[str, float] = {}

    def run(name: str) -> None:
        env = make_env("gui")
        try:
            env.reset(task)
            for msg in solution_messages(task, lambda: env.lines):
                r = env.step(msg.replace("Ada Lovelace", name))
                if r.done:
                    break
            rewards[name] = env.outcome()
        finally:
            env.close()

    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert rewards == {"Ada Lovelace": 1.0, "Someone Else": pytest.approx(0.0)}  # each saw only its own record


def test_a_dead_browser_is_replaced_at_the_next_episode():
    from slime_ext.envs.browser import shared_browser

    task = get_task("gui", "gui-signup-ada")
    play(task, ["done"])
    old = shared_browser()
    os.killpg(old.proc.pid, signal.SIGKILL)
    old.proc.wait(10)
    env, _, reward = play(task, None)
    assert reward == 1.0 and shared_browser() is not old and shared_browser().alive


def test_the_page_server_serves_only_published_pages():
    s = site({"index.html": "<html><head></head><body>hi</body></html>"})
    body = urllib.request.urlopen(s.url("index.html"), timeout=10).read().decode()
    assert "window.record" in body and body.endswith("<body>hi</body></html>")
    other = s.base_url.replace(s.token, "000000000000")
    for url in (s.url("missing.html"), other + "index.html"):
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url, timeout=10)
        assert e.value.code == 404
    s.close()
    with pytest.raises(urllib.error.HTTPError):
        urllib.request.urlopen(s.url("index.html"), timeout=10)
    with pytest.raises(ValueError, match="<head>"):
        inject("<html><body></body></html>")


def _cli(*args, stdin=""):
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", *args], input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_env_list_and_env_play_by_hand(tmp_path):
    r = _cli("list", "--setting", "gui", "--split", "heldout")
    assert r.returncode == 0, r.stderr
    ids = [line.split("\t")[0] for line in r.stdout.splitlines()]
    assert ids == [t.id for t in TASKS if t.split == "heldout"]

    task = get_task("gui", "gui-signup-ada")
    first = _cli("play", "--setting", "gui", "--task", task.id, stdin="")
    assert first.returncode == 0 and "reward: -1.000" in first.stdout  # nothing done
    # the ids a user reads off the printed page
    lines = first.stdout.splitlines()

    def node(prefix):
        return next(ln.split("]")[0].strip().lstrip("[") for ln in lines if ln.strip().split("] ", 1)[-1].startswith(prefix))

    name, email = node('textbox "Full name'), node('textbox "Email')
    script = "\n---\n".join([f'type [{name}] "Ada Lovelace"', f'type [{email}] "ada@example.org"',
                             f'select [{node("combobox")}] "Pro"', f'click [{node("checkbox")}]',
                             f'click [{node("button")}]', "done"])
    r = _cli("play", "--setting", "gui", "--task", task.id, "--run-dir", str(tmp_path), stdin=script)
    assert r.returncode == 0, r.stderr
    assert "Welcome, Ada Lovelace!" in r.stdout and r.stdout.rstrip().endswith("reward: 1.000")
    assert "check 2: PASS  the agent said done" in r.stdout
    assert len(list((tmp_path / "screenshots").glob("*/step-*.png"))) == 6


def test_env_play_names_a_missing_browser(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path)}  # no chromium on PATH
    r = subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", "play", "--setting", "gui", "--task",
                        "gui-signup-ada"], input="", capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "no Chromium found on PATH" in r.stderr and "make browser" in r.stderr
    assert "Traceback" not in r.stderr
