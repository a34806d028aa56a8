"""On-Policy Distillation on the real SmolLM2-135M-Instruct (CPU, float32).

1. The teacher's log-probs through ``Engine.score`` equal a direct forward pass of the same ids.
2. With the hint "Answer with a single word.", the teacher finds the one-word answer "Paris" far
   more likely than the student does (about -3 against -19 nats).
3. The student's own (mostly rambling) answers to eight questions, each followed by that hint,
   are OPD-trained for two steps (LoRA); afterwards the student's log-probs of concise answers to
   held-out questions have risen.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
from slime_ext.engines.base import SamplingParams
from slime_ext.engines.local import LocalEngine
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.learning.teacher import teacher_prompt_ids
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.models import resolve_model
from slime_ext.store import Store, export_records
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from slime_ext.types import Turn

# the trainer's mechanics, whatever the teacher check says (tiny's random teacher follows no hint; the
# default, unfollowed hints dropped, would leave nothing to train): trained anyway
TRAIN_ANYWAY = TeacherCheckConfig(unfollowed="train")

HINT = "Answer with a single word."
TRAIN = ["What is the capital of Italy?", "What is the capital of Spain?", "What is the largest planet?",
         "What is the opposite of hot?", "What animal says meow?", "What is frozen water called?",
         "Which season comes after winter?", "What do bees make?"]
HELD_OUT = [("What is the capital of Japan?", "Tokyo"), ("What color is grass?", "Green"),
            ("What is the capital of France?", "Paris"), ("How many days are in a week?", "Seven")]


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoTokenizer

    model_dir = resolve_model("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    return model_dir, tok, PromptRenderer(tok), tok.convert_tokens_to_ids("<|im_end|>")


def user(q):
    return [{"role": "user", "content": q}]


def test_teacher_scores_the_recorded_answer_with_the_hint(smollm2):
    from transformers import AutoModelForCausalLM

    model_dir, tok, renderer, eos = smollm2
    answer = tok.encode("Paris", add_special_tokens=False) + [eos]
    teacher_prompt = teacher_prompt_ids(renderer, user("What is the capital of France?"), HINT)
    student_prompt = renderer.render(user("What is the capital of France?"), [])
    assert len(teacher_prompt) > len(student_prompt) and HINT in tok.decode(teacher_prompt)

    async def via_engine():
        eng = LocalEngine(model_dir, dtype="float32", threads=2)
        try:
            ids = teacher_prompt + answer
            return await eng.score(ids, len(teacher_prompt))
        finally:
            await eng.close()

    from_score = asyncio.run(via_engine())
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    with torch.no_grad():
        direct = teacher_forced_logprobs(model, teacher_prompt + answer, len(teacher_prompt)).tolist()
        student = teacher_forced_logprobs(model, student_prompt + answer, len(student_prompt)).sum().item()
    assert max(abs(a - b) for a, b in zip(from_score, direct)) < 1e-4
    assert sum(direct) > student + 10  # about -3.3 against -18.6 nats


def test_opd_on_a_handful_of_hinted_turns_makes_concise_answers_likelier(smollm2, tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir, tok, renderer, eos = smollm2

    async def students_answers():
        eng = LocalEngine(model_dir, dtype="float32", threads=2)
        try:
            out = []
            for i, q in enumerate(TRAIN):
                ids = renderer.render(user(q), [])
                sp = SamplingParams(max_new_tokens=24, seed=i, stop_token_ids=tuple(stop_token_ids(tok)))
                toks = [t async for t in eng.generate(ids, sp)]
                out.append((q, ids, [t.token_id for t in toks], [t.logprob for t in toks]))
            return out
        finally:
            await eng.close()

    store = Store(tmp_path / "run")
    for i, (q, ids, response, logprobs) in enumerate(asyncio.run(students_answers())):
        sid = f"s{i}"
        store.create_session(sid, None, "inferred")
        store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=sid,
                               prompt_token_ids=ids, response_token_ids=response, response_logprobs=logprobs,
                               response_text=tok.decode(response), policy_version=0, policy_version_end=0,
                               finish_reason="stop", messages=user(q), reply_key=sid))
        store.set_next_state(sid, 0, f"No. {HINT}", "user")
        store.record_verdict(sid, 0, -1, [(-1, "test")], hint=HINT, hint_votes=[(1, "test")])

    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
    cfg = TrainerConfig(method="opd", batch_size=4, lr=1e-3, lora_rank=8, lora_alpha=16, teacher_check=TRAIN_ANYWAY)
    trainer = OnlineTrainer(wrap_lora(model, cfg), store, tmp_path / "run", cfg, renderer=renderer)

    def concise():
        out = []
        for q, a in HELD_OUT:
            prompt, answer = renderer.render(user(q), []), tok.encode(a, add_special_tokens=False) + [eos]
            with torch.no_grad():
                out.append(teacher_forced_logprobs(trainer.model, prompt + answer, len(prompt)).sum().item())
        return out

    before = concise()
    steps = [trainer.step(), trainer.step()]
    assert [m["version"] for m in steps] == [1, 2] and all(m["hinted_turns"] == 4 for m in steps)
    after = concise()
    print("held-out concise answers, log-prob before -> after:", [f"{b:.2f} -> {a:.2f}" for b, a in zip(before, after)])
    assert all(a > b for a, b in zip(after, before))
    assert sum(after) - sum(before) > 4 * 1.0  # more than a nat each on average
    stored = [t for s in export_records(tmp_path / "run")["sessions"] for t in s["turns"]]
    assert all(len(t["teacher_logprobs"]) == len(t["response_token_ids"]) and t["trained_in_version"] for t in stored)
