"""A setting of the user's own, from a folder outside ``slime_ext`` (docs/extending.md): every ``env`` command,
``$OPENCLAW_RL_SETTINGS``, Slime's generate hook and the embedded ``env train`` (with a policy loss of the
user's) find it; what cannot load is named with why. (An out-of-tree judge with ``serve``: tests/test_plugins.py.)"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "echo_setting"


@pytest.fixture(scope="module")
def setting_dir(tmp_path_factory) -> Path:
    """The example setting copied to a folder of the user's, with a file beside it that must not be imported."""
    d = tmp_path_factory.mktemp("user") / "echo-rl"
    shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("__pycache__"))
    (d / "launch_notes.py").write_text("raise RuntimeError('a helper script: never imported by the loader')\n")
    return d


def cli(*args: str, stdin: str = "", env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``openclaw-rl`` as a user runs it, from another directory."""
    full_env = {k: v for k, v in os.environ.items() if k != "OPENCLAW_RL_SETTINGS"}
    full_env.update({"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})})
    return subprocess.run([sys.executable, "-m", "slime_ext.cli", *args], input=stdin, capture_output=True,
                          text=True, env=full_env, cwd=cwd or ROOT.parent, timeout=600)


def test_env_list_play_and_export_with_a_setting_path(setting_dir, tmp_path):
    r = cli("env", "list", "--setting", "echo", "--setting-path", str(setting_dir))
    assert r.returncode == 0, r.stderr
    assert [line.split("\t")[:2] for line in r.stdout.splitlines()] == [
        ["echo-apple", "train"], ["echo-river", "train"], ["echo-stone", "heldout"]]
    play = cli("env", "play", "--setting", "echo", "--task", "echo-river", "--setting-path", str(setting_dir),
               stdin="a lake\n---\nthe river\n")
    assert play.returncode == 0, play.stderr
    assert "Say river." in play.stdout and play.stdout.rstrip().endswith("reward: 1.000")
    out = tmp_path / "train.jsonl"
    ex = cli("env", "export", "--setting", "echo", "--split", "train", "--out", str(out),
             "--setting-path", str(setting_dir / "echo_setting.py"))  # a file names it too
    assert ex.returncode == 0, ex.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["metadata"] for r in rows] == [{"setting": "echo", "task_id": "echo-apple"},
                                             {"setting": "echo", "task_id": "echo-river"}]


def test_the_environment_variable_names_settings_for_every_process(setting_dir):
    r = cli("env", "list", "--setting", "echo", env={"OPENCLAW_RL_SETTINGS": str(setting_dir)})
    assert r.returncode == 0 and "echo-stone" in r.stdout, r.stderr
    unknown = cli("env", "list", "--setting", "echo")
    assert unknown.returncode == 2 and "unknown setting 'echo'" in unknown.stderr and "--setting-path" in unknown.stderr


def test_embedded_eval_and_train_run_the_users_setting(setting_dir, tmp_path):
    common = ["--setting", "echo", "--setting-path", str(setting_dir), "--model", "tiny", "--max-turns", "1",
              "--max-new-tokens", "4", "--concurrency", "1", "--threads", "1"]
    ev = cli("env", "eval", *common, "--split", "heldout")
    assert ev.returncode == 0, ev.stderr
    summary = json.loads(ev.stdout)
    assert summary["episodes"] == 1 and list(summary["per_task"]) == ["echo-stone"]
    # with a policy loss of the user's too, from another folder on PYTHONPATH: it records each call
    losses = tmp_path / "losses"
    losses.mkdir()
    (losses / "marking_loss.py").write_text(
        '"""Marks each call, then the built-in loss."""\nimport os\n\n'
        "from slime_ext.algorithms.ppo import policy_loss\n\n\n"
        "def loss(*args, **kwargs):\n"
        "    with open(os.environ['LOSS_MARKS'], 'a') as f:\n"
        "        f.write('called\\n')\n"
        "    return policy_loss(*args, **kwargs)\n")
    marks = tmp_path / "marks.txt"
    tr = cli("env", "train", *common, "--out", str(tmp_path / "out"), "--steps", "1", "--episodes", "2",
             "--baseline", "none", "--check", "0", "--policy-loss", "marking_loss:loss",
             env={"PYTHONPATH": f"{ROOT}{os.pathsep}{losses}", "LOSS_MARKS": str(marks)})
    assert tr.returncode == 0, tr.stderr
    metrics = [json.loads(line) for line in (tmp_path / "out" / "metrics.jsonl").read_text().splitlines()]
    assert len(metrics) == 1 and metrics[0]["episodes"] == 2
    assert marks.read_text().split() == ["called"]  # both short episodes in one micro-batch


@pytest.mark.parametrize("content, message", [
    ("x = 1\n", "no .py file in that folder calls register_setting"),
    ("from slime_ext.envs import register_setting\nraise RuntimeError('boom')\n",
     "importing .*bad_setting.py failed: RuntimeError: boom"),
    ("# register_setting is only mentioned here\n", "registered no setting"),
])
def test_what_cannot_load_is_named_with_why(tmp_path, content, message):
    folder = tmp_path / "bad-rl"
    folder.mkdir()
    (folder / "bad_setting.py").write_text(content)
    r = cli("env", "list", "--setting", "bad", "--setting-path", str(folder))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert re.search(message, r.stderr), r.stderr
    missing = cli("env", "list", "--setting", "bad", "--setting-path", str(tmp_path / "nowhere"))
    assert missing.returncode == 2 and "no such folder or .py file" in missing.stderr
    module = cli("env", "list", "--setting", "bad", "--setting-path", "my_pkg.nowhere")
    assert module.returncode == 2 and "no module named 'my_pkg'" in module.stderr


def test_slimes_generate_hook_plays_the_users_setting(setting_dir):
    """Slime's rollout worker: the plugin config's ``setting_paths`` loads the setting; one episode through an
    SGLang-protocol server backed by the tiny model."""
    from _sglang_server import serving_in_thread

    from slime_ext.hooks.generate import generate
    from slime_ext.models import resolve_model
    from slime_ext.types import Sample

    model_dir = resolve_model("tiny")
    with serving_in_thread(model_dir) as fake:
        host, port = fake.url.split("//")[1].split(":")
        args = types.SimpleNamespace(sglang_router_ip=host, sglang_router_port=int(port), hf_checkpoint=str(model_dir),
                                     openclaw_rl_env={"max_turns": 1, "setting_paths": [str(setting_dir)]})
        sample = Sample(index=0, prompt="p", metadata={"setting": "echo", "task_id": "echo-apple"})
        out = asyncio.run(generate(args, sample, {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 4}))
        assert out.status in (Sample.Status.COMPLETED, Sample.Status.TRUNCATED), out.metadata
        assert out.reward in (-1.0, 1.0) and out.metadata["task_id"] == "echo-apple"
        assert out.response_length == len(out.loss_mask) > 0
