"""Proxy overhead: end-to-end HTTP latency minus engine-only latency for the same requests.

For a fixed set of chat prompts, greedy decoding (temperature 0) and a fixed ``max_tokens``:
  (a) engine-only: the prompts are rendered to ids with the server's own ``PromptRenderer`` and
      ``LocalEngine.generate`` is timed directly, in this process, at the given concurrency;
  (b) end-to-end: the real server runs as a subprocess (``python -m slime_ext.cli serve``) and
      the same messages are sent as non-streaming and as streaming HTTP requests (aiohttp) at
      the same concurrency.
Request i's HTTP latency is paired with the engine latency of request i (same prompt, same
concurrency, same position in the schedule); the overhead percentiles are over those pairs.
Both sides use the same torch thread count (``--threads``). Prints a Markdown table and writes
``bench/results/proxy_overhead.json``. A benchmark, not a test: nothing is asserted.

  python bench/proxy_overhead.py                     # tiny model, concurrency 1 and 16
  python bench/proxy_overhead.py --model smollm2-135m --requests 16
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DEFAULT_THREADS,
    Server,
    chat_body,
    closed_loop,
    env_info,
    http_chat,
    http_chat_stream,
    load_note,
    main_of,
    md_table,
    parse_int_list,
    proc_cpu_s,
    proc_mem,
    reset_peak,
    summary,
    wait_idle,
)
from prompts import chat_prompts  # noqa: E402

MODES = [("nonstream", "latency", "end-to-end, non-streaming"),
         ("stream", "latency", "end-to-end, streaming"),
         ("stream", "ttft", "time to first token (streaming)")]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="built-in model or checkpoint dir [tiny]")
    p.add_argument("--concurrency", default="1,16", help="comma-separated concurrency levels [1,16]")
    p.add_argument("--requests", type=int, default=None,
                   help="measured requests per concurrency level and side [128 for tiny, 16 otherwise]")
    p.add_argument("--rounds", type=int, default=4,
                   help="alternate engine / HTTP this many times per level (each round a slice of the requests), "
                        "so slow drifts in machine load hit both sides alike; capped so that a slice holds at least "
                        "CONCURRENCY requests [4]")
    p.add_argument("--max-tokens", type=int, default=16, help="new tokens per request (greedy) [16]")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                   help=f"torch threads, for the server and for engine-only [cores - 1 = {DEFAULT_THREADS}]")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"], help="engine dtype, as serve --dtype [auto]")
    p.add_argument("--warmup", type=int, default=None,
                   help="unmeasured requests per side and level before measuring, sent at that level's concurrency "
                        "(at most) [one full wave for tiny, 2 otherwise]")
    p.add_argument("--out", default=None, help="JSON output path [bench/results/proxy_overhead.json]")
    args = p.parse_args(argv)
    if args.requests is None:
        args.requests = 128 if args.model == "tiny" else 16
    return args


async def run(args: argparse.Namespace) -> dict:
    import aiohttp
    from transformers import AutoTokenizer

    from slime_ext.api.server import _stop_token_ids
    from slime_ext.chat.prompt import PromptRenderer
    from slime_ext.config import ServeConfig
    from slime_ext.engines.base import SamplingParams
    from slime_ext.engines.local import LocalEngine
    from slime_ext.models import resolve_model

    levels = parse_int_list(args.concurrency)
    n = args.requests
    defaults = ServeConfig()
    model_dir = resolve_model(args.model, progress=lambda m: print(m, file=sys.stderr))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    renderer = PromptRenderer(tokenizer)
    stop_ids = tuple(sorted(_stop_token_ids(tokenizer)))
    messages = chat_prompts(n)
    prompt_ids = [renderer.render(m, []) for m in messages]

    print(f"loading the engine in-process ({args.model}, {args.threads} thread(s))...", file=sys.stderr)
    engine = LocalEngine(model_dir, dtype=args.dtype, threads=args.threads, max_batch_size=defaults.max_batch_size)
    ctx = engine.context_length

    def sampling(ids: list[int]) -> SamplingParams:
        # exactly what the server builds for {"temperature": 0, "max_tokens": N} (top_p 1, no seed)
        return SamplingParams(temperature=0.0, top_p=1.0, stop_token_ids=stop_ids,
                              max_new_tokens=min(args.max_tokens, defaults.max_tokens_cap, ctx - len(ids)))

    async def engine_one(i: int) -> dict:
        ids = prompt_ids[i]
        sp = sampling(ids)
        t0 = time.perf_counter()
        ttft = None
        count = 0
        async for _ in engine.generate(ids, sp):
            if ttft is None:
                ttft = time.perf_counter() - t0
            count += 1
        return {"latency": time.perf_counter() - t0, "ttft": ttft, "completion_tokens": count}

    print(f"starting the server ({args.model}, {args.threads} thread(s))...", file=sys.stderr)
    server = Server(args.model, threads=args.threads, extra=["--dtype", args.dtype]).start()
    print(f"server pid {server.pid} on {server.base}, up in {server.startup_s:.1f} s", file=sys.stderr)
    result: dict = {"benchmark": "proxy_overhead", "args": vars(args), "env": env_info(),
                    "server_startup_s": server.startup_s, "levels": {}}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=None)) as session:

            def http_one(stream: bool):
                async def one(i: int) -> dict:
                    body = chat_body(args.model, messages[i], args.max_tokens, 0.0, stream)
                    return await (http_chat_stream if stream else http_chat)(session, server.base, body)
                return one

            # warm up both sides (first forward passes, connection pool, allocator) at every level
            for c in levels:
                w = args.warmup if args.warmup is not None else c if args.model == "tiny" else 2
                await closed_loop(w, c, lambda i: engine_one(i % n))
                await closed_loop(w, c, lambda i: http_one(False)(i % n))
                await closed_loop(w, c, lambda i: http_one(True)(i % n))
            await wait_idle(session, server.base)

            for c in levels:
                rounds = max(1, min(args.rounds, n // c))  # every slice keeps C requests in flight
                print(f"concurrency {c}: {n} requests per side in {rounds} round(s)...", file=sys.stderr)
                runs: dict[str, list] = {"engine": [None] * n, "nonstream": [None] * n, "stream": [None] * n}
                walls = {k: 0.0 for k in runs}
                cpu = {"engine_self": 0.0, "server_nonstream": 0.0, "client_nonstream": 0.0,
                       "server_stream": 0.0, "client_stream": 0.0}
                server_rss_before = proc_mem(server.pid)["VmRSS"]
                reset_peak(server.pid)
                self_reset = reset_peak("self")
                engine_peak = 0.0
                bounds = [round(r * n / rounds) for r in range(rounds + 1)]
                for r in range(rounds):
                    idx = list(range(bounds[r], bounds[r + 1]))
                    if not idx:
                        continue
                    # the three phases in a rotating order, so none always runs first after a pause
                    order = ["engine", "nonstream", "stream"]
                    order = order[r % 3:] + order[:r % 3]
                    for mode in order:
                        if mode == "engine":  # (a) engine-only, in this process
                            reset_peak("self")
                            cpu0 = proc_cpu_s("self")
                            res, wall = await closed_loop(len(idx), c, lambda j: engine_one(idx[j]))  # noqa: B023
                            cpu["engine_self"] += proc_cpu_s("self") - cpu0
                            engine_peak = max(engine_peak, proc_mem("self")["VmHWM"])
                        else:  # (b) end-to-end over HTTP, non-streaming or streaming
                            await wait_idle(session, server.base)
                            s0, c0 = proc_cpu_s(server.pid), proc_cpu_s("self")
                            res, wall = await closed_loop(len(idx), c, lambda j: http_one(mode == "stream")(idx[j]))  # noqa: B023
                            cpu[f"server_{mode}"] += proc_cpu_s(server.pid) - s0
                            cpu[f"client_{mode}"] += proc_cpu_s("self") - c0
                        walls[mode] += wall
                        for j, x in zip(idx, res):
                            runs[mode][j] = x
                await wait_idle(session, server.base)
                mem = proc_mem(server.pid)
                level: dict = {"concurrency": c, "requests": n, "rounds": rounds, "wall_s": walls,
                               "cpu_ms_per_request": {k: 1000 * v / n for k, v in cpu.items()},
                               "server_rss_mib_before": server_rss_before, "server_peak_rss_mib": mem["VmHWM"],
                               "server_peak_is_since_level_start": True,
                               "engine_only_process_peak_rss_mib": engine_peak,
                               "engine_only_peak_is_since_level_start": self_reset,
                               "raw": runs, "metrics": {}}
                eng = runs["engine"]
                for mode, key, label in MODES:
                    e = [1000 * x[key] for x in eng]
                    h = [1000 * x[key] for x in runs[mode]]
                    diff = [hh - ee for hh, ee in zip(h, e)]
                    se, sh, sd = summary(e), summary(h), summary(diff)
                    level["metrics"][f"{mode}_{key}"] = {
                        "label": label, "engine_ms": se, "http_ms": sh, "paired_overhead_ms": sd,
                        "median_difference_ms": sh["p50"] - se["p50"], "p99_difference_ms": sh["p99"] - se["p99"],
                    }
                mism = [i for i in range(n) if runs["engine"][i]["completion_tokens"] != runs["nonstream"][i]["completion_tokens"]
                        or runs["engine"][i]["completion_tokens"] != runs["stream"][i]["completion_tokens"]]
                level["token_count_mismatches"] = mism
                level["completion_tokens_mean"] = sum(x["completion_tokens"] for x in eng) / n
                result["levels"][str(c)] = level
    finally:
        server.stop()
        await engine.close()
    result["env"]["loadavg_end"] = os.getloadavg()
    return result


def report(result: dict) -> str:
    a = result["args"]
    lines = [f"## Proxy overhead: {a['model']}, greedy, max_tokens {a['max_tokens']}, {a['threads']} torch thread(s), "
             f"{a['requests']} requests per level and side",
             "",
             "Latencies in ms. *Paired overhead*: percentiles over requests of (HTTP latency of request i - engine-only "
             "latency of request i); *Δ p50*: HTTP p50 - engine p50.",
             ""]
    rows = []
    for c, lv in result["levels"].items():
        for mode, key, label in MODES:
            m = lv["metrics"][f"{mode}_{key}"]
            e, h, d = m["engine_ms"], m["http_ms"], m["paired_overhead_ms"]
            rows.append([c, label, e["p50"], h["p50"], e["p99"], h["p99"], d["p50"], d["p99"], m["median_difference_ms"],
                         100 * m["median_difference_ms"] / e["p50"] if e["p50"] else float("nan")])
    lines.append(md_table(["conc.", "measure", "engine p50", "HTTP p50", "engine p99", "HTTP p99", "paired overhead p50",
                           "paired overhead p99", "Δ p50", "Δ p50 / engine p50 (%)"], rows))
    lines += ["", "Throughput and CPU time per level. CPU ms/req: user+system time of all the process's threads during the "
              "phase, per request; *CPU overhead* = server CPU - engine-only process CPU (less sensitive to other load "
              "on the machine than wall time).", ""]
    rows = []
    for c, lv in result["levels"].items():
        n = lv["requests"]
        cpu = lv["cpu_ms_per_request"]
        rows.append([c, n / lv["wall_s"]["engine"], n / lv["wall_s"]["nonstream"], n / lv["wall_s"]["stream"],
                     cpu["engine_self"], cpu["server_nonstream"], cpu["server_nonstream"] - cpu["engine_self"],
                     cpu["server_stream"], cpu["server_stream"] - cpu["engine_self"], cpu["client_nonstream"]])
    lines.append(md_table(["conc.", "engine req/s", "HTTP req/s (non-stream)", "HTTP req/s (stream)", "engine CPU ms/req",
                           "server CPU ms/req (non-stream)", "CPU overhead (non-stream)", "server CPU ms/req (stream)",
                           "CPU overhead (stream)", "client CPU ms/req (non-stream)"], rows))
    lines += ["", "Memory per level (peak RSS = VmHWM, reset at the start of each level) and sanity checks "
              "(completion tokens per request, and requests whose HTTP token count differs from engine-only):", ""]
    rows = []
    for c, lv in result["levels"].items():
        rows.append([c, lv["server_rss_mib_before"], lv["server_peak_rss_mib"], lv["engine_only_process_peak_rss_mib"],
                     lv["completion_tokens_mean"], len(lv["token_count_mismatches"])])
    lines.append(md_table(["conc.", "server RSS before (MiB)", "server peak RSS (MiB)",
                           "engine-only process peak RSS (MiB)", "tokens/req", "token-count mismatches"], rows))
    lines += ["", load_note(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main_of("proxy_overhead", parse_args, run, report))
