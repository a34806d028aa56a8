"""Training is consistent with the temperature each turn was sampled at.

The engine records a sampled token's log-prob under the sampling distribution, ``log_softmax(logits
/ T)`` (raw logits for greedy). The trainer scores a recorded turn, its fresh group members and the
teacher at that same temperature, so a turn's first PPO ratio is 1 and the teacher's gap over an
unchanged prompt is 0, whatever temperature served it (at T = 0.3, scoring at T = 1 instead puts
the log-ratio of the tiny model's tokens nats away from 0).
"""

from __future__ import annotations

import math

import pytest
import torch

from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.learning import teacher
from slime_ext.logprobs import (
    output_logits,
    scoring_temperature,
    teacher_forced_logits,
    teacher_forced_logprobs,
)
from slime_ext.models import resolve_model
from slime_ext.store import Store
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from slime_ext.types import Turn
from tests.test_slime_rollout import FEEDBACK, sglang_source  # noqa: F401  (a fixture: the live rollout on tiny)


def test_scoring_temperature_is_the_sampling_one_and_greedy_is_raw_logits():
    assert scoring_temperature(0.3) == 0.3 and scoring_temperature(1.5) == 1.5
    assert scoring_temperature(0.0) == 1.0 and scoring_temperature(None) == 1.0  # greedy, unknown
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="sampling temperature"):
            scoring_temperature(bad)
    hidden, head = torch.randn(3, 8), torch.randn(11, 8)
    assert torch.allclose(output_logits(hidden, head, 0.5), (hidden @ head.T) / 0.5)


def test_teacher_forced_logprobs_at_t_are_the_tempered_distributions():
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    ids, start = [5, 6, 7, 8, 9, 10], 3
    expected = torch.log_softmax(teacher_forced_logits(model, ids, start) / 0.3, -1).gather(
        1, torch.tensor(ids[start:])[:, None])[:, 0]
    assert torch.allclose(teacher_forced_logprobs(model, ids, start, 0.3), expected, atol=1e-6)


async def sampled_turn(store: Store, engine: LocalEngine, sid: str, prompt: list[int], temperature: float) -> Turn:
    """One turn sampled by the engine at ``temperature`` and stored like the server stores it,
    judged -1 with a hint."""
    out = [t async for t in engine.generate(prompt, SamplingParams(temperature=temperature, max_new_tokens=8, seed=3))]
    turn = Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}", prompt_token_ids=prompt,
                response_token_ids=[t.token_id for t in out], response_logprobs=[t.logprob for t in out],
                response_text="x", policy_version=0, policy_version_end=0, finish_reason="length",
                messages=[{"role": "user", "content": "hi"}], sampling={"temperature": temperature, "top_p": 1.0},
                reply_key=sid)
    store.create_session(sid, None, "inferred")
    store.insert_turn(turn)
    store.set_next_state(sid, 0, "No, answer in French.", "user")
    store.record_verdict(sid, 0, -1, [(-1, "test")], hint="Answer in French.", hint_votes=[(1, "t")])
    return turn


