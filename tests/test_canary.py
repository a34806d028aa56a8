"""The canary: a trained version that regresses on held-out figures is refused, undone and never
served; the previous version keeps serving and the refusal is visible (``trainers/canary.py``)."""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.request

import pytest
import torch

from slime_ext.store import Store, export_records
from slime_ext.trainers.canary import (
    Canary,
    CanaryConfig,
    CanaryFigures,
    answered,
    common_prefix,
    distinct_n,
    forgotten,
    generation_figures,
    key_index,
    read_status,
    reference_pass,
    regressions,
    snapshot,
)
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora

# ---------------------------------------------------------------- pure figures


def test_distinct_n_pools_ngrams_over_all_sequences():
    assert distinct_n([[1, 2, 3, 4]], 2) == 1.0
    assert distinct_n([[1, 2, 1, 2, 1, 2]], 2) == pytest.approx(2 / 5)  # a loop
    assert distinct_n([[1, 2, 3], [1, 2, 3]], 2) == pytest.approx(2 / 4)  # the same reply twice
    assert distinct_n([[1], []], 2) == 1.0  # no bigram at all
    assert distinct_n([[5, 5, 5]], 1) == pytest.approx(1 / 3)


def test_generation_figures_count_stops_and_lengths():
    d2, eos, length = generation_figures([[1, 2, 3], [4, 5], [6]], [True, False, True])
    assert eos == pytest.approx(2 / 3) and length == pytest.approx(2.0) and d2 == 1.0
    assert generation_figures([], []) == (1.0, 1.0, 0.0)


BASE = CanaryFigures(nll=1.30, distinct2=0.86, eos_rate=0.67, mean_length=20.0)


@pytest.mark.parametrize("after, rule", [
    (CanaryFigures(1.60, 0.86, 0.67, 20.0), "reference NLL rose"),
    (CanaryFigures(1.30, 0.50, 0.67, 20.0), "distinct-2 fell"),
    (CanaryFigures(1.30, 0.86, 0.33, 20.0), "EOS rate fell"),
    (CanaryFigures(1.30, 0.86, 0.67, 31.0), "mean length grew"),
    (CanaryFigures(math.nan, 0.86, 0.67, 20.0), "non-finite"),
], ids=["nll", "distinct", "eos", "length", "nan"])
def test_each_rule_refuses_its_regression(after, rule):
    reasons = regressions(BASE, after, CanaryConfig())
    assert len(reasons) == 1 and rule in reasons[0], reasons


def test_changes_within_the_thresholds_and_improvements_pass():
    cfg = CanaryConfig()
    ok = [CanaryFigures(1.50, 0.70, 0.50, 29.0),  # each just inside its limit
          CanaryFigures(0.90, 0.95, 1.00, 8.0),  # better everywhere (shorter is fine)
          CanaryFigures(1.30, 0.04, 0.67, 20.0)]
    assert regressions(BASE, ok[0], cfg) == [] and regressions(BASE, ok[1], cfg) == []
    tiny = CanaryFigures(10.8, 0.027, 0.0, 32.0)  # a random model's looping output: a fall under 0.05 is noise
    assert regressions(tiny, CanaryFigures(10.8, 0.011, 0.0, 32.0), cfg) == []
    short = CanaryFigures(1.3, 0.9, 1.0, 6.0)  # growth of at most 4 tokens always passes
    assert regressions(short, CanaryFigures(1.3, 0.9, 1.0, 10.0), cfg) == []
    assert regressions(short, CanaryFigures(1.3, 0.9, 1.0, 11.0), cfg) != []


def test_answered_counts_answers_holding_a_key():
    assert answered(["The capital is Paris.", "SmolLM", "Seven days."], [("paris",), ("blue",), ("seven", "7")]) == \
        pytest.approx(2 / 3)
    assert answered([], []) == 1.0


def test_answers_are_compared_with_the_first_version_so_a_slow_drift_is_refused():
    """Each step loses one answer in eight: no step-to-step rule fires, the drift since the first does."""
    cfg = CanaryConfig()
    first = CanaryFigures(1.30, 0.86, 0.67, 20.0, answered=0.875)
    served = CanaryFigures(1.30, 0.86, 0.67, 20.0, answered=0.75)
    slightly = CanaryFigures(1.30, 0.86, 0.67, 20.0, answered=0.625)
    assert regressions(served, slightly, cfg) == []  # against the served one alone: -0.125 passes
    assert regressions(served, slightly, cfg, first) == []  # -0.25 since the first: at the limit
    drifted = CanaryFigures(1.30, 0.86, 0.67, 20.0, answered=0.5)
    reasons = regressions(served, drifted, cfg, first)
    assert len(reasons) == 1 and "canary questions answered fell 0.88 -> 0.50 since the first" in reasons[0]


