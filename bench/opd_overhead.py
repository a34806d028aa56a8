"""What OPD adds per judged turn: hint judging and teacher scoring.

- Hint judging: ``HintJudge`` with the heuristic backend (the default judge) over a mix of next
  states (thanks, corrections with and without an instruction), wall time per turn; with
  ``--self-judge`` also the ``self`` judge (the served model, adapter disabled) through a real
  ``LocalEngine``: 3 votes of up to ``--judge-tokens`` tokens each.
- Teacher scoring: what the trainer does for each hinted turn, on the model in float32 with one
  thread (as the trainer process runs): render the teacher prompt (request + hint), one
  teacher-forced pass with the LoRA adapter disabled (the base teacher), the log-probs of the
  recorded response tokens, and (``--distill topk``) the teacher's top-k. For several prompt and
  response lengths.
Prints Markdown tables and writes ``bench/results/opd_overhead.json``. Nothing is asserted.

  python bench/opd_overhead.py                    # smollm2-135m
  python bench/opd_overhead.py --self-judge       # adds the self judge (slow on CPU)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_info, main_of, md_table, summary  # noqa: E402

NEXT_STATES = ["Thanks, perfect!", "No. Answer with a single word.", "No, that's wrong.",
               "You should have checked the file first. Please run the tests next time.", "Great, thank you!",
               "Don't use bullet points, just write one short paragraph."]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--turns", type=int, default=200, help="turns for the heuristic hint judge")
    p.add_argument("--repeats", type=int, default=3, help="teacher passes per size")
    p.add_argument("--topk", type=int, default=16)
    p.add_argument("--self-judge", action="store_true", help="also time the self judge (3 votes per turn)")
    p.add_argument("--judge-tokens", type=int, default=256)
    p.add_argument("--threads", type=int, default=1, help="torch threads for teacher scoring (the trainer's)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out")
    args = p.parse_args(argv)
    if args.quick:
        args.turns, args.repeats = 50, 1
    return args


def prompt_of(n_words: int) -> list[dict]:
    text = " ".join(f"word{i}" for i in range(n_words))
    return [{"role": "system", "content": "You are a helpful assistant. " + text},
            {"role": "user", "content": "Summarize the above in one sentence."}]


async def run(args):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.algorithms.topk import teacher_topk
    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.judge import HeuristicBackend, HintJudge, Judge, JudgeInput
    from slime_ext.learning.teacher import teacher_prompt_ids
    from slime_ext.logprobs import teacher_forced_logits
    from slime_ext.models import resolve_model
    from slime_ext.trainers.loop import TrainerConfig, wrap_lora

    out = {"env": env_info(), "model": args.model}
    hints = HintJudge.from_judge(Judge(HeuristicBackend()))
    inputs = [JudgeInput([{"role": "user", "content": "What is the capital of France?"}], "The capital of France is Paris.",
                         None, NEXT_STATES[i % len(NEXT_STATES)], "user") for i in range(args.turns)]
    times, accepted = [], 0
    for inp in inputs:
        t0 = time.perf_counter()
        verdict = await hints.hint(inp)
        times.append(time.perf_counter() - t0)
        accepted += verdict.hint is not None
    out["heuristic_hint_s"] = summary(times)
    out["heuristic_hint_accepted"] = accepted / len(inputs)

    model_dir = resolve_model(args.model, progress=lambda m: print(m, file=sys.stderr))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    renderer = PromptRenderer(tok)
    if args.self_judge:
        from slime_ext.engines.local import LocalEngine
        from slime_ext.judge import EngineJudgeBackend

        eng = LocalEngine(model_dir, dtype="float32", threads=max(1, (os.cpu_count() or 1) - 1))
        try:
            judge = HintJudge.from_judge(Judge(EngineJudgeBackend(eng, tok, frozen_base=True,
                                                                  max_new_tokens=args.judge_tokens)))
            times = []
            for inp in inputs[:3]:
                t0 = time.perf_counter()
                await judge.hint(inp)
                times.append(time.perf_counter() - t0)
            out["self_hint_s"] = summary(times)
        finally:
            await eng.close()

    torch.set_num_threads(args.threads)
    cfg = TrainerConfig(lora_rank=16)
    model = wrap_lora(AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32), cfg).eval()
    rows = []
    for words, resp_len in ((5, 24), (300, 24), (300, 128), (1500, 128)):
        messages = prompt_of(words)
        response = tok.encode(" ".join(["fine"] * resp_len), add_special_tokens=False)[:resp_len]
        render_s, score_s, topk_s = [], [], []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            prompt = teacher_prompt_ids(renderer, messages, "Answer with a single word.")
            t1 = time.perf_counter()
            with model.disable_adapter():
                logits = teacher_forced_logits(model, prompt + response, len(prompt))
            torch.log_softmax(logits, -1).gather(1, torch.tensor(response)[:, None])
            t2 = time.perf_counter()
            teacher_topk(logits[None], args.topk)
            t3 = time.perf_counter()
            render_s.append(t1 - t0)
            score_s.append(t2 - t1)
            topk_s.append(t3 - t2)
        rows.append({"prompt_tokens": len(prompt), "response_tokens": len(response), "render_s": summary(render_s),
                     "score_s": summary(score_s), "topk_s": summary(topk_s)})
        print(f"teacher: {len(prompt)} + {len(response)} tokens: {summary(score_s)['p50']:.3f} s", file=sys.stderr)
    out["teacher"] = rows
    out["threads"] = args.threads
    out["env"]["loadavg_end"] = os.getloadavg()
    return out


def report(r) -> str:
    text = [f"## OPD overhead per judged turn ({r['model']})", "",
            md_table(["hint judge", "n", "p50 (ms)", "max (ms)"],
                     [["heuristic", r["heuristic_hint_s"]["n"], r["heuristic_hint_s"]["p50"] * 1e3,
                       r["heuristic_hint_s"]["max"] * 1e3]]
                     + ([["self (3 votes)", r["self_hint_s"]["n"], r["self_hint_s"]["p50"] * 1e3, r["self_hint_s"]["max"] * 1e3]]
                        if "self_hint_s" in r else [])), "",
            f"The heuristic accepted a hint for {r['heuristic_hint_accepted']:.0%} of the mixed next states.", "",
            f"Teacher scoring in the trainer ({r['threads']} thread, float32, adapter disabled):", "",
            md_table(["prompt tokens", "response tokens", "render (ms)", "teacher pass p50 (s)", "top-k (ms)"],
                     [[t["prompt_tokens"], t["response_tokens"], t["render_s"]["p50"] * 1e3, t["score_s"]["p50"],
                       t["topk_s"]["p50"] * 1e3] for t in r["teacher"]])]
    return "\n".join(text)


if __name__ == "__main__":
    sys.exit(main_of("opd_overhead", parse_args, run, report))
