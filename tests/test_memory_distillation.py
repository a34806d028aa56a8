"""The preference memory learned into the weights (issue 28, item 2): a turn served with the memory is
trained as context distillation, the student its prompt without the memory (pi_old recomputed there,
the verdict term importance-weighted), the teacher the frozen base shown the memory's preferences.
Tiny model, real store and trainer."""

import math

import pytest
import torch

from slime_ext.chat.memory import PLACEMENTS, memory_block, with_memory, without_memory
from slime_ext.learning.example import Example
from slime_ext.learning.memory import WEIGHT_CAP, student_example
from slime_ext.learning.objective import Objective
from slime_ext.learning.scorers import TorchScorer
from slime_ext.learning.select import no_signal, select
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.learning.teacher import teacher_prompt_ids
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.store import Store
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora
from slime_ext.types import Turn
from tests.test_trainer_loop import tiny_model_and_renderer

PREFS = ["Answer in one short sentence.", "Always answer in French."]
QUESTIONS = ["What is the capital of Peru?", "Name a prime number.", "Why is the sky blue?", "Who wrote Hamlet?"]


# ------------------------------------------------------------------ taking the block out again
@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("messages", [
    [{"role": "user", "content": "hi"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "hi"}],
    [{"role": "system", "content": [{"type": "text", "text": "S"}]}, {"role": "user", "content": "hi"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
     {"role": "user", "content": [{"type": "text", "text": "c"}]}],
], ids=["user-only", "system", "system-parts", "conversation-parts"])
def test_the_memory_block_comes_out_exactly_as_it_went_in(messages, placement):
    assert without_memory(with_memory(messages, PREFS, placement), PREFS) == messages
    assert without_memory(messages, []) == messages


def test_a_block_cut_to_fit_the_context_is_not_guessed_at():
    served = with_memory([{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}], PREFS)
    served[0]["content"] = served[0]["content"][:-5]  # the server cut the system prompt's end
    assert without_memory(served, PREFS) is None
    assert without_memory(with_memory([{"role": "user", "content": "hi"}], PREFS), PREFS[:1]) is None  # other hints


def test_a_memory_turn_has_a_teacher_without_a_hint():
    assert no_signal("opd", 1, None, 1.0) is not None and no_signal("opd", 1, None, 1.0, memory=True) is None
    assert no_signal("combine", 0, None, 1.0) is not None and no_signal("combine", 0, None, 1.0, memory=True) is None
    assert no_signal("binary", 0, None, 1.0, memory=True) is not None  # no verdict: nothing for Binary RL


# ------------------------------------------------------------------ the student without its memory
def record_memory_turn(store, model, renderer, sid, question, response, verdict, prefs, hint=None, placement="system"):
    """A judged turn served with ``prefs`` (in its system message: ``placement``), as the server records one: the
    messages and prompt ids it was served with, its log-probs there, and the preferences applied."""
    sent = [{"role": "user", "content": question}]
    served = with_memory(sent, prefs, placement)
    prompt = renderer.render(served, [])
    lps = teacher_forced_logprobs(model, prompt + response, len(prompt)).tolist()
    store.create_session(sid, "ann", "inferred")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}",
                           prompt_token_ids=prompt, response_token_ids=response, response_logprobs=lps,
                           response_text="x", policy_version=0, policy_version_end=0, finish_reason="stop",
                           messages=served, reply_key=sid, user="ann", memory=list(prefs)))
    store.set_next_state(sid, 0, "Thanks!" if verdict > 0 else "No.", "user")
    store.record_verdict(sid, 0, verdict, [(verdict, "test")], hint=hint, hint_votes=[(1, "t")] if hint else None)
    return sent


@pytest.fixture
def tiny(tmp_path):
    base, renderer = tiny_model_and_renderer()
    return base, renderer, Store(tmp_path / "run"), tmp_path / "run"