def test_forgotten_counts_the_first_versions_facts_lost_not_the_net_change():
    first = {"spain", "italy", "france", "hot"}
    assert forgotten(first, first | {"cold"}) == 0.0
    assert forgotten(first, {"france", "hot", "cold", "dark", "low"}) == 0.5  # two capitals traded for opposites
    assert forgotten(set(), {"x"}) == 0.0 and forgotten(None, set()) == 0.0  # nothing recalled first: nothing to lose


def test_forgetting_facts_is_refused_since_the_first_version():
    cfg = CanaryConfig()
    assert regressions(BASE, CanaryFigures(1.30, 0.86, 0.67, 20.0, forgotten=0.1), cfg) == []  # at the limit
    reasons = regressions(BASE, CanaryFigures(1.30, 0.86, 0.67, 20.0, forgotten=0.32), cfg)
    assert reasons == ["forgot 32% of the canary facts the first version recalled (limit 10%)"]


def test_key_index_points_at_the_token_that_starts_the_key_word():
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("tiny"))
    answer = "The capital of Spain is Madrid."
    at = key_index(tok, answer, ("madrid",))
    ids = tok.encode(answer, add_special_tokens=False)
    assert tok.decode(ids[:at]) == "The capital of Spain is" and tok.decode(ids[at]).strip().startswith("M")
    assert key_index(tok, "Cows produce milk.", ("honey",)) is None  # no key in the answer
    assert key_index(tok, "Grass is green.", ("grass",)) == 0  # the answer's first token: predicted from the prompt


def test_common_prefix_stops_at_the_first_difference_and_the_limit():
    assert common_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]], limit=10) == 2
    assert common_prefix([[1, 2, 3], [1, 2, 3]], limit=2) == 2
    assert common_prefix([[1], [2]], limit=5) == 0


