"""A full learning cycle on the real SmolLM2-135M-Instruct with LoRA, on CPU, through the HTTP API.

Serve -> the user's next message -> heuristic judge -> Binary RL step in the trainer process ->
checkpoint -> swap. Then the published adapter, loaded independently with peft, must raise the
log-probs of the positively judged responses and lower those of the negatively judged ones,
measured against the log-probs recorded when they were sampled (policy version 0 = the base). The
requests name no temperature, so they are sampled at the model's own defaults (0.2 / 0.9), and
log-probs are compared at that temperature, the distribution the engine recorded them under.
"""

from __future__ import annotations

import time

import pytest
import torch

from slime_ext.logprobs import scoring_temperature, teacher_forced_logprobs
from slime_ext.models import resolve_model

PROMPTS = [
    ("What is the capital of France?", "Thanks, that's perfect!"),
    ("Give me a word that rhymes with cat.", "No, that's wrong. Try again."),
    ("Name a primary colour.", "Great, thank you!"),
    ("How many legs does a spider have?", "That's not what I asked. Wrong answer."),
]


def chat(srv, messages, seed):
    return srv.chat(messages, seed=seed, max_tokens=24, timeout=300)


def test_lora_cycle_on_smollm2_moves_logprobs_the_way_the_verdicts_say(make_server):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    # float32: the recorded log-probs are compared with a float32 forward pass to 1e-2 per token.
    # --no-canary: this test checks where version 1 moves the log-probs; whether the canary serves it
    # depends on what the seeds draw (at 0.2 / 0.9 SmolLM2 answers "L'Étoile, la Marseillaise, ..." to
    # one question 36% of the time, and one step on that lost the canary's answers), and a refused
    # version 1 leaves nothing to check. The canary has its own tests.
    srv = make_server(model="smollm2-135m", extra=["--method", "binary", "--batch-size", "4", "--lora-rank", "8",
                                                   "--lr", "5e-4", "--status-interval-s", "0", "--dtype", "float32",
                                                   "--no-canary"])
    for i, (question, feedback) in enumerate(PROMPTS):
        u = {"role": "user", "content": question}
        reply = chat(srv, [u], seed=i)["choices"][0]["message"]["content"]
        chat(srv, [u, {"role": "assistant", "content": reply}, {"role": "user", "content": feedback}], seed=50 + i)
    deadline = time.time() + 600
    while srv.health()["policy_version"] < 1:
        assert time.time() < deadline, srv.log_tail()
        time.sleep(1)
    after = chat(srv, [{"role": "user", "content": "Hello!"}], seed=9)  # served by the swapped-in version
    turns = [t for s in srv.records()["sessions"] for t in s["turns"]]
    (served,) = [t for t in turns if t["request_id"] == after["id"]]
    assert served["policy_version"] == 1
    trained = [t for t in turns if t["trained_in_version"] == 1]
    assert sorted(t["verdict"] for t in trained) == [-1, -1, 1, 1]

    base = AutoModelForCausalLM.from_pretrained(str(resolve_model("smollm2-135m")), dtype=torch.float32)
    tuned = PeftModel.from_pretrained(base, str(srv.run_dir / "checkpoints" / "v000001")).eval()
    for t in trained:
        prompt, response = t["prompt_token_ids"], t["response_token_ids"]
        assert (t["sampling"]["temperature"], t["sampling"]["top_p"]) == (0.2, 0.9)  # the model's defaults
        temperature = scoring_temperature(t["sampling"]["temperature"])
        with torch.no_grad():
            new = teacher_forced_logprobs(tuned, prompt + response, len(prompt), temperature).sum().item()
            with tuned.disable_adapter():
                old = teacher_forced_logprobs(tuned, prompt + response, len(prompt), temperature).sum().item()
        assert abs(old - sum(t["response_logprobs"])) < 1e-2 * len(response)  # recorded under the base
        assert (new - old) * t["verdict"] > 0, (t["verdict"], old, new)


@pytest.mark.slow
def test_serve_defaults_on_smollm2_teach_a_preference_through_the_teacher_check_and_the_canary(make_server):
    """``make serve``'s defaults (combine, batch 4, LoRA 16, canary on, teacher check on, unfollowed hints dropped)
    on the real model: a user asks eight questions and answers each with a standing length preference SmolLM2
    mostly follows when told. Every turn of the first step was scored by the hinted teacher and checked (it
    follows the hint there); a turn whose check says the teacher does not follow it there is dropped, with the
    check shown; and the canary probes the version before it may be served."""
    from slime_ext.simulate.questions import preference_tasks

    srv = make_server(model="smollm2-135m", extra=["--method", "combine", "--status-interval-s", "0",
                                                   "--default-max-tokens", "64"])
    for i, q in enumerate(preference_tasks("train", 8, seed=0)):
        u = {"role": "user", "content": q.prompt}
        reply = chat(srv, [u], seed=i)["choices"][0]["message"]["content"]
        chat(srv, [u, {"role": "assistant", "content": reply},
                   {"role": "user", "content": "From now on, answer in one short sentence."}], seed=50 + i)
    deadline = time.time() + 900
    while srv.health()["training"].get("canary", {}).get("checks", 0) < 1:
        assert time.time() < deadline, srv.log_tail()
        time.sleep(1)
    canary = srv.health()["training"]["canary"]["last"]
    turns = [t for s in srv.records()["sessions"] for t in s["turns"] if t["next_state"]]
    assert len(turns) == 8 and all(t["hint"] == "Answer in one short sentence." for t in turns)
    stepped = [t for t in turns if t["trained_in_version"] == 1 or (t["dropped"] or "").startswith("canary refused")]
    assert len(stepped) == 4 and canary["version"] == 1 and (canary["accepted"] == (stepped[0]["trained_in_version"] == 1))
    assert all(t["teacher_check"]["follows"] and len(t["teacher_logprobs"]) == len(t["response_token_ids"])
               for t in stepped)
    unfollowed = [t for t in turns if (t["dropped"] or "").startswith("teacher does not follow the hint")]
    assert all(t["teacher_check"]["follows"] is False for t in unfollowed)