def test_the_student_is_the_prompt_without_the_memory_with_its_own_pi_old_and_weights(tiny):
    base, renderer, store, _ = tiny
    sent = record_memory_turn(store, base, renderer, "m0", QUESTIONS[0], [500, 600, 700, 2], 1, PREFS)
    (row,) = store.trainable_turns(4)
    ex = Example.from_row(row)
    assert ex.memory == tuple(PREFS) and memory_block(PREFS) in renderer.tokenizer.decode(ex.prompt_ids)
    student, why = student_example(ex, renderer=renderer, policy=TorchScorer.of(base, [2]))
    assert why is None
    assert student.prompt_ids == renderer.render(sent, []) and student.request.messages == sent
    old = teacher_forced_logprobs(base, student.prompt_ids + student.response_ids, len(student.prompt_ids))
    assert torch.allclose(torch.tensor(student.rollout_logprobs), old, atol=1e-5)
    expected = [min(math.exp(o - r), WEIGHT_CAP) for o, r in zip(old.tolist(), ex.rollout_logprobs)]
    assert student.verdict_weights == pytest.approx(expected, rel=1e-5) and max(student.verdict_weights) <= WEIGHT_CAP
    assert student.response_ids == ex.response_ids and student.verdict == 1  # the answer and verdict are the turn's
    # the verdict term carries the weights, the teacher term does not
    sample = student.sample()
    assert sample.tokens[: len(student.prompt_ids)] == student.prompt_ids
    cfg = TrainerConfig(method="binary")
    (adv,) = Objective.of(cfg).advantages(sample)
    assert adv.tolist() == pytest.approx(student.verdict_weights, rel=1e-5)
    # a turn served without the memory is what it was
    assert student_example(student, renderer=renderer, policy=TorchScorer.of(base, [2]))[0] is student


def trainer_for(base, store, run, renderer, **overrides):
    settings = dict(method="combine", batch_size=4, lr=3e-3, lora_rank=8, lora_alpha=16,
                    teacher_check=TeacherCheckConfig(unfollowed="train"))  # tiny's random teacher follows nothing
    cfg = TrainerConfig(**{**settings, **overrides})
    return OnlineTrainer(wrap_lora(base, cfg), store, run, cfg, renderer=renderer)


def test_the_hint_placement_serves_the_trainers_teacher_prompt(tiny):
    _, renderer, _, _ = tiny
    sent = [{"role": "system", "content": "S"}, {"role": "user", "content": QUESTIONS[0]}]
    assert renderer.render(with_memory(sent, PREFS, "hint"), []) == teacher_prompt_ids(renderer, sent, PREFS)
    assert with_memory([{"role": "system", "content": "S"}], PREFS, "hint") == with_memory(
        [{"role": "system", "content": "S"}], PREFS, "system")  # no user message: the system block


@pytest.mark.parametrize("method, placement", [("combine", "system"), ("opd", "system"), ("combine", "hint")])
def test_every_memory_turn_is_taught_by_the_memory_teacher_hinted_or_not(tiny, method, placement):
    base, renderer, store, run = tiny
    sents = [record_memory_turn(store, base, renderer, f"m{i}", q, [500 + i, 600, 2], 1, PREFS,
                                hint="Answer in Spanish." if i == 0 else None, placement=placement)
             for i, q in enumerate(QUESTIONS)]
    trainer = trainer_for(base, store, run, renderer, method=method)
    candidates, dropped = select([Example.from_row(r) for r in store.trainable_turns(8)], trainer.config.method, 0)
    assert not dropped  # OPD too: the memory is the teacher of an unhinted turn
    prepared = trainer.pipeline.prepare(candidates, 4, 4, 0)
    assert len(prepared.taken) == 4 and prepared.metrics["memory_turns"] == 4
    for ex, sent in zip(prepared.taken, sents):
        hints = PREFS + ["Answer in Spanish."] if ex.hint else PREFS
        assert ex.prompt_ids == renderer.render(sent, [])  # the student: no memory
        assert ex.teaching.prompt_ids == teacher_prompt_ids(renderer, sent, hints)  # the teacher: the memory (+ hint)
        assert ex.teaching.hints == tuple(hints)


