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