def test_reference_pass_matches_the_trainers_log_probs_and_argmax(tmp_path):
    """The shared-prefix, length-sorted, chunked pass gives the NLL the trainer's own log-probs give,
    and 'recalled' is the full forward pass's argmax at each key; more than one chunk of rows."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.models import resolve_model
    from slime_ext.trainers.step import collate, response_logprobs
    from slime_ext.types import Sample

    model_dir = resolve_model("tiny")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    canary = Canary(CanaryConfig(), AutoTokenizer.from_pretrained(model_dir), FakeStore([]), tmp_path)
    pairs, key_at = canary.pairs[:20], canary.key_at[:20]
    key_at[3] = None  # a fact without a key is never recalled
    # the model's own argmax at four keys, so some facts are recalled
    for i in (0, 5, 13, 17):
        p, a = pairs[i]
        logits = model(input_ids=torch.tensor([p + a])).logits[0]
        pairs[i] = (p, a[: key_at[i]] + [int(logits[len(p) + key_at[i] - 1].argmax())] + a[key_at[i] + 1 :])
    nll, recalled = reference_pass(model, pairs, key_at, nll_of=6)
    samples = [Sample(tokens=p + a, response_length=len(a), loss_mask=[1] * len(a), rollout_log_probs=[0.0] * len(a))
               for p, a in pairs[:6]]
    batch = collate(samples)
    with torch.no_grad():
        lp = response_logprobs(model, batch)
    assert nll == pytest.approx(float(-(lp * batch.response_mask).sum() / batch.response_mask.sum()), abs=1e-4)
    assert [i for i, r in enumerate(recalled) if r] == [0, 5, 13, 17]


def test_the_first_versions_facts_are_kept_across_restarts(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.models import resolve_model

    model_dir = resolve_model("tiny")
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(model_dir)
    canary = Canary(CanaryConfig(), tok, FakeStore([]), tmp_path)
    canary.first_known = set(canary.facts[:10])  # as if the first version recalled these (tiny recalls none)
    canary.status["first_known"] = sorted(canary.first_known)
    canary.prepare(model)
    result = canary.check(model, 1)
    assert result.after.forgotten == 1.0 and result.refused  # tiny recalls none of them
    again = Canary(CanaryConfig(), tok, FakeStore([]), tmp_path)
    assert again.first_known == set(canary.facts[:10])


def test_a_drift_that_passes_each_step_is_refused_since_the_first_version():
    """The personalization experiment's `so` seed 1 (with `forgotten` on): its served versions' figures, each
    step inside every limit, while its answers grew from 20 to 47 words and lost a held-out answer."""
    cfg = CanaryConfig()
    first = CanaryFigures(1.263, 0.93, 0.4, 17.5)
    v1, v2 = CanaryFigures(1.330, 0.94, 0.4, 18.0), CanaryFigures(1.513, 0.94, 0.2, 20.7)
    assert regressions(first, v1, cfg, first) == [] and regressions(v1, v2, cfg, first) == []
    v3 = CanaryFigures(1.483, 0.92, 0.1, 22.4)
    assert regressions(v2, v3, cfg) == []  # step to step alone
    assert regressions(v2, v3, cfg, first) == ["EOS rate fell 0.40 -> 0.10 since the first version (limit -0.25)"]
    drifted = CanaryFigures(1.533, 0.92, 0.4, 20.0)  # +0.02 over v2, +0.27 since the first
    assert regressions(v2, drifted, cfg, first) == [
        "reference NLL rose +0.270 nats/token since the first version (1.263 -> 1.533; limit 0.25)"]


def test_bad_canary_settings_are_refused_by_name():
    from slime_ext.config import ServeConfig

    with pytest.raises(ValueError, match="canary_max_eos_drop"):
        ServeConfig(canary_max_eos_drop=-0.1).validated()
    with pytest.raises(ValueError, match="canary_max_new_tokens"):
        CanaryConfig(max_new_tokens=0).validate()


def test_cli_maps_the_canary_flags_onto_the_trainer_config():
    from slime_ext.cli import build_parser, serve_config

    cfg = serve_config(build_parser().parse_args(["serve", "--no-canary", "--canary-max-nll-rise", "0.5",
                                                  "--canary-max-answered-drop", "0.5", "--canary-max-forgotten", "0.2"]))
    assert cfg.trainer_config().canary == CanaryConfig(enabled=False, max_nll_rise=0.5, max_answered_drop=0.5,
                                                       max_forgotten=0.2)
    assert serve_config(build_parser().parse_args(["serve"])).trainer_config().canary.enabled  # on by default


# ---------------------------------------------------------------- the gate in the trainer (tiny)


class FakeStore:
    def __init__(self, prompts):
        self.prompts = prompts

    def recent_judged(self, limit):
        return [{"prompt_token_ids": p} for p in self.prompts[:limit]]


def test_user_prompts_are_recent_distinct_short_and_re_chosen_every_refresh(tmp_path):
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    store = FakeStore([[1, 2], [1, 2], list(range(300)), [3, 4], [5, 6]])  # newest first
    canary = Canary(CanaryConfig(user_prompts=2, refresh_every=2), AutoTokenizer.from_pretrained(resolve_model("tiny")),
                    store, tmp_path)
    assert canary.user_prompts() == [[1, 2], [3, 4]]  # the duplicate and the 300-token prompt are skipped
    probes = []
    canary.probe = lambda model: (probes.append(list(canary.prompts)) or BASE, set())
    canary.prepare(None)
    assert probes[-1] == canary.questions[:CanaryConfig().prompts] + [[1, 2], [3, 4]] and len(probes) == 1
    for _ in range(2):  # two accepted versions: the served figures are the candidates', no re-measure
        canary.prepare(None)
        assert not canary.check(None, 1).refused
    assert len(probes) == 3
    store.prompts = [[7, 8]] + store.prompts
    canary.prepare(None)  # due: the user's prompts are re-chosen and the served version re-measured
    assert len(probes) == 4 and probes[-1][-2:] == [[7, 8], [1, 2]]




def test_snapshot_restores_lora_weights_and_optimizer_state():
    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model

    model = wrap_lora(AutoModelForCausalLM.from_pretrained(resolve_model("tiny"), dtype=torch.float32),
                      TrainerConfig(lora_rank=4))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1.0)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()  # some optimizer state to keep
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    moments = [s["exp_avg"].clone() for s in opt.state.values()]
    restore = snapshot(model, opt)
    model(input_ids=torch.tensor([[4, 5, 6]])).logits.sum().backward()
    opt.step()
    assert any(not torch.equal(p, before[n]) for n, p in model.named_parameters() if p.requires_grad)
    restore()
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters() if p.requires_grad)
    assert all(torch.equal(s["exp_avg"], m) for s, m in zip(opt.state.values(), moments))


def gated_trainer(tmp_path, lr: float, lora_rank: int = 0):
    """A trainer with the default canary on tiny, and four judged turns waiting."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.models import resolve_model
    from tests.test_trainer_loop import record

    model_dir = resolve_model("tiny")
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    store = Store(tmp_path / "run")
    for i in range(4):
        record(store, base, f"s{i}", [11 + i, 12, 13], [1000 + i, 1001, 1002], 1 if i % 2 else -1)
    cfg = TrainerConfig(method="binary", batch_size=4, lr=lr, lora_rank=lora_rank, lora_alpha=8)
    canary = Canary(CanaryConfig(), AutoTokenizer.from_pretrained(model_dir), store, tmp_path / "run")
    return OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, canary=canary), store


