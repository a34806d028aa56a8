"""User code loaded by name (``slime_ext/plugins.py``): a judge backend from a folder outside the
project, by ``module:attr`` or by an installed package's entry point, and the errors when it cannot be
loaded. The end-to-end test serves with an out-of-tree judge and checks its verdicts are the ones
stored."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from slime_ext.config import ServeConfig
from slime_ext.plugins import PluginError, entry_point_names, load_object, split_spec

JUDGES = '''
"""An out-of-tree judge: it likes every answer, whatever the user says (the heuristic would not)."""

calls = []


class Contrarian:
    name = "contrarian"
    default_votes = 2

    def __init__(self, cfg):
        calls.append(cfg.judge)

    async def vote(self, messages, *, seed, inputs=None):
        return "I liked it. \\\\boxed{1}"


def make_nothing(cfg):
    return object()


def explode(cfg):
    raise RuntimeError("no endpoint configured")
'''


@pytest.fixture
def judge_folder(tmp_path, monkeypatch):
    """A folder holding ``my_judges.py``, on ``sys.path`` (as PYTHONPATH puts it)."""
    folder = tmp_path / "plugins"
    folder.mkdir()
    (folder / "my_judges.py").write_text(JUDGES)
    (folder / "broken_judges.py").write_text("import not_a_module_anywhere\n")
    (folder / "raising_judges.py").write_text("raise ImportError('needs a GPU')\n")
    monkeypatch.syspath_prepend(str(folder))
    return folder


def test_a_spec_is_module_and_attribute_in_either_form():
    assert split_spec("my_pkg.judges:Mine") == ("my_pkg.judges", "Mine")
    assert split_spec("my_pkg.judges:Mine.make") == ("my_pkg.judges", "Mine.make")
    assert split_spec("my_pkg.judges.Mine") == ("my_pkg.judges", "Mine")  # Slime's load_function form
    for bad in ("my_pkg:", ":Mine", "."):
        with pytest.raises(PluginError, match="expected module:attribute"):
            split_spec(bad)


def test_loads_a_class_from_a_folder_on_the_path(judge_folder):
    cls = load_object("my_judges:Contrarian", "judge")
    assert cls.__name__ == "Contrarian" and cls.__module__ == "my_judges"
    assert load_object("my_judges.Contrarian", "judge") is cls


@pytest.mark.parametrize("spec, message", [
    ("nowhere_judges:Mine", "no module named 'nowhere_judges' on the Python path"),
    ("my_judges:Missing", "my_judges has no attribute 'Missing'"),
    ("broken_judges:Mine", "importing broken_judges failed: ModuleNotFoundError: No module named 'not_a_module_anywhere'"),
    ("raising_judges:Mine", "importing raising_judges failed: ImportError: needs a GPU"),
])
def test_what_cannot_be_loaded_is_named_with_why(judge_folder, spec, message):
    with pytest.raises(PluginError, match="judge") as e:
        load_object(spec, "judge")
    assert message in str(e.value) and spec in str(e.value)


def test_an_installed_package_registers_by_entry_point(judge_folder):
    dist = judge_folder / "my_judges_pkg-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: my-judges-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[openclaw_rl.judges]\ncontrarian = my_judges:Contrarian\n")
    assert "contrarian" in entry_point_names("judge")
    assert load_object("contrarian", "judge").__name__ == "Contrarian"
    assert ServeConfig(judge="contrarian").validated().judge == "contrarian"
    with pytest.raises(PluginError, match="no installed package registers it in the entry-point group openclaw_rl.judges"):
        load_object("someone_else", "judge")


def test_the_config_refuses_a_judge_it_cannot_load_by_name(judge_folder):
    with pytest.raises(ValueError, match="expected heuristic, self, openai, off, a module:attribute path"):
        ServeConfig(judge="heuristc").validated()  # a typo of a built-in
    with pytest.raises(ValueError, match="no module named 'nowhere'"):
        ServeConfig(judge="nowhere:Judge").validated()
    assert ServeConfig(judge="my_judges:Contrarian").validated().judge == "my_judges:Contrarian"


def test_serve_with_an_unloadable_judge_exits_2_naming_it(tmp_path):
    out = subprocess.run([sys.executable, "-m", "slime_ext.cli", "serve", "--model", "tiny", "--run-dir",
                          str(tmp_path / "run"), "--judge", "nowhere_judges:Mine"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2
    assert "judge 'nowhere_judges:Mine': no module named 'nowhere_judges'" in out.stderr
    assert "Traceback" not in out.stderr


def test_serve_judges_with_an_out_of_tree_backend(make_server, judge_folder):
    srv = make_server(extra=["--judge", "my_judges:Contrarian"], env={"PYTHONPATH": str(judge_folder)})
    u = {"role": "user", "content": "Name a colour."}
    reply = srv.chat([u], seed=1)["choices"][0]["message"]["content"]
    srv.chat([u, {"role": "assistant", "content": reply}, {"role": "user", "content": "No, that's wrong. Try again."}])
    deadline = time.time() + 60
    while True:
        judged = [t for s in srv.records()["sessions"] for t in s["turns"] if t["verdict"] is not None]
        if judged:
            break
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.3)
    # the heuristic reads "No, that's wrong" as -1; this judge's two votes (its default_votes) say +1
    assert judged[0]["verdict"] == 1 and judged[0]["votes"] == [1, 1]


@pytest.mark.parametrize("spec, message", [
    ("my_judges:make_nothing", "made a object, which has no vote(messages, *, seed, inputs=None) method"),
    ("my_judges:explode", "making the backend failed: RuntimeError: no endpoint configured"),
])
def test_a_judge_that_makes_no_backend_is_named(judge_folder, spec, message):
    from slime_ext.serve import user_judge_backend

    with pytest.raises(PluginError, match="judge") as e:
        user_judge_backend(ServeConfig(judge=spec))
    assert message in str(e.value)


def test_the_examples_judge_is_a_working_template():
    """docs/extending.md's judge, shipped under examples/, is loadable and votes."""
    import asyncio
    from pathlib import Path

    folder = Path(__file__).resolve().parents[1] / "examples" / "custom_judge"
    sys.path.insert(0, str(folder))
    try:
        backend = load_object("keyword_judge:KeywordJudge", "judge")(ServeConfig())
        from slime_ext.judge import JudgeInput

        def vote(next_state):
            turn = JudgeInput(request_messages=[{"role": "user", "content": "hi"}], response_text="hello",
                              response_tool_calls=None, next_state=next_state, next_state_role="user")
            return asyncio.run(backend.vote([], seed=0, inputs=turn))

        assert vote("perfect, thanks").endswith("\\boxed{1}") and vote("this is wrong").endswith("\\boxed{-1}")
        assert vote("ok").endswith("\\boxed{0}")
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("keyword_judge", None)


def test_hints_for_a_reward_only_backend_come_from_the_heuristic_reading(judge_folder):
    from slime_ext.judge import HintJudge, Judge
    from slime_ext.judge.hints import HeuristicHintBackend

    reward_only = type("RewardOnly", (), {"task": "judge", "vote": lambda self, m, *, seed, inputs=None: None})()
    assert isinstance(HintJudge.from_judge(Judge(reward_only)).backend, HeuristicHintBackend)
    both = load_object("my_judges:Contrarian", "judge")(ServeConfig())  # no task: it answers the hint prompt too
    assert HintJudge.from_judge(Judge(both)).backend is both
    own = type("OwnHints", (), {"vote": None, "hint_backend": both})()
    assert HintJudge.from_judge(Judge(own)).backend is both
