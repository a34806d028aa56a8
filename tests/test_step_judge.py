"""The step-wise judge switched on where users run agents: `openclaw-rl env eval/train --step-judge` (flags parsed
and refused as documented, the judge reaching every episode, its scores in the summary and metrics.jsonl, an
openai judge's key sent but never printed) and the Slime generate hook's `openclaw_rl_env:` keys; on the tiny
model with the real engine, envs and judges."""

import asyncio
import json
import subprocess
import sys
import threading
import types
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from transformers import AutoTokenizer

from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
from slime_ext.cli import build_parser, main
from slime_ext.engines import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.envs import list_tasks, make_env
from slime_ext.envs.agent_loop import ChatSegments, combine_rewards, make_step_judge, run_episode, step_judge
from slime_ext.envs.cli import _settings
from slime_ext.hooks.generate import EnvSettings
from slime_ext.judge import heuristic_vote
from slime_ext.models import resolve_model

KEY = "sk-step-judge-secret-1234"


@pytest.fixture(scope="module")
def model_dir():
    return resolve_model("tiny")


def _cli(*args, env=None, timeout=300):
    import os

    return subprocess.run([sys.executable, "-m", "slime_ext.cli", "env", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


# ----------------------------------------------------------------------------- (a) the flags
@pytest.mark.parametrize("command", ["eval", "train"])
def test_flags_parse_with_their_defaults(command):
    base = ["env", command, "--setting", "terminal"] + (["--out", "o"] if command == "train" else [])
    args = build_parser().parse_args(base)
    assert (args.step_judge, args.step_judge_url, args.step_judge_model, args.step_weight) == ("off", None, None, None)
    off = _settings(args)
    assert off.step_judge == "off" and off.weight == 0.0 and not off.judged
    on = _settings(build_parser().parse_args(base + ["--step-judge", "heuristic"]))
    assert on.step_judge == "heuristic" and on.weight == 0.5  # the default weight with a judge
    weighted = _settings(build_parser().parse_args(base + ["--step-judge", "heuristic", "--step-weight", "0.2"]))
    assert weighted.weight == 0.2
    openai = _settings(build_parser().parse_args(base + ["--step-judge", "openai", "--step-judge-url", "http://h:1",
                                                         "--step-judge-model", "judge-m", "--step-weight", "1"]))
    assert (openai.step_judge, openai.step_judge_url, openai.step_judge_model, openai.weight) == \
        ("openai", "http://h:1", "judge-m", 1.0)
    zero = _settings(build_parser().parse_args(base + ["--step-judge", "off", "--step-weight", "0"]))
    assert zero.weight == 0.0  # an explicit 0 without a judge is no contradiction
    with pytest.raises(SystemExit):
        build_parser().parse_args(base + ["--step-judge", "self"])


def test_help_shows_the_defaults_in_brackets(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["env", "eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--step-judge {off,heuristic,openai}" in text and "[off]" in text
    assert "[0.5 with a step judge, 0 without]" in text and "$OPENCLAW_RL_JUDGE_KEY" in text


@pytest.mark.parametrize("command", ["eval", "train"])
@pytest.mark.parametrize("flags, message", [
    (["--step-weight", "0.3"], "--step-weight 0.3 needs a step judge: set --step-judge heuristic or openai"),
    (["--step-judge", "off", "--step-weight", "1"], "--step-weight 1 needs a step judge"),
    (["--step-judge", "heuristic", "--step-weight", "1.5"], "--step-weight must be a number in [0, 1], got 1.5"),
    (["--step-judge", "heuristic", "--step-weight", "-0.1"], "--step-weight must be a number in [0, 1]"),
    (["--step-judge", "heuristic", "--step-weight", "nan"], "--step-weight must be a number in [0, 1]"),
    (["--step-judge", "openai"], "--step-judge openai needs --step-judge-url and --step-judge-model"),
    (["--step-judge", "openai", "--step-judge-url", "http://h:1"], "--step-judge openai needs --step-judge-model"),
    (["--step-judge", "heuristic", "--step-judge-url", "http://h:1"],
     "--step-judge-url goes with --step-judge openai, not heuristic"),
])
def test_contradicting_flags_are_refused_before_anything_loads(command, flags, message, capsys):
    argv = ["env", command, "--setting", "terminal", "--model", "no-such-model"] + flags
    argv += ["--out", "never-written"] if command == "train" else []
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert "no-such-model" not in err and "sandbox" not in err  # refused before the sandbox probe and the model


# ----------------------------------------------------------------------------- (b) episodes
def _play(model_dir, judge, weight):
    tok = AutoTokenizer.from_pretrained(model_dir)
    task = list_tasks("toolcall", "train")[0]  # observations are tool results: the heuristic scores them +-1

    async def go():
        engine = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
        try:
            env = make_env("toolcall", max_turns=3)
            sampling = SamplingParams(max_new_tokens=8, seed=7, stop_token_ids=stop_token_ids(tok))
            return await run_episode(engine, tok, ChatSegments(PromptRenderer(tok), env.tools), env, task, sampling,
                                     max_turns=3, judge=judge, step_weight=weight), env.observation_role
        finally:
            await engine.close()

    return asyncio.run(go())


def test_an_episode_with_the_heuristic_step_judge_scores_every_step_into_the_reward(model_dir):
    ep, role = _play(model_dir, step_judge(make_step_judge("heuristic")), 0.5)
    scores = [s.score for s in ep.steps]
    assert ep.steps and None not in scores
    first = _first_message(list_tasks("toolcall", "train")[0])
    for st in ep.steps:  # the heuristic's reading of the step's next state (a tool result), the task as request
        assert st.score == float(heuristic_vote(st.next_state, role, first))
    assert ep.reward == pytest.approx(combine_rewards(ep.outcome, scores, 0.5))
    assert ep.reward == pytest.approx(max(-1.0, min(1.0, ep.outcome + 0.5 * sum(scores) / len(scores))))


def _first_message(task) -> str:
    env = make_env("toolcall", max_turns=1)
    try:
        return env.reset(task)
    finally:
        env.close()


def test_an_episode_without_a_step_judge_keeps_the_outcome(model_dir):
    assert make_step_judge("off") is None
    ep, _ = _play(model_dir, None, 0.0)
    assert ep.steps and all(s.score is None for s in ep.steps)
    assert ep.reward == ep.outcome


def test_env_eval_with_a_step_judge_reports_step_scores(tmp_path):
    common = ["--setting", "toolcall", "--model", "tiny", "--limit", "2", "--max-turns", "2", "--max-new-tokens", "8",
              "--threads", "1"]
    r = _cli("eval", *common, "--step-judge", "heuristic")
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["step_judge"] == "heuristic" and out["step_weight"] == 0.5
    assert out["mean_step_score"] is not None and -1.0 <= out["mean_step_score"] <= 1.0
    assert out["mean_outcome"] is not None and "step score" in r.stderr  # per-episode progress says it too
    if all(-1.0 < out["mean_outcome"] + 0.5 * s < 1.0 for s in (-1.0, 1.0)):  # nothing clipped: the mean is linear
        assert out["mean_reward"] == pytest.approx(out["mean_outcome"] + 0.5 * out["mean_step_score"], abs=1e-3)
    off = _cli("eval", *common)
    assert off.returncode == 0, off.stderr[-2000:]
    plain = json.loads(off.stdout)
    assert "mean_step_score" not in plain and "step_judge" not in plain and "step score" not in off.stderr


def test_env_train_with_a_step_judge_writes_the_mean_step_score_to_the_metrics(tmp_path):
    out = tmp_path / "run"
    r = _cli("train", "--setting", "toolcall", "--model", "tiny", "--steps", "2", "--episodes", "2", "--max-turns",
             "2", "--max-new-tokens", "8", "--lora-rank", "4", "--baseline", "none", "--threads", "1",
             "--step-judge", "heuristic", "--step-weight", "0.25", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert row["mean_step_score"] is not None and -1.0 <= row["mean_step_score"] <= 1.0
        assert row["trained_tokens"] > 0
    assert "mean step score" in r.stderr


class _JudgeEndpoint(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat-completions endpoint whose judge always answers +1; it records each request."""

    seen: list = []

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body["model"]))
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": "good step \\boxed{1}"}}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def judge_endpoint():
    _JudgeEndpoint.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _JudgeEndpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _JudgeEndpoint.seen
    finally:
        server.shutdown()
        server.server_close()


def test_env_eval_with_an_openai_step_judge_sends_the_key_and_never_prints_it(judge_endpoint):
    url, seen = judge_endpoint
    r = _cli("eval", "--setting", "toolcall", "--model", "tiny", "--limit", "1", "--max-turns", "2",
             "--max-new-tokens", "8", "--threads", "1", "--step-judge", "openai", "--step-judge-url", url,
             "--step-judge-model", "judge-m", env={"OPENCLAW_RL_JUDGE_KEY": KEY})
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["mean_step_score"] == 1.0  # every vote said +1
    assert seen and all(s == ("/v1/chat/completions", f"Bearer {KEY}", "judge-m") for s in seen)
    assert len(seen) % 3 == 0  # a model judge's 3 votes per step
    assert KEY not in r.stdout and KEY not in r.stderr


# ----------------------------------------------------------------------------- (c) the Slime hook's keys
def _env_settings(**keys):
    return EnvSettings.from_args(types.SimpleNamespace(openclaw_rl_env=keys))


def test_slime_settings_accept_the_step_judge_keys():
    assert (_env_settings().step_judge, _env_settings().step_weight) == ("off", 0.0)
    h = _env_settings(step_judge="heuristic")
    assert (h.step_judge, h.step_weight) == ("heuristic", 0.5)
    assert _env_settings(step_judge="heuristic", step_weight=0.2).step_weight == 0.2
    assert _env_settings(step_judge="heuristic", step_weight=1).step_weight == 1.0
    o = _env_settings(step_judge="openai", step_judge_url="http://h:1", step_judge_model="m", step_weight=0.3)
    assert (o.step_judge, o.step_judge_url, o.step_judge_model, o.step_weight) == ("openai", "http://h:1", "m", 0.3)
    assert _env_settings(step_judge=False).step_judge == "off"  # YAML reads an unquoted `off` as false
    assert _env_settings(step_judge="off", step_weight=0).step_weight == 0.0


@pytest.mark.parametrize("keys, message", [
    ({"step_weight": 0.3}, "step_weight 0.3 needs a step judge: set step_judge heuristic or openai"),
    ({"step_judge": "self"}, "step_judge must be one of off, heuristic, openai, got 'self'"),
    ({"step_judge": "heuristic", "step_weight": 1.5}, "step_weight must be a number in [0, 1], got 1.5"),
    ({"step_judge": "heuristic", "step_weight": "0.5"}, "step_weight must be a number in [0, 1]"),
    ({"step_judge": "heuristic", "step_weight": True}, "step_weight must be a number in [0, 1]"),
    ({"step_judge": "openai", "step_judge_url": "http://h:1"}, "step_judge openai needs step_judge_model"),
    ({"step_judge": "openai"}, "step_judge openai needs step_judge_url and step_judge_model"),
    ({"step_judge": "heuristic", "step_judge_model": "m"}, "step_judge_model goes with step_judge openai"),
    ({"step_judge_key": "k"}, "unknown keys ['step_judge_key']"),  # the key is never a settings key
])
def test_slime_settings_refuse_bad_step_judge_keys(keys, message):
    with pytest.raises(ValueError) as e:
        _env_settings(**keys)
    assert message in str(e.value) and "openclaw_rl_env" in str(e.value)


@pytest.fixture(scope="module")
def router(model_dir):
    from _sglang_server import serving_in_thread

    with serving_in_thread(model_dir) as fake:
        host, port = fake.url.split("//")[1].split(":")
        yield types.SimpleNamespace(ip=host, port=int(port), model_dir=str(model_dir))


@pytest.mark.parametrize("samples", ["episode", "step"])
def test_the_generate_hook_plays_with_the_step_judge_its_settings_name(router, samples):
    from slime_ext.hooks.generate import generate
    from slime_ext.types import Sample

    task = list_tasks("toolcall", "train")[0]

    def run(**env):
        args = types.SimpleNamespace(sglang_router_ip=router.ip, sglang_router_port=router.port,
                                     hf_checkpoint=router.model_dir,
                                     openclaw_rl_env={"max_turns": 2, "samples": samples, **env})
        sample = Sample(index=3, prompt="p", metadata={"setting": "toolcall", "task_id": task.id})
        out = asyncio.run(generate(args, sample, {"temperature": 1.0, "max_new_tokens": 6, "sampling_seed": 11}))
        return out if isinstance(out, list) else [out]

    judged = run(step_judge="heuristic", step_weight=0.5)
    assert all(s.status != Sample.Status.FAILED for s in judged)
    if samples == "episode":
        (s,) = judged
        assert s.metadata["step_score"] is not None
        assert s.reward == pytest.approx(combine_rewards(s.metadata["outcome"], [s.metadata["step_score"]], 0.5))
    else:
        scores = [s.metadata["step_score"] for s in judged]
        assert None not in scores
        reward = combine_rewards(judged[0].metadata["outcome"], scores, 0.5)
        assert all(s.reward == pytest.approx(reward) for s in judged)
    plain = run()
    assert all(s.reward == s.metadata["outcome"] for s in plain)
    assert all(s.metadata.get("step_score") is None for s in plain)


def test_through_the_generate_hook_the_step_judge_scores_each_step_and_moves_the_reward_by_its_weight(router):
    """One episode (one seed: the same tokens) played with ``step_judge`` off, ``heuristic`` at the default weight
    (0.5) and at 0.25, and with one sample per step: every step gets a heuristic vote, the episode's
    ``step_score`` is their mean, and the reward moves off the outcome by weight x mean score, as Slime trains it."""
    from slime_ext.hooks.generate import generate
    from slime_ext.types import Sample

    task = list_tasks("toolcall", "train")[0]

    def run(samples="episode", **env):
        args = types.SimpleNamespace(sglang_router_ip=router.ip, sglang_router_port=router.port,
                                     hf_checkpoint=router.model_dir,
                                     openclaw_rl_env={"max_turns": 2, "samples": samples, **env})
        sample = Sample(index=3, prompt="p", metadata={"setting": "toolcall", "task_id": task.id})
        out = asyncio.run(generate(args, sample, {"temperature": 1.0, "max_new_tokens": 6, "sampling_seed": 11}))
        return out if isinstance(out, list) else [out]

    (plain,), (half,), (quarter,) = run(), run(step_judge="heuristic"), run(step_judge="heuristic", step_weight=0.25)
    steps = run("step", step_judge="heuristic")
    assert plain.tokens == half.tokens == quarter.tokens  # one episode, rewarded three ways
    assert steps[-1].tokens == half.tokens[:len(steps[-1].tokens)] and len(steps) == half.metadata["steps"]
    votes = [s.metadata["step_score"] for s in steps]
    assert all(v in (-1.0, 0.0, 1.0) for v in votes)  # the heuristic's one vote per step
    mean = sum(votes) / len(votes)
    assert half.metadata["step_score"] == pytest.approx(mean) == quarter.metadata["step_score"]
    assert plain.reward == plain.metadata["outcome"] and plain.metadata.get("step_score") is None
    outcome = plain.metadata["outcome"]
    assert half.reward == pytest.approx(max(-1.0, min(1.0, outcome + 0.5 * mean)))
    assert quarter.reward == pytest.approx(max(-1.0, min(1.0, outcome + 0.25 * mean)))
    # this episode's steps are judged (not neutral) and its reward is not clipped back: the judge changed it
    assert mean != 0 and len({plain.reward, half.reward, quarter.reward}) == 3