def test_a_broken_update_is_refused_undone_and_never_published(tmp_path, caplog):
    trainer, store = gated_trainer(tmp_path, lr=10.0)  # full weights at lr 10: the output layer is wrecked
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with caplog.at_level(logging.WARNING):
        metrics = trainer.step()
    assert metrics["refused"].startswith("canary refused: version 1: reference NLL rose")
    assert metrics["canary_refused"] == 1 and metrics["canary_nll_rise"] > 100
    assert trainer.version == 0 and not (tmp_path / "run" / "checkpoints").exists()
    assert all(torch.equal(p, weights[n]) for n, p in trainer.model.named_parameters())  # undone
    assert trainer.optimizer.state_dict()["state"] == {}  # as before the (first) step
    turns = [t for s in export_records(store.run_dir)["sessions"] for t in s["turns"]]
    assert all(t["dropped"] == metrics["refused"] and t["trained_in_version"] is None for t in turns)
    status = read_status(tmp_path / "run")
    assert status["checks"] == 1 and status["refused"] == 1 and status["last_refusal"]["version"] == 1
    assert status["last_refusal"]["after"]["nll"] > status["last_refusal"]["before"]["nll"] + 100
    assert any(r.levelno == logging.WARNING and "canary refused version 1" in r.getMessage() for r in caplog.records)
    assert trainer.step() is None  # its turns are not retried


@pytest.mark.parametrize("lora_rank", [0, 4], ids=["full-weights", "lora"])
def test_a_healthy_update_passes_the_canary_and_is_published(tmp_path, lora_rank):
    trainer, store = gated_trainer(tmp_path, lr=1e-3, lora_rank=lora_rank)
    metrics = trainer.step()
    assert "refused" not in metrics and metrics["canary_refused"] == 0 and metrics["version"] == 1
    assert (tmp_path / "run" / "checkpoints" / "v000001").is_dir()
    state = json.loads((tmp_path / "run" / "checkpoints" / "v000001" / "trainer_state.json").read_text())
    assert state["metrics"]["canary_nll"] == metrics["canary_nll"]
    assert read_status(tmp_path / "run")["checks"] == 1 and read_status(tmp_path / "run")["refused"] == 0


# ---------------------------------------------------------------- acceptance: a real server


def chat(srv, messages, seed):
    return srv.chat(messages, seed=seed)


def feedback_round(srv, n: int = 2) -> None:
    for i, feedback in enumerate(["Thanks, perfect!", "No, that's wrong."][:n]):
        u = {"role": "user", "content": f"What is the capital of country {i}?"}
        reply = chat(srv, [u], seed=i)["choices"][0]["message"]["content"]
        chat(srv, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=100 + i)


def test_server_refuses_a_broken_version_and_keeps_serving_the_previous_one(make_server):
    srv = make_server(extra=["--method", "binary", "--batch-size", "2", "--lora-rank", "0", "--lr", "10"])
    feedback_round(srv)
    deadline = time.time() + 120
    while srv.health()["training"].get("canary", {}).get("refused", 0) < 1:
        assert time.time() < deadline, srv.log_tail()
        time.sleep(0.3)
    health = srv.health()
    assert health["policy_version"] == 0 and health["trained_turns"] == 0
    refusal = health["training"]["canary"]["last_refusal"]
    assert refusal["version"] == 1 and "reference NLL rose" in refusal["reasons"][0]
    assert not list((srv.run_dir / "checkpoints").glob("v*"))  # nothing published
    served = chat(srv, [{"role": "user", "content": "Hello?"}], seed=7)
    turns = [t for s in srv.records()["sessions"] for t in s["turns"]]
    assert [t["policy_version"] for t in turns if t["request_id"] == served["id"]] == [0]
    assert sum((t["dropped"] or "").startswith("canary refused: version 1: ") for t in turns) == 2
    assert srv.health()["dropped_by_reason"] == {"canary refused": 2}
    with urllib.request.urlopen(srv.base + "/metrics", timeout=30) as r:
        assert "openclaw_canary_refusals 1" in r.read().decode()
    assert "canary refused version 1" in srv.log_tail()
    import subprocess
    import sys

    text = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(srv.run_dir)],
                          capture_output=True, text=True, check=True).stdout
    assert text.count("dropped: canary refused: version 1: reference NLL rose") == 2