def test_binary_rl_trains_the_served_answer_without_the_memory(tiny):
    base, renderer, store, run = tiny
    sents = [record_memory_turn(store, base, renderer, f"m{i}", q, [500 + i, 600, 2], 1, PREFS)
             for i, q in enumerate(QUESTIONS)]
    trainer = trainer_for(base, store, run, renderer, method="binary")
    candidates, _ = select([Example.from_row(r) for r in store.trainable_turns(8)], trainer.config.method, 0)
    prepared = trainer.pipeline.prepare(candidates, 4, 4, 0)
    assert [ex.prompt_ids for ex in prepared.taken] == [renderer.render(s, []) for s in sents]
    assert all(ex.teaching is None and ex.verdict_weights for ex in prepared.taken)


def gap_to_teacher(model, renderer, sent, response) -> float:
    """Forward KL from the memory-conditioned teacher (the base shown the preferences) to ``model`` without the
    memory, summed over the response positions (nats)."""
    teacher = teacher_prompt_ids(renderer, sent, PREFS)
    student = renderer.render(sent, [])
    with torch.no_grad():
        t = model_logprobs(BASE_FOR_TEACHER[0], teacher, response)
        s = model_logprobs(model, student, response)
    return float((t.exp() * (t - s)).sum())


BASE_FOR_TEACHER: list = []


def model_logprobs(model, prompt, response):
    """Log-distributions [r, V] of ``model`` at each response position after ``prompt``."""
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1: len(prompt) + len(response) - 1].float()
    return torch.log_softmax(logits, -1)


def test_context_distillation_moves_the_no_memory_distribution_toward_the_memory_teacher(tiny):
    """The acceptance test of item 2: after steps on turns served with the memory, the model shown no memory is
    closer (forward KL over the whole vocabulary) to the frozen base shown the memory, on held-out questions."""
    import copy

    base, renderer, store, run = tiny
    BASE_FOR_TEACHER[:] = [copy.deepcopy(base).eval()]
    torch.manual_seed(1)
    trained = [f"Question number {i}: what is {i} plus {i}?" for i in range(12)]
    responses = []
    for i, q in enumerate(trained):
        # the served answer: the memory-conditioned base's own greedy tokens (what the memory makes it say)
        prompt = renderer.render(with_memory([{"role": "user", "content": q}], PREFS), [])
        out = base.generate(torch.tensor([prompt]), max_new_tokens=6, do_sample=False)[0, len(prompt):].tolist()
        responses.append(out)
        record_memory_turn(store, base, renderer, f"m{i}", q, out, 0, PREFS)  # no verdict: the teacher term alone
    held_out = [([{"role": "user", "content": f"Tell me about item {k}."}], responses[k]) for k in range(3)]
    before = sum(gap_to_teacher(base, renderer, s, r) for s, r in held_out)
    trainer = trainer_for(base, store, run, renderer, distill="forward_kl", topk=20, lr=1e-2, replay_steps=4,
                          replay_budget_s=60.0)
    steps = [trainer.step() for _ in range(3)]
    assert all(m and m["memory_turns"] == 4 for m in steps), steps
    after = sum(gap_to_teacher(trainer.model, renderer, s, r) for s, r in held_out)
    assert after < 0.7 * before, (before, after)  # measured: 0.048 -> 0.025 nats


