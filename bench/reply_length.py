"""How long the default model's replies to a new user's open prompts run, and how many fall into a loop.

Generates, in-process on the embedded ``LocalEngine`` (no HTTP: the server adds nothing to what is sampled),
a reply to each of the 40 open prompts of ``bench/prompts.py`` (``NEW_USER``: questions, explanations, poems,
"tell me about X", how-tos) for each of ``--seeds`` seeds, with what a request that names no sampling gets from
the server: the prompt rendered by the server's ``PromptRenderer`` (the model's chat template), the model's
sampling defaults (``generation_config.json``: smollm2-135m 0.2 / 0.9), the server's stop ids, at ``--max-tokens``
(512: ``--default-max-tokens``). The replies of one seed are decoded together (one batch); the seconds a
token costs one user are measured apart, one stream alone (``--timing-tokens``), on the same threads.

Per reply: its tokens, whether it ended with EOS (natural) or at ``--max-tokens``, and whether it fell into a loop:

- fell into a loop (the reference, independent of the stop's rule): it ran to ``--max-tokens`` and at least half
  of the 8-grams (8 tokens in a row) of its last 64 tokens had occurred earlier in the reply: it was saying again,
  word for word, what it had said, counters and all ("Step 7: ... Step 8: ..." changes one 8-gram in a few);
- where the loop began: the end of the last 64-token window in which most 8-grams were new; from there to the end
  is the loop's cost, in tokens, and in seconds at one stream's rate.

Then replays every reply through the server's repetition stop (``slime_ext/chat/repetition.py``, the rule of
``--repetition-stop on``) token by token, as the server feeds it: how many loops it ends, how soon, the tokens and
seconds it saves, and which replies that ended with EOS it would have cut, and how much of what it cut was new
text; and, for each default reply length up to ``--max-tokens``, with the stop and without: how many of the replies
that do not loop would finish, the tokens loops would still cost, and the mean reply length.

  .venv/bin/python bench/reply_length.py                   # 40 prompts x 10 seeds, 1 thread: ~15 min on 2 cores
  .venv/bin/python bench/reply_length.py --from-json bench/results/reply_length.json   # re-analyse, no model
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import env_info, md_table, percentile, write_json  # noqa: E402
from prompts import NEW_USER, new_user_prompts  # noqa: E402

from slime_ext.chat.repetition import MAX_PERIOD, MIN_TOKENS, REPEATS, RepetitionStop  # noqa: E402

CAPS = (128, 192, 256, 320, 384, 448, 512)  # default lengths whose share of natural replies is printed
# the stop's rule with other parameters, on the same replies: (max_period, repeats, min_tokens); the first is the default
RULES = ((MAX_PERIOD, REPEATS, MIN_TOKENS), (64, 3, 32), (256, 3, 32), (256, 2, 64), (256, 2, 96), (256, 2, 160))
NGRAM, WINDOW = 8, 64  # reference loop: at least half of the 8-grams of the last 64 tokens said before


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="built-in model or checkpoint dir [smollm2-135m]")
    p.add_argument("--seeds", default="0,1,2,3,4,5,6,7,8,9",
                   help="comma-separated seeds; request i of seed s uses s * 1000 + i [0,...,9]")
    p.add_argument("--max-tokens", type=int, default=512, help="max_tokens per reply [512]")
    p.add_argument("--threads", type=int, default=1, help="engine torch threads [1]")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"], help="engine dtype [auto]")
    p.add_argument("--timing-tokens", type=int, default=256, help="tokens of the one-stream timing run [256]")
    p.add_argument("--from-json", default=None, help="re-analyse the replies of an earlier run's JSON (no model)")
    p.add_argument("--out", default=None, help="JSON output path [bench/results/reply_length.json]")
    return p.parse_args(argv)


async def generate(args) -> dict:
    import torch
    from transformers import AutoTokenizer

    from slime_ext.chat.prompt import PromptRenderer, stop_token_ids
    from slime_ext.engines.base import SamplingParams
    from slime_ext.engines.local import LocalEngine
    from slime_ext.models import resolve_model
    from slime_ext.models.generation import sampling_defaults

    torch.set_num_threads(args.threads)
    model_dir = resolve_model(args.model, progress=lambda m: print(m, file=sys.stderr))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    renderer = PromptRenderer(tok)
    defaults = sampling_defaults(model_dir, "model")  # what the server gives a request that names none
    stops = stop_token_ids(tok)
    prompts = [renderer.render(m, []) for m in new_user_prompts()]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    engine = LocalEngine(model_dir, dtype=args.dtype, threads=args.threads, max_batch_size=len(prompts))
    out = {"env": env_info(), "model": args.model, "threads": args.threads, "dtype": str(engine.dtype),
           "max_tokens": args.max_tokens, "sampling": {"temperature": defaults.temperature, "top_p": defaults.top_p,
                                                       "source": defaults.source},
           "stop_ids": list(stops), "replies": []}

    async def one(ids, seed, max_new, stop_ids=stops):
        sp = SamplingParams(temperature=defaults.temperature, top_p=defaults.top_p, max_new_tokens=max_new,
                            seed=seed, stop_token_ids=tuple(stop_ids))
        return [o.token_id async for o in engine.generate(ids, sp)]

    try:
        # one stream alone: the seconds a token costs one user (no EOS, so every run is the same length)
        await one(prompts[0], 7, 8, ())
        t0 = time.perf_counter()
        n = len(await one(prompts[0], 7, args.timing_tokens, ()))
        out["one_stream_s_per_token"] = (time.perf_counter() - t0) / n
        print(f"one stream: {n / (time.perf_counter() - t0):.1f} tokens/s", file=sys.stderr)
        for seed in seeds:
            t0 = time.perf_counter()
            replies = await asyncio.gather(*(one(ids, seed * 1000 + i, args.max_tokens) for i, ids in enumerate(prompts)))
            print(f"seed {seed}: {sum(map(len, replies))} tokens in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            for i, ids in enumerate(replies):
                eos = bool(ids) and ids[-1] in stops
                out["replies"].append({"prompt": i, "seed": seed, "tokens": ids, "eos": eos,
                                       "text": tok.decode(ids, skip_special_tokens=True)})
    finally:
        await engine.close()
    out["env"]["loadavg_end"] = __import__("os").getloadavg()
    return out


def repeats(ids: list[int]) -> list[bool]:
    """For each token: whether the NGRAM-gram that ends with it occurred earlier in ``ids``."""
    seen: set[tuple[int, ...]] = set()
    out = []
    for i in range(len(ids)):
        gram = tuple(ids[max(0, i - NGRAM + 1):i + 1])
        out.append(i >= NGRAM - 1 and gram in seen)
        seen.add(gram)
    return out


def loop_start(ids: list[int]) -> int | None:
    """Where the loop ``ids`` ends in began, or None when it ends in none: the end of the last WINDOW-token window
    in which most tokens were new (see the module's docstring), if the last window is mostly repeats."""
    said = repeats(ids)
    if len(ids) < WINDOW or 2 * sum(said[-WINDOW:]) < WINDOW:
        return None
    for end in range(len(ids) - 1, 0, -1):  # near the start, the window is the tokens so far
        window = said[max(0, end - WINDOW):end]
        if 2 * sum(window) < len(window):
            return end
    return 0


def first_stop(ids: list[int], rule: tuple[int, int, int]) -> int | None:
    """The token count at which the stop with ``rule`` (max_period, repeats, min_tokens) ends ``ids``, or None."""
    stop = RepetitionStop(*rule)
    return next((i + 1 for i, t in enumerate(ids) if stop.feed(t)), None)


def analyse(r: dict) -> dict:
    s_tok = r["one_stream_s_per_token"]
    max_tokens = r["max_tokens"]
    replies = r["replies"]
    for rep in replies:
        ids = rep["tokens"][:-1] if rep["eos"] else rep["tokens"]  # the text, without the EOS
        rep["loop_from"] = None if rep["eos"] else loop_start(ids)
        rep["loop"] = rep["loop_from"] is not None
        rep["stop_at"] = first_stop(ids, RULES[0])
    natural = [x for x in replies if x["eos"]]
    loops = [x for x in replies if x["loop"]]
    long = [x for x in replies if not x["eos"] and not x["loop"]]  # ran to max_tokens saying new things
    caught = [x for x in loops if x["stop_at"] is not None]
    cut = []
    for x in natural:
        if x["stop_at"] is not None:  # what the stop would have taken from a reply that ended by itself
            lost = repeats(x["tokens"][:-1])[x["stop_at"]:]
            cut.append({"prompt": x["prompt"], "seed": x["seed"], "at": x["stop_at"], "tokens": len(x["tokens"]),
                        "lost": len(lost), "new_lost": lost.count(False)})
    lengths = [len(x["tokens"]) for x in natural]
    a = {
        "replies": len(replies), "natural": len(natural), "loops": len(loops), "long": len(long),
        "natural_tokens": {q: percentile(lengths, q) for q in (50, 75, 90, 95, 99, 100)},
        "all_tokens": sum(len(x["tokens"]) for x in replies),
        "loop_tokens": sum(len(x["tokens"]) - x["loop_from"] for x in loops),
        "loop_from": [percentile([x["loop_from"] for x in loops], q) for q in (10, 50, 90)],
        "caught": len(caught), "saved_tokens": sum(len(x["tokens"]) - x["stop_at"] for x in caught),
        "stop_after": [percentile([x["stop_at"] - x["loop_from"] for x in caught], q) for q in (50, 90)],
        "looped_length": {key: [percentile(v, q) for q in (50, 90)] for key, v in (
            ("off", [len(x["tokens"]) for x in loops]), ("on", [x["stop_at"] or len(x["tokens"]) for x in loops]))},
        "cut_natural": cut,
        "cut_long": [(x["prompt"], x["seed"], x["stop_at"]) for x in long if x["stop_at"] is not None],
        "s_per_token": s_tok, "max_tokens": max_tokens, "defaults": [],
    }
    a["rules"] = []
    for rule in RULES:
        ends = [first_stop(x["tokens"][:-1] if x["eos"] else x["tokens"], rule) for x in replies]
        a["rules"].append({"rule": rule, "caught": sum(e is not None for x, e in zip(replies, ends) if x["loop"]),
                           "saved": sum(len(x["tokens"]) - e for x, e in zip(replies, ends) if x["loop"] and e),
                           "cut": sum(e is not None for x, e in zip(replies, ends) if x["eos"])})
    a["loop_s"] = a["loop_tokens"] * s_tok
    a["saved_s"] = a["saved_tokens"] * s_tok
    # each default reply length, with the stop and without: the replies that end by themselves and finish (of those
    # that do not loop: a long one would have ended past max_tokens), the tokens loops still cost, a reply's length
    for cap in CAPS:
        if cap > max_tokens:
            continue
        row = {"max_tokens": cap}
        for key, stop_on in (("stop", True), ("no_stop", False)):
            ends = [min(len(x["tokens"]), cap, x["stop_at"] or cap if stop_on else cap) for x in replies]
            row[key] = {
                "finish": sum(len(x["tokens"]) <= cap and not (stop_on and x["stop_at"]) for x in natural),
                "loop_tokens": sum(max(0, e - x["loop_from"]) for x, e in zip(replies, ends) if x["loop"]),
                "mean": sum(ends) / len(ends), "p90": percentile(ends, 90), "all": sum(ends)}
        a["defaults"].append(row)
    return a


def report(r: dict) -> str:
    a = r["analysis"]
    n, nat, ok = a["replies"], a["natural"], max(a["natural"] + a["long"], 1)
    rule = RepetitionStop()
    sp = r["sampling"]
    s_tok = a["s_per_token"]
    cut = a["cut_natural"]
    text = [f"## Reply length and loops: {r['model']}, {len(NEW_USER)} open prompts x "
            f"{n // len(NEW_USER)} seeds, max_tokens {a['max_tokens']}", "",
            f"Sampling: temperature {sp['temperature']:g}, top_p {sp['top_p']:g} ({sp['source']}); {r['dtype']}, "
            f"{r['threads']} thread(s); one stream alone: {1 / s_tok:.1f} tokens/s ({s_tok * 1e3:.1f} ms a token).", "",
            md_table(["replies", "ended with EOS", "fell into a loop", f"ran to {a['max_tokens']} without a loop"],
                     [[n, f"{nat} ({nat / n:.0%})", f"{a['loops']} ({a['loops'] / n:.0%})",
                       f"{a['long']} ({a['long'] / n:.0%})"]]), "",
            "Tokens of the replies that ended with EOS (EOS included):", "",
            md_table(["p50", "p75", "p90", "p95", "p99", "max"],
                     [[round(a["natural_tokens"][q]) for q in (50, 75, 90, 95, 99, 100)]]), "",
            f"Loops: {a['loops']} replies; from where each loop began to the end: {a['loop_tokens']} tokens "
            f"({a['loop_tokens'] / max(a['all_tokens'], 1):.0%} of all {a['all_tokens']} tokens generated), "
            f"{a['loop_s']:.0f} s at one stream's rate ({a['loop_s'] / max(a['loops'], 1):.1f} s a loop on average); "
            "a loop began at token {:.0f} / {:.0f} / {:.0f} (p10 / p50 / p90).".format(*a["loop_from"]), "",
            f"Repetition stop ({rule.describe()}):", "",
            md_table(["loops ended", "loop tokens saved", "seconds saved (one stream)", "EOS replies cut",
                      f"loop-free {a['max_tokens']}-token replies cut"],
                     [[f"{a['caught']} of {a['loops']} ({a['caught'] / max(a['loops'], 1):.0%})",
                       f"{a['saved_tokens']} of {a['loop_tokens']}", round(a["saved_s"]),
                       f"{len(cut)} of {nat}", f"{len(a['cut_long'])} of {a['long']}"]]), "",
            "It ended a loop {:.0f} / {:.0f} tokens (p50 / p90) after it began; a reply that fell into a loop ran "
            "{:.0f} / {:.0f} tokens (p50 / p90; {:.1f} / {:.1f} s at one stream's rate) with the stop, {:.0f} / {:.0f} "
            "({:.1f} / {:.1f} s) without.".format(*a["stop_after"], *a["looped_length"]["on"],
                                                  *(v * s_tok for v in a["looped_length"]["on"]),
                                                  *a["looped_length"]["off"],
                                                  *(v * s_tok for v in a["looped_length"]["off"])), "",
            "Replies that ended with EOS and that the stop would have cut (each had begun to repeat itself): "
            + ("; ".join(f"prompt {c['prompt']} seed {c['seed']}: at token {c['at']} of {c['tokens']}, {c['lost']} "
                         f"tokens lost, {c['new_lost']} of them new (their 8-gram not said before)" for c in cut)
               or "none") + ".", "",
            "The same rule with other parameters, on the same replies:", "",
            md_table(["longest passage", "said in a row", "repeated tokens at least", "loops ended", "loop tokens saved",
                      "EOS replies cut"],
                     [[*x["rule"], f"{x['caught']} of {a['loops']}", x["saved"], f"{x['cut']} of {nat}"]
                      for x in a["rules"]]), "",
            f"Default reply length: of the {ok} replies that do not loop ({nat} ended with EOS, {a['long']} ran to "
            f"{a['max_tokens']} saying new things), those that finish; loop tokens left; reply length (tokens):", "",
            md_table(["max_tokens", "finish, stop on", "finish, stop off", "loop tokens, stop on", "loop tokens, off",
                      "mean reply, on", "mean reply, off", "p90 reply, on"],
                     [[d["max_tokens"], f"{d['stop']['finish']} ({d['stop']['finish'] / ok:.1%})",
                       f"{d['no_stop']['finish']} ({d['no_stop']['finish'] / ok:.1%})", d["stop"]["loop_tokens"],
                       d["no_stop"]["loop_tokens"], round(d["stop"]["mean"]), round(d["no_stop"]["mean"]),
                       round(d["stop"]["p90"])] for d in a["defaults"]])]
    return "\n".join(text)


def main(argv=None) -> int:
    args = parse_args(argv)
    r = json.loads(Path(args.from_json).read_text()) if args.from_json else asyncio.run(generate(args))
    r["analysis"] = analyse(r)
    print(report(r))
    print(f"\nJSON: {write_json('reply_length', r, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
