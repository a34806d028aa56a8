"""What the weights would do if the memory's given opening ("So,") were trained, step by step (issue 28).

    .venv/bin/python experiments/personalization/given_opening.py [--seed 0] [--steps 6] [--given-weight 1]

The product never trains the tokens the memory gave (``Example.sample``: they carry no loss). This measures
the alternative on smollm2-135m with the real trainer (``OnlineTrainer``: Combine, the default token-level
teacher term, lr 5e-4, no canary), one thread. Turns are served as the product serves a `so` user after the
preference is stored: the memory block in the system message, "So," given as the first tokens, the rest
sampled at temperature 0.2; each is approved (+1), 4 a step. Trained as the product trains them (without
the memory), except that the given tokens carry loss: their verdict term at ``--given-weight`` (instead of
the truncated importance weight, which is the student's own p("So") ~ 0.0002) and their teacher term as it
is (the frozen base shown the preference).

After each step it prints the student's mean p("So") at the first response position of the 12 held-out
questions (no memory), its greedy compliance there, and its greedy correctness on the 16 general questions:
what the canary and the weights-alone probe would see. About 6 minutes a seed.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from slime_ext.chat.prompt import PromptRenderer
from slime_ext.learning import example
from slime_ext.models import resolve_model
from slime_ext.simulate.personas import get_persona
from slime_ext.simulate.questions import correctness_tasks, preference_tasks
from slime_ext.store import Store
from slime_ext.trainers.canary_data import holds_key
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora

from memory_formats import greedy, record_served, stated_hint  # beside this script


def train_given_tokens(weight: float) -> None:
    """Make ``Example.sample`` give the memory's given tokens loss: the verdict term at ``weight``, the teacher
    term as computed (the experiment's one change to the trainer)."""
    product = example.Example.sample

    def sample(self):
        s = product(self)
        if self.forced and self.verdict > 0:
            s.loss_mask = [1] * len(s.loss_mask)
            weights = list(self.verdict_weights or [1.0] * len(self.response_ids))
            weights[:self.forced] = [weight] * self.forced
            s.metadata["verdict_weights"] = weights
        return s

    example.Example.sample = sample


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--given-weight", type=float, default=1.0)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    torch.set_num_threads(1)
    train_given_tokens(args.given_weight)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = resolve_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = PromptRenderer(tokenizer)
    persona = get_persona("so")
    heldout, general = preference_tasks("heldout", 12, 0), correctness_tasks()
    hint = stated_hint(persona)
    first, given = tokenizer.encode("So")[0], tokenizer.encode("So,", add_special_tokens=False)

    def asked(t):
        return [{"role": "user", "content": persona.first_message(t)}]

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    run = Path(tempfile.mkdtemp()) / "run"
    store = Store(run)
    for i, t in enumerate(preference_tasks("train", 4 * args.steps, args.seed)):
        record_served(store, model, renderer, f"s{i}", asked(t), hint, "Thanks!", 1, "approved", given=given)
    cfg = TrainerConfig(method="combine", batch_size=4, lr=args.lr)
    trainer = OnlineTrainer(wrap_lora(model, cfg), store, run, cfg, renderer=renderer)
    print(f"seed {args.seed}, given tokens {given} at verdict weight {args.given_weight}, lr {args.lr}")
    for step in range(args.steps + 1):
        if step and not trainer.step():
            print("  no step")
            break
        with torch.no_grad():
            p = [torch.softmax(trainer.model(input_ids=torch.tensor([renderer.render(asked(t), [])])).logits[0, -1]
                               .float(), -1)[first].item() for t in heldout]
        answers = [greedy(trainer.model, renderer, asked(t)) for t in heldout]
        replies = [greedy(trainer.model, renderer, [{"role": "user", "content": q.prompt}]) for q in general]
        wrong = [r for q, r in zip(general, replies) if not holds_key(q.keys, r)]
        print(f"  after {step} steps: p(So) {statistics.fmean(p):.4f}, held-out compliance "
              f"{statistics.fmean(persona.score(t, a) for t, a in zip(heldout, answers)):.3f}, general correct "
              f"{1 - len(wrong) / len(general):.2f}" + (f"; e.g. {wrong[0][:40]!r}" if wrong else ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