def test_the_teacher_check_measures_the_turns_hint_alone_not_the_memory_with_it(tiny, monkeypatch):
    """A memory turn's teacher prompt carries its preferences and its hint; whether the teacher follows the hint
    (what `teacher_follows` reports of it) is measured on the hint alone, against the prompt without the memory."""
    from slime_ext.learning.teachability import TeacherChecker

    base, renderer, store, run = tiny
    sent = record_memory_turn(store, base, renderer, "m0", QUESTIONS[0], [500, 600, 2], -1, PREFS,
                              hint="Answer in Spanish.")
    seen = []
    real = TeacherChecker.check
    monkeypatch.setattr(TeacherChecker, "check", lambda self, teacher, prompt, hinted, hint, context=0:
                        seen.append((prompt, hinted, hint)) or real(self, teacher, prompt, hinted, hint, context))
    trainer = trainer_for(base, store, run, renderer, batch_size=1,
                          teacher_check=TeacherCheckConfig(unfollowed="train", max_new_tokens=4))
    candidates, _ = select([Example.from_row(r) for r in store.trainable_turns(4)], trainer.config.method, 0)
    (ex,) = trainer.pipeline.prepare(candidates, 1, 1, 0).taken
    assert ex.teaching.prompt_ids == teacher_prompt_ids(renderer, sent, PREFS + ["Answer in Spanish."])
    assert seen == [(renderer.render(sent, []), teacher_prompt_ids(renderer, sent, "Answer in Spanish."),
                     "Answer in Spanish.")]


# ------------------------------------------------------------------ the memory's opening, trained without the memory
OPENING = [777, 778]  # the tokens the memory gave as the answer's opening (chat/memory.py: opening)


def record_opened_turn(store, model, renderer, sid, question, rest, verdict):
    """A turn served with the memory whose first tokens the memory gave: as the server records one, the given
    tokens at log-prob 0 and ``forced_tokens`` in its sampling."""
    served = with_memory([{"role": "user", "content": question}], PREFS)
    prompt = renderer.render(served, [])
    response = OPENING + rest
    lps = [0.0] * len(OPENING) + teacher_forced_logprobs(model, prompt + response, len(prompt) + len(OPENING)).tolist()
    store.create_session(sid, "ann", "inferred")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}",
                           prompt_token_ids=prompt, response_token_ids=response, response_logprobs=lps,
                           response_text="x", policy_version=0, policy_version_end=0, finish_reason="stop",
                           messages=served, reply_key=sid, user="ann", memory=list(PREFS),
                           sampling={"temperature": 1.0, "forced_tokens": len(OPENING)}))
    store.set_next_state(sid, 0, "Thanks!" if verdict > 0 else "No.", "user")
    store.record_verdict(sid, 0, verdict, [(verdict, "t")])


@pytest.mark.parametrize("method", ["binary", "combine"])
def test_the_opening_the_memory_gave_is_never_trained_the_rest_of_the_answer_is(tiny, method):
    """As recorded and as the student without the memory, the given tokens carry no loss: they were not the policy's
    choice, and taught as an approved answer's tokens they broke smollm2's first token; the sampled rest trains."""
    base, renderer, store, run = tiny
    for i, q in enumerate(QUESTIONS):
        record_opened_turn(store, base, renderer, f"o{i}", q, [500 + i, 600, 2], 1)
    ex = Example.from_row(store.trainable_turns(4)[0])
    assert ex.forced == 2 and ex.sample().loss_mask == [0, 0, 1, 1, 1]
    trainer = trainer_for(base, store, run, renderer, method=method, lr=1e-2)
    candidates, _ = select([Example.from_row(r) for r in store.trainable_turns(8)], trainer.config.method, 0)
    prepared = trainer.pipeline.prepare(candidates, 4, 4, 0)
    assert len(prepared.taken) == 4 and prepared.metrics["memory_turns"] == 4
    assert all(ex.prompt_ids == renderer.render([{"role": "user", "content": q}], [])
               for ex, q in zip(prepared.taken, QUESTIONS))  # trained without the memory
    assert [s.loss_mask for s in prepared.samples] == [[0, 0, 1, 1, 1]] * 4
    assert trainer.step()
