"""Where the embedded engine's decode step goes: the lean body and the logits, timed alone, per batch size.

Loads the model with the engine's decode paths as it wires them on a CPU with native bf16 (``decode_paths``:
bfloat16, linear layers packed for oneDNN, one row on the checkpoint's int4 weights), but on this script's own
thread, the only one that runs parallel work (as the engine's worker thread is). Then, for each number of rows,
it prefills that many copies of a prompt of ``--context`` tokens and times ``--steps`` decode steps of
``LeanDecode`` (the body: the decoder layers and the final norm) and of the output layer with its float32 top-32
(``head_logits``), each the best of ``--runs`` runs. Sampling, the HTTP server and the batch bookkeeping are
not in it: for what a user gets, see ``generation_throughput.py`` and ``vs_llamacpp.py``. Prints a table and
writes ``bench/results/decode_step.json``. Nothing is asserted.

  python bench/decode_step.py                          # smollm2-135m, 1 / 8 / 16 rows, 2 threads
  python bench/decode_step.py --rows 1 --context 1000
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_info, main_of, md_table, parse_int_list  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="built-in model or checkpoint dir [smollm2-135m]")
    p.add_argument("--rows", default="1,8,16", help="comma-separated batch sizes [1,8,16]")
    p.add_argument("--context", type=int, default=150, help="cached tokens before the timed steps [150]")
    p.add_argument("--steps", type=int, default=50, help="decode steps per run [50]")
    p.add_argument("--runs", type=int, default=5, help="runs per figure; the best is kept [5]")
    p.add_argument("--threads", type=int, default=2, help="torch threads [2]")
    p.add_argument("--out", default=None, help="JSON output path [bench/results/decode_step.json]")
    return p.parse_args(argv)


def best_ms(fn, steps: int, runs: int) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        best = min(best, (time.perf_counter() - start) / steps * 1000)
    return round(best, 2)


async def run(args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from slime_ext.engines.local import decode_paths
    from slime_ext.engines.packed import pack_weight
    from slime_ext.models import resolve_model

    torch.set_num_threads(args.threads)
    model = AutoModelForCausalLM.from_pretrained(str(resolve_model(args.model)), dtype=torch.bfloat16).eval()
    model.requires_grad_(False)
    lean, packed = decode_paths(model, "bf16")  # as the engine wires them on a CPU with native bf16
    if lean is None or packed is None:
        raise SystemExit(f"{args.model}: not an architecture the lean decode step knows (engines/decode.py), "
                         "or this torch build has no oneDNN packing")
    head = model.get_output_embeddings().weight
    head_packed, head_fp32 = pack_weight(head), head.float()
    levels = {}
    with torch.inference_mode():
        for rows in parse_int_list(args.rows):
            levels[rows] = time_rows(model, lean, packed, head_packed, head_fp32, rows, args)
            print(f"  {rows} rows: body {levels[rows]['body_ms']} ms, logits {levels[rows]['logits_ms']} ms",
                  file=sys.stderr)
    return {"args": vars(args), "env": env_info(), "groups": len(lean.groups), "levels": levels}


def time_rows(model, lean, packed, head_packed, head_fp32, rows: int, args: argparse.Namespace) -> dict:
    """``rows`` copies of a ``--context``-token prompt prefilled, then the body and the logits timed."""
    import torch

    from slime_ext.engines.local import _growing_cache
    from slime_ext.engines.packed import head_logits

    cache = _growing_cache(model.config)
    model.model(input_ids=torch.arange(100, 100 + args.context).repeat(rows, 1), cache=cache, use_cache=True)
    token = torch.full((rows, 1), 42)
    position = [args.context]  # where the next token sits; each step appends one to the cache

    def body():
        p = position[0]
        position[0] += 1
        return lean(token, torch.full((rows, 1), p), torch.ones(rows, p + 1, dtype=torch.long), cache)

    hidden = body()
    int4 = sum(s is not None for s in packed.steps(lean.groups, torch.bfloat16)) if rows == 1 else 0
    return {"body_ms": best_ms(body, args.steps, args.runs),
            "logits_ms": best_ms(lambda: head_logits(hidden, head_packed, head_fp32), args.steps, args.runs),
            "int4_groups": int4, "context_end": position[0]}


def report(result: dict) -> str:
    a = result["args"]
    rows = [[n, v["body_ms"], v["logits_ms"], f"{v['int4_groups']} of {result['groups']}" if int(n) == 1 else "-"]
            for n, v in result["levels"].items()]
    return "\n".join([f"## Decode step of {a['model']}: {a['threads']} threads, {a['context']}+ cached tokens, best of "
                      f"{a['runs']} runs of {a['steps']} steps", "",
                      md_table(["rows", "body ms", "logits ms (alone)", "groups on int4"], rows)])


if __name__ == "__main__":
    sys.exit(main_of("decode_step", parse_args, run, report))
