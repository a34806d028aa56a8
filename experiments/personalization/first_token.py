"""Where the teacher's mass at the first response position goes, and what a training step does to it.

    .venv/bin/python experiments/personalization/first_token.py [--persona so] [--distill token,forward_kl]

Issue 28, item 3: an opener the hinted teacher follows about half the time ("start with 'So,'") was
never learned; the student never samples "So", and token-level OPD only re-weights the tokens it
sampled. This measures, on smollm2-135m with the real trainer (``OnlineTrainer``, the pipeline, the
step), one thread:

1. at the first response position of the 12 held-out questions: the teacher's probability of the
   opener's first token (the base shown the preference in the hint block, as the trainer shows it),
   its rank in the teacher's top-k, and the student's probability (the base without it);
2. turns served with the preference memory (the persona's preference, as the judge reads it from its
   correction; the served answer sampled by the base with the memory, temperature 0.2 as served),
   recorded with verdict 0 so that only the distillation term trains, 4 a step for ``--steps``
   steps, with each ``--distill`` kind; after each step: the student's probability of the opener's
   first token at the first position of the held-out questions without the memory, and at the end
   its greedy answers' compliance and held-out correctness.

Prints one table per kind. About 1-2 minutes per kind on the 2-core CPU.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

import torch

from slime_ext.chat.prompt import PromptRenderer
from slime_ext.learning.teacher import teacher_prompt_ids
from slime_ext.models import resolve_model
from slime_ext.simulate.personas import get_persona
from slime_ext.simulate.questions import correctness_tasks, preference_tasks
from slime_ext.store import Store
from slime_ext.trainers.canary_data import holds_key
from slime_ext.trainers.loop import OnlineTrainer, TrainerConfig, wrap_lora

from memory_formats import greedy, record_served, stated_hint  # beside this script


def first_position(model, prompt: list[int]) -> torch.Tensor:
    """The model's log-distribution of the first response token after ``prompt``."""
    with torch.no_grad():
        return torch.log_softmax(model(input_ids=torch.tensor([prompt])).logits[0, -1].float(), -1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--persona", default="so")
    ap.add_argument("--distill", default="token,forward_kl")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--model", default="smollm2-135m")
    args = ap.parse_args()
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = resolve_model(args.model)
    renderer = PromptRenderer(AutoTokenizer.from_pretrained(model_dir))
    persona = get_persona(args.persona)
    heldout = preference_tasks("heldout", 12, 0)
    train = preference_tasks("train", 4 * args.steps, 0)
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    hint = stated_hint(persona)
    target = renderer.tokenizer.encode("So")[0] if args.persona == "so" else None
    print(f"persona {args.persona}: hint {hint!r}; the opener's first token {target}")

    def asked(t):
        return [{"role": "user", "content": persona.first_message(t)}]

    teacher_p, student_p, ranks = [], [], []
    for t in heldout:
        tl = first_position(base, teacher_prompt_ids(renderer, asked(t), [hint]))
        sl = first_position(base, renderer.render(asked(t), []))
        teacher_p.append(tl[target].exp().item())
        student_p.append(sl[target].exp().item())
        ranks.append(int((tl > tl[target]).sum()) + 1)
        top = torch.topk(tl.exp(), 3)
        print(f"  {persona.first_message(t)[:40]!r:44} teacher p={teacher_p[-1]:.3f} (rank {ranks[-1]}; top "
              f"{[(renderer.tokenizer.decode([i]), round(p, 3)) for p, i in zip(top.values.tolist(), top.indices.tolist())]}),"
              f" student p={student_p[-1]:.4f}")
    print(f"mean at the first position: teacher {statistics.fmean(teacher_p):.3f}, student {statistics.fmean(student_p):.4f}")

    for kind in args.distill.split(","):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        run = Path(tempfile.mkdtemp()) / "run"
        store = Store(run)
        for i, t in enumerate(train):
            record_served(store, model, renderer, f"s{i}", asked(t), hint, "ok", 0, "only the distillation term")
        cfg = TrainerConfig(method="combine", distill=kind, batch_size=4, lr=args.lr)
        trainer = OnlineTrainer(wrap_lora(model, cfg), store, run, cfg, renderer=renderer)
        print(f"\n--distill {kind} (lr {args.lr}): student p(first token) at the first position, no memory")
        for step in range(args.steps + 1):
            if step:
                m = trainer.step()
                if not m:
                    print("  no step")
                    break
            with torch.no_grad():
                p = [first_position(trainer.model, renderer.render(asked(t), []))[target].exp().item() for t in heldout]
            shown = {k: round(v, 3) for k, v in (m if step else {}).items()
                     if k in ("grad_norm", "loss", "topk_forward_kl", "topk_reverse_kl", "teacher_gap_mean")
                     and isinstance(v, float)}
            print(f"  after {step} steps: {statistics.fmean(p):.4f} {shown}")
        answers = [greedy(trainer.model, renderer, asked(t)) for t in heldout]
        kept = statistics.fmean(persona.score(t, a) for t, a in zip(heldout, answers))
        general = correctness_tasks()
        replies = [greedy(trainer.model, renderer, [{"role": "user", "content": q.prompt}]) for q in general]
        correct = statistics.fmean(holds_key(q.keys, r) for q, r in zip(general, replies))
        print("  general:", [r[:60] for r in replies[:4]])
        print(f"  greedy held-out compliance {kept:.3f}, correctness {correct:.2f}, words "
              f"{statistics.fmean(len(a.split()) for a in answers):.1f}; e.g. {answers[0][:80]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