@pytest.mark.parametrize("temperature", [0.3, 0.0], ids=["t0.3", "greedy"])
async def test_first_step_ratio_is_one_and_an_unhinted_teachers_gap_is_zero_at_the_sampled_temperature(
        tmp_path, monkeypatch, temperature):
    """A turn sampled at 0.3 (or greedily) trains with ratio 1 against its recorded log-probs in its
    first step (float32: |log ratio| < 1e-3), its group's fresh members (drawn at another temperature,
    0.5) too, and a teacher shown exactly the student's prompt scores it like the student (gap 0)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer

    model_dir = resolve_model("tiny")
    engine = LocalEngine(model_dir, dtype="float32", threads=1, prefix_cache_tokens=0)
    store = Store(tmp_path / "run")
    try:
        turn = await sampled_turn(store, engine, "s", [1, 40, 41, 42, 43, 44, 2, 1, 50], temperature)
    finally:
        await engine.close()
    monkeypatch.setattr(teacher, "teacher_prompt_ids", lambda *a, **k: list(turn.prompt_token_ids))  # "unhinted"
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    cfg = TrainerConfig(method="combine", batch_size=1, lora_rank=4, lora_alpha=8, group_size=3,
                        group_temperature=0.5, group_max_new_tokens=4, teacher_check=False)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg,
                            renderer=PromptRenderer(AutoTokenizer.from_pretrained(model_dir)))
    m = trainer.step()
    assert m is not None and m["turns"] == 1 and m["fresh_samples"] == 2
    assert abs(math.log(m["ratio_min"])) < 1e-3 and abs(math.log(m["ratio_max"])) < 1e-3, m
    assert abs(m["teacher_gap_mean"]) < 1e-3, m
    (stored,) = [t for s in store_records(tmp_path / "run") for t in s["turns"]]
    gaps = [t - r for t, r in zip(stored["teacher_logprobs"], turn.response_logprobs)]
    assert len(gaps) == len(turn.response_token_ids) and max(map(abs, gaps)) < 1e-3


def store_records(run_dir):
    from slime_ext.store import export_records

    return export_records(run_dir)["sessions"]


# ---------------------------------------------------------------- Slime: one --rollout-temperature for every sample
def test_slime_settings_whose_serving_temperature_is_not_the_rollout_temperature_are_refused():
    from slime_ext.config import ServeConfig
    from slime_ext.hooks.rollout import rollout_temperature_error

    # the preference memory (on by default) needs temperature 1 whatever the method: below, without it
    binary, combine = ServeConfig(method="binary", memory="off"), ServeConfig(method="combine", memory="off")
    why = rollout_temperature_error(ServeConfig(method="binary"), 0.6, 0.6)
    assert "memory" in why and "temperature 1" in why
    assert rollout_temperature_error(binary, 0.6, 0.6) is None and rollout_temperature_error(combine, 1.0, 1.0) is None
    assert rollout_temperature_error(binary, 0.0, 1.0) is None  # greedy: raw logits, i.e. temperature 1
    why = rollout_temperature_error(binary, 0.6, 1.0)
    assert "--rollout-temperature 1" in why and "sampled at 0.6" in why and "set --rollout-temperature 0.6" in why
    why = rollout_temperature_error(combine, 0.6, 0.6)
    assert "teacher" in why and "temperature 1" in why


def talk(port: int, i: int, **sampling) -> None:
    """One conversation: a question, the reply, and FEEDBACK[i % 4] as the user's next message."""
    import json
    import urllib.request

    def chat(messages, seed):
        body = json.dumps({"model": "m", "messages": messages, "max_tokens": 6, "seed": seed, **sampling}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.loads(r.read())["choices"][0]["message"]["content"]

    u = {"role": "user", "content": f"Question {i}?"}
    reply = chat([u], i)
    chat([u, {"role": "assistant", "content": reply}, {"role": "user", "content": FEEDBACK[i % 4]}], 50 + i)


def test_slime_rollout_drops_a_turn_sampled_at_another_temperature_and_tags_the_others(sglang_source):  # noqa: F811
    """The live rollout (SGLang client and the SGLang-protocol test server on tiny) at Slime's default
    --rollout-temperature 1: a turn whose request named temperature 0.3 cannot be scored right, so it
    is dropped with the reason; the others are handed out with their temperature in the metadata."""
    src = sglang_source("binary")
    talk(src.port, 0, temperature=0.3)
    for i in (1, 2, 3):
        talk(src.port, i)
    samples = [group[0] for group in src.take(3, 0, timeout_s=60)]
    assert [s.metadata["temperature"] for s in samples] == [1.0, 1.0, 1.0]
    turns = {t["next_state"]: t for s in store_records(src.store.run_dir) for t in s["turns"] if t["next_state"]}
    dropped = turns[FEEDBACK[0]]
    assert dropped["sampling"]["temperature"] == 0.3 and dropped["trained_in_version"] is None
    assert dropped["dropped"] == "sampled at temperature 0.3: Slime scores every sample at --rollout-temperature 1"