# ---------------------------------------------------------------- the default thresholds on the real model


@pytest.mark.slow
def test_smollm2_default_thresholds_pass_a_normal_step_and_refuse_a_broken_one(tmp_path):
    """smollm2-135m, LoRA, Binary RL on its own sampled answers: a step at lr 5e-4 (5x the default)
    passes the default canary; the next step at lr 10 is refused and the weights stay version 1's."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.logprobs import teacher_forced_logprobs
    from slime_ext.models import resolve_model
    from slime_ext.types import Turn

    model_dir = str(resolve_model("smollm2-135m"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    store = Store(tmp_path / "run")
    questions = ["Tell me a fun fact about cats.", "How do I boil an egg?", "What is photosynthesis?",
                 "Why is the sea salty?", "What is a prime number?", "Name three rivers in Europe.",
                 "Suggest a name for a dog.", "How far is the Moon?"]
    for i, q in enumerate(questions):
        prompt = PromptRenderer(tok).render([{"role": "user", "content": q}], [])
        response = base.generate(torch.tensor([prompt]), max_new_tokens=24, do_sample=True, temperature=0.7,
                                 pad_token_id=tok.pad_token_id)[0, len(prompt):].tolist()
        lps = teacher_forced_logprobs(base, prompt + response, len(prompt)).tolist()
        store.create_session(f"s{i}", None, "inferred")
        store.insert_turn(Turn(session_id=f"s{i}", index=0, main_line=True, reason="test", request_id=f"r{i}",
                               prompt_token_ids=prompt, response_token_ids=response, response_logprobs=lps,
                               response_text="x", policy_version=0, policy_version_end=0, finish_reason="length",
                               messages=[], reply_key=f"s{i}"))
        store.set_next_state(f"s{i}", 0, "feedback", "user")
        store.record_verdict(f"s{i}", 0, 1 if i % 2 else -1, [(1 if i % 2 else -1, "test")])
    cfg = TrainerConfig(method="binary", batch_size=4, lr=5e-4, max_staleness=100)
    trainer = OnlineTrainer(wrap_lora(base, cfg), store, tmp_path / "run", cfg, pad_id=tok.pad_token_id,
                            canary=Canary(CanaryConfig(), tok, store, tmp_path / "run"))
    healthy = trainer.step()
    assert healthy["version"] == 1 and healthy["canary_refused"] == 0, read_status(tmp_path / "run")
    assert healthy["canary_nll_rise"] < 0.1  # far inside the 0.25 limit
    weights = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if p.requires_grad}
    for group in trainer.optimizer.param_groups:
        group["lr"] = 10.0
    broken = trainer.step()
    assert broken["refused"].startswith("canary refused: version 2: reference NLL rose") and trainer.version == 1
    assert all(torch.equal(p, weights[n]) for n, p in trainer.model.named_parameters() if p.requires_grad)
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").glob("v*")) == ["v000001"]


@pytest.mark.slow
def test_smollm2_a_step_that_forgets_capitals_is_refused_though_its_nll_falls(tmp_path):
    """One LoRA step of SFT on "The capital of X is X." for 8 countries (none in the canary): the
    reference NLL falls and 5 of 8 canary questions are still answered (the older rules pass it), but
    a fifth of the facts smollm2 recalled are gone: the forgetting seen in the personalization
    experiment ("The capital of Sweden is Sweden."), refused by the forgotten rule alone."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.models import resolve_model

    model_dir = str(resolve_model("smollm2-135m"))
    tok = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = wrap_lora(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), TrainerConfig(lora_rank=16))
    canary = Canary(CanaryConfig(), tok, FakeStore([]), tmp_path)
    canary.prepare(model)
    assert len(canary.first_known) >= 30  # smollm2 recalls most of them
    render, end = PromptRenderer(tok).render, tok.convert_tokens_to_ids("<|im_end|>")
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=5e-4)
    for country in ["Germany", "Egypt", "Australia", "Ireland", "Norway", "Poland", "India", "Thailand"]:
        prompt = render([{"role": "user", "content": f"What is the capital of {country}?"}], [])
        answer = tok.encode(f"The capital of {country} is {country}.", add_special_tokens=False) + [end]
        logits = model(input_ids=torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1]
        (torch.nn.functional.cross_entropy(logits, torch.tensor(answer)) / 8).backward()
    optimizer.step()
    result = canary.check(model, 1)
    assert result.after.nll < canary.first.nll  # the NLL rule sees an improvement
    assert len(result.reasons) == 1 and result.reasons[0].startswith("forgot "), result.reasons
    assert result.after.forgotten > 0.15
