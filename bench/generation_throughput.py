"""Generation throughput through the HTTP server: tokens/s at several concurrency levels.

Starts the real server (``python -m slime_ext.cli serve``, default ``smollm2-135m``) and, at each
concurrency level, keeps that many streaming chat requests in flight (closed loop) until a fixed
number of requests is done. Each request asks for a long story, with ``temperature`` 1, a fixed
seed per request and ``max_tokens`` (default 64); completion tokens are counted from the
``usage`` the server reports (``stream_options.include_usage``), so a reply that stops early
is counted as what it is. Reports aggregate tokens/s (all tokens / wall time of the level),
per-request tokens/s, time to first token, and the server's peak RSS per level. Prints a
Markdown table and writes ``bench/results/generation_throughput.json``. Nothing is asserted.

  python bench/generation_throughput.py                         # smollm2-135m, concurrency 1, 8, 16
  python bench/generation_throughput.py --concurrency 1,4 --max-tokens 32 --waves 1
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    DEFAULT_THREADS,
    Server,
    chat_body,
    closed_loop,
    env_info,
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
from prompts import story_prompts  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m", help="built-in model or checkpoint dir [smollm2-135m]")
    p.add_argument("--concurrency", default="1,8,16", help="comma-separated concurrency levels [1,8,16]")
    p.add_argument("--max-tokens", type=int, default=64, help="max_tokens per request [64]")
    p.add_argument("--waves", type=int, default=2,
                   help="requests per level = waves x concurrency (at least --min-requests) [2]")
    p.add_argument("--min-requests", type=int, default=4, help="fewest requests per level [4]")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature [1.0]")
    p.add_argument("--seed", type=int, default=1234, help="request i uses seed SEED + i [1234]")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                   help=f"server torch threads; 0 = the server's own default, all cores [cores - 1 = {DEFAULT_THREADS}]")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"], help="engine dtype, as serve --dtype [auto]")
    p.add_argument("--warmup", type=int, default=2, help="short unmeasured requests after start-up [2]")
    p.add_argument("--out", default=None, help="JSON output path [bench/results/generation_throughput.json]")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> dict:
    import aiohttp

    levels = parse_int_list(args.concurrency)
    print(f"starting the server ({args.model}, threads {args.threads or 'default'})...", file=sys.stderr)
    server = Server(args.model, threads=args.threads, extra=["--dtype", args.dtype]).start()
    print(f"server pid {server.pid} on {server.base}, up in {server.startup_s:.1f} s", file=sys.stderr)
    result: dict = {"benchmark": "generation_throughput", "args": vars(args), "env": env_info(),
                    "server_startup_s": server.startup_s, "server_rss_mib_after_start": proc_mem(server.pid)["VmRSS"],
                    "levels": {}}
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=None)) as session:
            warm = story_prompts(args.warmup)
            for i, msgs in enumerate(warm):
                await http_chat_stream(session, server.base, chat_body(args.model, msgs, 8, args.temperature, True, seed=i))
            for c in levels:
                n = max(args.min_requests, args.waves * c)
                prompts = story_prompts(n)
                print(f"concurrency {c}: {n} requests of max_tokens {args.max_tokens}...", file=sys.stderr)
                await wait_idle(session, server.base)
                rss_before = proc_mem(server.pid)["VmRSS"]
                peak_reset = reset_peak(server.pid)
                cpu0 = proc_cpu_s(server.pid)

                async def one(i: int) -> dict:
                    body = chat_body(args.model, prompts[i], args.max_tokens, args.temperature, True, seed=args.seed + i)  # noqa: B023 (awaited in this iteration)
                    return await http_chat_stream(session, server.base, body)

                res, wall = await closed_loop(n, c, one)
                cpu = proc_cpu_s(server.pid) - cpu0
                mem = proc_mem(server.pid)
                tokens = [x["completion_tokens"] for x in res]
                total = sum(tokens)
                per_req = [x["completion_tokens"] / x["latency"] for x in res]
                decode = [(x["completion_tokens"] - 1) / (x["latency"] - x["ttft"])
                          for x in res if x["completion_tokens"] > 1 and x["latency"] > x["ttft"]]
                result["levels"][str(c)] = {
                    "concurrency": c, "requests": n, "wall_s": wall, "completion_tokens_total": total,
                    "completion_tokens_min": min(tokens), "completion_tokens_max": max(tokens),
                    "stopped_early": sum(1 for x in res if x["finish_reason"] != "length"),
                    "aggregate_tokens_per_s": total / wall,
                    "per_request_tokens_per_s": summary(per_req),
                    "per_request_decode_tokens_per_s": summary(decode),
                    "ttft_ms": summary([1000 * x["ttft"] for x in res]),
                    "latency_ms": summary([1000 * x["latency"] for x in res]),
                    "server_cpu_s": cpu, "server_cpu_ms_per_token": 1000 * cpu / total if total else float("nan"),
                    "server_rss_mib_before": rss_before, "server_peak_rss_mib": mem["VmHWM"],
                    "server_peak_is_since_level_start": peak_reset,
                    "raw": res,
                }
    finally:
        server.stop()
    result["env"]["loadavg_end"] = os.getloadavg()
    return result


def report(result: dict) -> str:
    a = result["args"]
    lines = [f"## Generation throughput: {a['model']} over HTTP (streaming), max_tokens {a['max_tokens']}, temperature "
             f"{a['temperature']}, fixed seeds, server threads {a['threads'] or 'default (all cores)'}",
             "",
             "tok/s counts completion tokens from `usage`. Aggregate = all tokens / wall time of the level; per-request = "
             "a request's tokens / its latency (p50); decode = (tokens - 1) / (latency - TTFT) (p50). TTFT: send -> "
             "first content chunk. Peak RSS: the server's VmHWM, reset at the start of each level.",
             ""]
    rows = []
    for c, lv in result["levels"].items():
        rows.append([c, lv["requests"], f"{lv['completion_tokens_total']} ({lv['completion_tokens_min']}-{lv['completion_tokens_max']})",
                     lv["stopped_early"], lv["wall_s"], lv["aggregate_tokens_per_s"], lv["per_request_tokens_per_s"]["p50"],
                     lv["per_request_decode_tokens_per_s"]["p50"], lv["ttft_ms"]["p50"], lv["ttft_ms"]["p99"],
                     lv["latency_ms"]["p50"], lv["server_cpu_ms_per_token"], lv["server_peak_rss_mib"]])
    lines.append(md_table(["conc.", "requests", "completion tokens (min-max per req)", "stopped before max_tokens",
                           "wall s", "aggregate tok/s", "per-request tok/s p50", "decode tok/s p50", "TTFT p50 ms",
                           "TTFT p99 ms", "latency p50 ms", "server CPU ms/token", "server peak RSS MiB"], rows))
    lines += ["", f"Server RSS after start {result['server_rss_mib_after_start']:.0f} MiB. " + load_note(result)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main_of("generation_throughput", parse_args, run, report))
