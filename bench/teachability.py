"""Does SmolLM2 (or any model) follow a hint? The teachability measure of ``trainers/teachability.py``
(the hint's gap on the teacher's own greedy answer, and whether that answer differs from the
unhinted one) for a few hints over a few questions; chooses ``--teacher-min-gap``.

    .venv/bin/python bench/teachability.py --model smollm2-135m
"""

from __future__ import annotations

import argparse
import statistics
import time

QUESTIONS = ["What is the capital of France?", "How do I boil an egg?", "Why is the sky blue?",
             "What is a prime number?", "Name three rivers in Europe.", "How far is the Moon?",
             "What does a bee eat?", "Suggest a name for a dog."]
HINTS = ["Answer in one short sentence.", "Write everything in lowercase.", "Start your answer with 'Sure!'.",
         "End your answer with a question to the user."]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--questions", type=int, default=len(QUESTIONS))
    p.add_argument("--hints", nargs="*", default=HINTS)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
    from slime_ext.learning.scorers import TorchScorer
    from slime_ext.learning.settings import TeacherCheckConfig
    from slime_ext.learning.teachability import TeacherChecker
    from slime_ext.learning.teacher import teacher_prompt_ids
    from slime_ext.models import resolve_model

    torch.set_num_threads(args.threads)
    model_dir = str(resolve_model(args.model))
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    renderer = PromptRenderer(tok)
    checker = TeacherChecker(TeacherCheckConfig(max_new_tokens=args.tokens, per_hint=0), tok)
    teacher = TorchScorer.of(model, stop_token_ids(tok))
    for hint in args.hints:
        gaps, same, secs = [], 0, []
        for q in QUESTIONS[: args.questions]:
            msgs = [{"role": "user", "content": q}]
            prompt = renderer.render(msgs, [], "auto")
            c = checker.check(teacher, prompt, teacher_prompt_ids(renderer, msgs, hint), hint)
            gaps.append(c.gap)
            same += c.same_answer
            secs.append(c.seconds)
            print(f"  {hint[:32]!r:36s} {q[:28]!r:32s} gap {c.gap:+.3f} same {c.same_answer!s:5s} "
                  f"{c.tokens:2d} tok {c.seconds:.1f}s  {c.sample[:60]!r}", flush=True)
        print(f"{hint!r}: gap mean {statistics.mean(gaps):+.3f} median {statistics.median(gaps):+.3f} "
              f"min {min(gaps):+.3f} max {max(gaps):+.3f}; same answer {same}/{len(gaps)}; "
              f"{statistics.mean(secs):.2f} s per check", flush=True)


if __name__ == "__main__":
    t = time.time()
    main()
    print(f"total {time.time() - t:.0f} s")
