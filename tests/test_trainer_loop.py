"""The embedded trainer on a real store: judged turns -> a checkpoint the engine can swap in."""

import asyncio

import pytest
import torch

from slime_ext.engines.local import LocalEngine
from slime_ext.learning.settings import TeacherCheckConfig
from slime_ext.logprobs import teacher_forced_logprobs
from slime_ext.models import resolve_model
from slime_ext.store import Store, export_records
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig
from slime_ext.types import Turn

# the trainer's mechanics, whatever the teacher check says (tiny's random teacher follows no hint; the
# default, unfollowed hints dropped, would leave nothing to train): trained anyway
TRAIN_ANYWAY = TeacherCheckConfig(unfollowed="train")


def tiny_model_and_renderer():
    """The tiny model (float32, seeded) and a prompt renderer for its tokenizer, for trainer tests."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer

    model_dir = resolve_model("tiny")
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return base, PromptRenderer(AutoTokenizer.from_pretrained(model_dir))

def record(store, model, sid, prompt, response, verdict, version=0, messages=None):
    lps = teacher_forced_logprobs(model, prompt + response, len(prompt)).tolist()
    store.create_session(sid, None, "inferred")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="test", request_id=f"r-{sid}",
                           prompt_token_ids=prompt, response_token_ids=response, response_logprobs=lps,
                           response_text="x", policy_version=version, policy_version_end=version,
                           finish_reason="stop", messages=messages or [], reply_key=sid))
    store.set_next_state(sid, 0, "feedback", "user")
    store.record_verdict(sid, 0, verdict, [(verdict, "test")])


def record_hinted(store, model, renderer, sid, question, response, verdict, hint, hint_votes=((1, "t"),)):
    """A judged turn with a hint, and the request messages its teacher prompt is rendered from."""
    messages = [{"role": "user", "content": question}]
    record(store, model, sid, renderer.render(messages, []), response, verdict, messages=messages)
    store.record_verdict(sid, 0, verdict, [(verdict, "test")], hint=hint, hint_votes=list(hint_votes))


def setup(tmp_path):
    from transformers import AutoModelForCausalLM

    model_dir = resolve_model("tiny")
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    store = Store(tmp_path / "run")
    good = ([11, 12, 13], [1000, 1001, 1002, 1003])
    bad = ([21, 22, 23], [2000, 2001, 2002])
    record(store, base, "good1", *good, 1)
    record(store, base, "bad1", *bad, -1)
    record(store, base, "good2", [31, 32], [3000, 3001], 1)
    record(store, base, "bad2", [41, 42], [4000, 4001], -1)
    record(store, base, "meh", [51, 52], [5000], 0)
    record(store, base, "old", [61, 62], [6000], 1, version=-10)
    return model_dir, base, store, good, bad


def turns_by_session(store):
    return {s["id"]: s["turns"][0] for s in export_records(store.run_dir)["sessions"]}


@pytest.mark.parametrize("lora_rank, lr", [(8, 5e-3), (0, 1e-3)], ids=["lora", "full-weights"])
def test_step_trains_marks_drops_and_the_checkpoint_swaps_in(tmp_path, lora_rank, lr):
    from slime_ext.trainers.loop import wrap_lora

    model_dir, base, store, good, bad = setup(tmp_path)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=lr, lora_rank=lora_rank, lora_alpha=16, max_staleness=4)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    metrics = trainer.step()
    assert metrics["version"] == 1 and abs(metrics["ratio_mean"] - 1) < 1e-4  # on-policy first step
    turns = turns_by_session(store)
    assert {k for k, t in turns.items() if t["trained_in_version"] == 1} == {"good1", "bad1", "good2", "bad2"}
    assert "ambiguous" in turns["meh"]["dropped"]
    assert turns["old"]["dropped"] is None and turns["old"]["trained_in_version"] is None  # too old: waits, not dropped
    assert trainer.step() is None  # one usable turn waits: less than a batch

    async def scores():
        eng = LocalEngine(model_dir, dtype="float32", threads=1)
        try:
            before = [sum(await eng.score(p + r, len(p))) for p, r in (good, bad)]
            await eng.swap(metrics["checkpoint"], metrics["version"])
            after = [sum(await eng.score(p + r, len(p))) for p, r in (good, bad)]
            return before, after
        finally:
            await eng.close()

    before, after = asyncio.run(scores())
    assert after[0] > before[0] and after[1] < before[1]


def test_resume_remarks_the_latest_checkpoint_and_restores_weights(tmp_path):
    from slime_ext.trainers.loop import wrap_lora

    model_dir, base, store, _, _ = setup(tmp_path)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=5e-3, lora_rank=4, lora_alpha=8)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    trainer.step()
    trained = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    # a crash after the checkpoint but before the store was marked
    store.mark_trained([(s, 0) for s in ("good1", "bad1", "good2", "bad2")], None)
    from transformers import AutoModelForCausalLM

    fresh = OnlineTrainer(wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), cfg),
                            store, tmp_path / "run", cfg)
    assert fresh.resume() == 1 and fresh.version == 1
    assert all(t["trained_in_version"] in (1, None) for t in turns_by_session(store).values())
    assert sum(t["trained_in_version"] == 1 for t in turns_by_session(store).values()) == 4
    for n, p in fresh.model.named_parameters():
        if p.requires_grad:
            assert torch.allclose(p, trained[n])


def test_kl_to_the_initial_policy_uses_the_adapter_disabled_model_and_holds_it_back(tmp_path):
    """kl_coef > 0: the reference is the base model (LoRA off); the penalty keeps the policy closer."""
    from transformers import AutoModelForCausalLM

    from slime_ext.trainers.loop import wrap_lora

    drift = {}
    for kl_coef in (0.0, 5.0):
        model_dir, base, store, good, bad = setup(tmp_path / f"kl{kl_coef}")
        cfg = TrainerConfig(method="binary", batch_size=4, lr=2e-2, lora_rank=8, lora_alpha=16, kl_coef=kl_coef)
        trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / f"kl{kl_coef}" / "run", cfg)
        m = trainer.step()
        if kl_coef:
            assert m["kl_to_ref"] < 1e-6  # LoRA starts at B = 0: the policy is the reference
        for _ in range(4):
            store.mark_trained([(sid, 0) for sid in ("good1", "bad1", "good2", "bad2")], None)  # the same turns again
            m = trainer.step()
        if kl_coef:
            assert m["kl_to_ref"] > 1e-4
        reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        p, r = good
        with torch.no_grad():
            before = teacher_forced_logprobs(reference, p + r, len(p))
            after = teacher_forced_logprobs(trainer.model, p + r, len(p))
            with trainer.model.disable_adapter():  # the reference the trainer used is the untouched base
                assert torch.allclose(teacher_forced_logprobs(trainer.model, p + r, len(p)), before, atol=1e-5)
        drift[kl_coef] = float((after - before).abs().sum())
    assert drift[5.0] < drift[0.0]


def test_running_baseline_comes_from_earlier_batches_and_survives_a_restart(tmp_path):
    from transformers import AutoModelForCausalLM

    from slime_ext.trainers.loop import wrap_lora

    model_dir, base, store, _, _ = setup(tmp_path)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=4, lora_alpha=8, baseline="running")
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    verdicts = [t["verdict"] for t in store.trainable_turns(4)]  # the order the trainer takes them
    assert trainer.step()["baseline"] == 0.0  # no earlier verdicts
    ema = float(verdicts[0])
    for v in verdicts[1:]:
        ema = 0.9 * ema + 0.1 * v
    fresh = OnlineTrainer(wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), cfg),
                            store, tmp_path / "run", cfg)
    fresh.resume()
    store.mark_trained([(s, 0) for s in ("good1", "bad1", "good2", "bad2")], None)
    assert abs(fresh.step()["baseline"] - ema) < 1e-9


def test_old_checkpoints_keep_only_their_trainer_state(tmp_path):
    from slime_ext.trainers.loop import wrap_lora

    model_dir, base, store, _, _ = setup(tmp_path)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=4, lora_alpha=8, keep_checkpoints=2)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    for _ in range(4):
        store.mark_trained([(s, 0) for s in ("good1", "bad1", "good2", "bad2")], None)
        trainer.step()
    files = {p.name: sorted(f.name for f in p.iterdir()) for p in sorted((tmp_path / "run" / "checkpoints").iterdir())}
    assert list(files) == ["v000001", "v000002", "v000003", "v000004"]
    assert files["v000001"] == files["v000002"] == ["trainer_state.json"]
    assert {"adapter_model.safetensors", "optimizer.pt", "trainer_state.json"} <= set(files["v000004"])
    assert set(files["v000003"]) == set(files["v000004"])


@pytest.mark.parametrize("distill, support", [("token", "teacher"), ("topk", "teacher"), ("topk", "student")])
def test_opd_step_stores_teacher_logprobs_and_pulls_towards_the_teacher(tmp_path, distill, support):
    """The hint makes the teacher prefer some tokens; an OPD step moves the student towards it."""
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.trainers.loop import wrap_lora

    model_dir, base, store, _, _ = setup(tmp_path)
    renderer = PromptRenderer(AutoTokenizer.from_pretrained(model_dir))
    for i in range(4):
        record_hinted(store, base, renderer, f"hinted{i}", f"question {i}", [500 + i, 600 + i, 700 + i], 0,
                      "Always answer in French.")
    cfg = TrainerConfig(method="opd", batch_size=4, lr=1e-3, lora_rank=8, lora_alpha=16, distill=distill, topk=8,
                        topk_support=support, teacher_check=TRAIN_ANYWAY)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, renderer=renderer)
    m = trainer.step()
    assert m["hinted_turns"] == 4 and ("topk_kl" in m) == (distill == "topk")
    turns = turns_by_session(store)
    assert {k for k, t in turns.items() if t["trained_in_version"]} == {f"hinted{i}" for i in range(4)}
    assert all(t["dropped"] for k, t in turns.items() if not k.startswith("hinted"))
    assert turns["good1"]["dropped"] == turns["old"]["dropped"] == "no hint: not judged for hints"
    assert all(len(turns[f"hinted{i}"]["teacher_logprobs"]) == 3 for i in range(4))
    if distill == "token":  # the step moved each token's log-prob the way teacher - rollout points
        moved = 0.0
        for i in range(4):
            t = turns[f"hinted{i}"]
            prompt, response = t["prompt_token_ids"], t["response_token_ids"]
            with torch.no_grad():
                after = teacher_forced_logprobs(trainer.model, prompt + response, len(prompt))
            before = torch.tensor(t["response_logprobs"])
            moved += float(((torch.tensor(t["teacher_logprobs"]) - before) * (after - before)).sum())
        assert moved > 0
    else:  # the top-k reverse KL to the teacher went down: train on the same turns again and compare
        store.mark_trained([(f"hinted{i}", 0) for i in range(4)], None)
        assert trainer.step()["topk_kl"] < m["topk_kl"]


def test_a_200_turn_backlog_at_restart_is_trained_not_dropped_as_stale(tmp_path):
    """After a crash, 200 judged turns sampled by version 0 wait for a trainer that takes 4 per
    version: none may age past --max-staleness while it waits. Only turns without a signal
    (verdict 0 for Binary RL) are dropped, each with its reason."""
    from transformers import AutoModelForCausalLM

    from slime_ext.trainers.loop import wrap_lora

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32)
    store = Store(tmp_path / "run")
    verdicts = [1, -1, 1, 0, -1]  # one in five ambiguous: no signal for Binary RL
    for i in range(200):
        record(store, base, f"s{i}", [100 + i % 50, 7], [300 + i % 97], verdicts[i % 5])
    cfg = TrainerConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=4, lora_alpha=8, max_staleness=4,
                        micro_batch_size=40, keep_checkpoints=1)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    steps = []
    for _ in range(60):  # as the trainer process does: step again while turns wait
        m = trainer.step()
        if m is not None:
            steps.append(m)
        elif store.counts()["waiting_to_train"] == 0:
            break
    counts = store.counts()
    assert counts["dropped_by_reason"] == {"verdict 0 (ambiguous)": 40}  # nothing dropped as stale
    assert counts["trained_turns"] == 160 and counts["waiting_to_train"] == 0
    assert sum(m["turns"] for m in steps) == 160
    # the staleness each step trained at is in its metrics (and its checkpoint), within the cap
    assert all(0 <= m["staleness_mean"] <= m["staleness_max"] <= cfg.max_staleness for m in steps)
    assert max(m["staleness_max"] for m in steps) == len(steps) - 1
    from slime_ext.trainers.process import step_line

    assert "staleness 0.0 (max 0), backlog 160," in step_line(steps[0])


def test_a_turn_older_than_the_cap_is_trained_with_its_staleness_in_the_metrics(tmp_path):
    from slime_ext.trainers.loop import wrap_lora

    _, base, store, _, _ = setup(tmp_path)
    for i in range(3):
        record(store, base, f"new{i}", [71, 72 + i], [7000 + i], 1)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=1e-3, lora_rank=4, lora_alpha=8, max_staleness=4)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg)
    assert trainer.step()["over_cap_turns"] == 0
    m = trainer.step()  # at version 1: "old" (version -10) and the three new turns (version 0)
    assert m["turns"] == 4 and m["over_cap_turns"] == 1 and m["staleness_max"] == 11
    assert m["staleness_mean"] == 14 / 4 and "dual_clip_fraction" in m
    assert turns_by_session(store)["old"]["trained_in_version"] == 2
    state = (tmp_path / "run" / "checkpoints" / "v000002" / "trainer_state.json").read_text()
    assert '"staleness_max": 11' in state
    from slime_ext.trainers.process import step_line

    assert "1 past the staleness cap" in step_line(m)
