"""Where and how the preference memory is written, measured on the served model (issue 28, item 1).

    .venv/bin/python experiments/personalization/memory_formats.py [--personas one_sentence,under_ten,so]

For each persona (its preference as the heuristic judge reads it from the persona's correction) and
each candidate way of showing the memory to the model (``FORMATS``), the base model's greedy answers
(48 tokens, one thread) to the 12 held-out questions are scored by the persona (the experiment's
all-or-nothing compliance), and its answers to the 16 held-out general questions for correctness (the
key word held). No memory is the base model. Prints one line per (persona, format).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from slime_ext.chat.memory import memory_block, with_memory
from slime_ext.chat.prompt import PromptRenderer
from slime_ext.judge.heuristic import heuristic_hint
from slime_ext.learning.teacher import teacher_messages
from slime_ext.models import resolve_model
from slime_ext.simulate.personas import get_persona
from slime_ext.simulate.questions import correctness_tasks, preference_tasks
from slime_ext.trainers.canary_data import holds_key
from slime_ext.types import Turn


def _user_reminder(messages, hints):
    """The block in the system message, and a one-line reminder at the end of the latest user message."""
    out = with_memory(messages, hints, "system")
    last = dict(out[-1])
    last["content"] = f"{last['content']}\n\n(Remember: {' '.join(h.strip() for h in hints)})"
    return [*out[:-1], last]


FORMATS = {
    "none": lambda messages, hints: messages,
    "system": lambda messages, hints: with_memory(messages, hints, "system"),
    "user": lambda messages, hints: with_memory(messages, hints, "user"),
    "hint block (the teacher's)": lambda messages, hints: teacher_messages(messages, hints),
    "system + user reminder": _user_reminder,
}


def stated_hint(persona) -> str:
    """The persona's preference as the heuristic judge reads it from the persona's correction of an answer that
    holds the key but misses the preference (long, and opening with the key word)."""
    for task in preference_tasks("train", 28, 0):
        answer = f"{task.keys[0].capitalize()} " + "and a few more words " * 6 + "."
        hint = heuristic_hint(persona.reply(task, answer), "user")
        if hint:
            return hint
    raise ValueError(f"{persona.name}: no correction names the preference")


def record_served(store, model, renderer, sid: str, messages, hint: str, follow_up: str, verdict: int, why: str,
                  given: list[int] = ()) -> None:
    """Serve ``messages`` as the server does with the memory ``[hint]`` (the block in the system message; ``given``:
    the opening's tokens, written first and recorded at log-prob 0) and the rest sampled by ``model`` (48 tokens,
    temperature 0.2, top-p 0.9); record the turn in ``store`` for user "ann", its ``follow_up`` and ``verdict``."""
    served = with_memory(messages, [hint])
    prompt, given = renderer.render(served, []), list(given)
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt + given]), max_new_tokens=48, do_sample=True, temperature=0.2,
                             top_p=0.9)[0, len(prompt) + len(given):].tolist()
        logits = model(input_ids=torch.tensor([prompt + given + out])).logits[0, len(prompt + given) - 1:-1]
        lps = torch.log_softmax(logits.float() / 0.2, -1).gather(1, torch.tensor(out)[:, None])[:, 0].tolist()
    store.create_session(sid, "ann", "inferred")
    store.insert_turn(Turn(session_id=sid, index=0, main_line=True, reason="served", request_id=sid,
                           prompt_token_ids=prompt, response_token_ids=given + out,
                           response_logprobs=[0.0] * len(given) + lps,
                           response_text=renderer.tokenizer.decode(given + out), policy_version=0, policy_version_end=0,
                           finish_reason="stop", messages=served, reply_key=sid, user="ann", memory=[hint],
                           sampling={"temperature": 0.2, **({"forced_tokens": len(given)} if given else {})}))
    store.set_next_state(sid, 0, follow_up, "user")
    store.record_verdict(sid, 0, verdict, [(verdict, why)])


def greedy(model, renderer, messages, n: int = 48) -> str:
    prompt = renderer.render(messages, [])
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)[0, len(prompt):]
    return renderer.tokenizer.decode(out, skip_special_tokens=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--personas", default="one_sentence,under_ten,so")
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = resolve_model(args.model)
    renderer = PromptRenderer(AutoTokenizer.from_pretrained(model_dir))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    heldout, general = preference_tasks("heldout", 12, 0), correctness_tasks()
    print(f"memory block: {memory_block(['<preference>'])!r}")
    for name in args.personas.split(","):
        persona = get_persona(name)
        hints = [stated_hint(persona)]
        for fmt in args.formats.split(","):
            show = FORMATS[fmt]
            answers = [greedy(model, renderer, show([{"role": "user", "content": persona.first_message(t)}], hints))
                       for t in heldout]
            kept = statistics.fmean(persona.score(t, a) for t, a in zip(heldout, answers))
            correct = statistics.fmean(holds_key(q.keys, greedy(model, renderer, show([{"role": "user", "content": q.prompt}], hints)))
                                       for q in general)
            words = statistics.fmean(len(a.split()) for a in answers)
            print(f"{name:13} {fmt:28} complies {kept:.3f}  correct {correct:.2f}  words {words:5.1f}  "
                  f"e.g. {answers[0][:60]!r}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
