"""The embedded trainer re-scores pi_old itself (issue 29, item 1): the engine may serve in bfloat16 while the
float32 trainer learns, so a turn's recorded log-probs are not the trainer's. Each turn's pi_old is the policy's
own, and its verdict term carries the truncated importance weight min(pi_old / recorded, 2)."""

import asyncio
import math

import pytest
import torch

from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.learning.example import Example
from slime_ext.learning.memory import WEIGHT_CAP
from slime_ext.learning.select import select
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.models import resolve_model
from slime_ext.store import Store
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from slime_ext.types import Turn
from tests.test_trainer_loop import tiny_model_and_renderer

DRIFT = [0.05, -0.04, 0.9, -0.03]  # per-token gaps of the recorded log-probs (bf16's are ~3e-2; 0.9 hits the cap)


def record(store, sid, prompt, response, logprobs, verdict, version=0):
    store.create_session(sid, None, "inferred")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}",
                           prompt_token_ids=prompt, response_token_ids=response, response_logprobs=logprobs,
                           response_text="x", policy_version=version, policy_version_end=version,
                           finish_reason="stop", messages=[], reply_key=sid))
    store.set_next_state(sid, 0, "feedback", "user")
    store.record_verdict(sid, 0, verdict, [(verdict, "test")])


def test_a_turn_recorded_with_other_numerics_trains_on_the_trainers_pi_old(tmp_path):
    base, _ = tiny_model_and_renderer()
    store = Store(tmp_path / "run")
    turns = {f"t{i}": ([11 + i, 12, 13], [1000 + i, 1001, 1002, 1003]) for i in range(4)}
    exact = {}
    for i, (sid, (prompt, response)) in enumerate(turns.items()):
        exact[sid] = teacher_forced_logprobs(base, prompt + response, len(prompt)).tolist()
        record(store, sid, prompt, response, [lp - d for lp, d in zip(exact[sid], DRIFT)], 1 if i % 2 else -1)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=5e-3, lora_rank=8, lora_alpha=16)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    candidates, _ = select([Example.from_row(r) for r in store.trainable_turns(8)], cfg.method, 0)
    prepared = trainer.pipeline.prepare(candidates, 4, 4, 0)
    assert len(prepared.taken) == 4
    for ex in prepared.taken:
        assert ex.rollout_logprobs == pytest.approx(exact[ex.session_id], abs=1e-5)  # pi_old: the trainer's
        assert ex.recorded_logprobs == pytest.approx([lp - d for lp, d in zip(exact[ex.session_id], DRIFT)])
        assert ex.verdict_weights == pytest.approx([min(math.exp(d), WEIGHT_CAP) for d in DRIFT], rel=1e-4)
    assert prepared.metrics["rescored_logprob_gap"] == pytest.approx(sum(map(abs, DRIFT)) / 4, abs=1e-4)
    assert "memory_turns" not in prepared.metrics  # none was served with the memory
    m = trainer.step()  # the PPO ratio starts at 1 against the trainer's own pi_old, whatever was recorded
    assert m["turns"] == 4 and abs(m["ratio_mean"] - 1) < 1e-4 and m["clip_fraction"] == 0


def test_a_bf16_engines_turn_trains_at_ratio_one(tmp_path):
    """The real engine in bfloat16 records a turn; the float32 trainer's first step on it is on-policy."""
    base, renderer = tiny_model_and_renderer()
    store = Store(tmp_path / "run")

    async def serve() -> list[tuple[list[int], list[int], list[float]]]:
        eng = LocalEngine(resolve_model("tiny"), dtype="bfloat16", threads=1, prefix_cache_tokens=0)
        try:
            out = []
            for i in range(4):
                prompt = renderer.render([{"role": "user", "content": f"Question {i}?"}], [])
                toks = [t async for t in eng.generate(prompt, SamplingParams(temperature=1.0, max_new_tokens=12,
                                                                             seed=i))]
                out.append((prompt, [t.token_id for t in toks], [t.logprob for t in toks]))
            return out
        finally:
            await eng.close()

    for i, (prompt, response, lps) in enumerate(asyncio.run(serve())):
        record(store, f"b{i}", prompt, response, lps, 1 if i % 2 else -1)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=5e-3, lora_rank=8, lora_alpha=16)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    m = trainer.step()
    assert m["rescored_logprob_gap"] > 1e-4  # bf16 against float32 (a float32 engine records within ~1e-6)
    assert abs(m["ratio_mean"] - 1) < 1e-4 and m["clip_fraction"] == 0
    assert torch.isfinite(torch.tensor(m["loss"]))
