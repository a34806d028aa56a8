"""Does a long prompt stall running streams? Tokens a stream gets while another prompt is prefilled.

Starts the real server (default ``--model tiny``, whose context is 64k tokens), starts one
streaming chat request that decodes for a long time, and once it is producing tokens sends a
second streaming request whose prompt is about ``--prompt-tokens`` tokens (default 50,000).
Counts the running stream's content chunks (one per token, less any a stop-string check holds
back) between the long request's response headers (the server sends them once the prompt is
rendered, as it goes to the engine) and its first content chunk, and the longest gap between them.
Chunks arriving within 0.1 s of those headers are not counted: they were produced while the
server's event loop was busy rendering the long prompt and are flushed in one burst after it.
With the prefill run in one piece that count is 0; with chunked prefill interleaved with decode
steps the stream keeps going. Prints a Markdown table and writes
``bench/results/prefill_interference.json``. Nothing is asserted.

  python bench/prefill_interference.py                       # tiny, 50k-token prompt
  python bench/prefill_interference.py --prompt-tokens 20000 --threads 1
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import DEFAULT_THREADS, Server, chat_body, env_info, load_note, main_of, md_table  # noqa: E402

from slime_ext.launch import sse_chunks  # noqa: E402

BURST_S = 0.1  # chunks within this of the long request's headers were produced while the server rendered it


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny", help="built-in model or checkpoint dir [tiny]")
    p.add_argument("--prompt-tokens", type=int, default=50_000, help="about this many prompt tokens [50000]")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                   help=f"server torch threads; 0 = the server's own default [cores - 1 = {DEFAULT_THREADS}]")
    p.add_argument("--dtype", default="auto", choices=["auto", "bfloat16", "float32"], help="engine dtype, as serve --dtype [auto]")
    p.add_argument("--out", default=None, help="JSON output path [bench/results/prefill_interference.json]")
    return p.parse_args(argv)


def long_messages(model: str, tokens: int) -> tuple[list[dict], int]:
    """A user message of about ``tokens`` tokens, and its exact rendered length."""
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model(model))
    words = [f"w{i % 997}" for i in range(tokens)]
    per_word = len(tok(" ".join(words[:1000]))["input_ids"]) / 1000
    text = " ".join(words[: int(tokens / per_word)])
    msgs = [{"role": "user", "content": text}]
    return msgs, len(tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False))


async def stream_times(session, base: str, body: dict, times: list[float], stop: asyncio.Event,
                       headers_at: list[float] | None = None) -> None:
    """Stream ``body``, appending the arrival time of each content chunk, until done or ``stop``."""
    async with session.post(base + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        if headers_at is not None:  # the server sends headers once the prompt is rendered, before the engine
            headers_at.append(time.perf_counter())
        async for chunk in sse_chunks(resp):
            if chunk is None or stop.is_set():
                return
            if any((c.get("delta") or {}).get("content") for c in chunk.get("choices", [])):
                times.append(time.perf_counter())


async def run(args: argparse.Namespace) -> dict:
    import aiohttp

    msgs, n_prompt = long_messages(args.model, args.prompt_tokens)
    server = Server(args.model, threads=args.threads, extra=["--max-tokens-cap", "60000", "--dtype", args.dtype]).start()
    result = {"benchmark": "prefill_interference", "args": vars(args), "env": env_info(),
              "server_startup_s": server.startup_s, "prompt_tokens": n_prompt}
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session:
            times: list[float] = []
            long_first: list[float] = []
            stop = asyncio.Event()
            running = chat_body(args.model, [{"role": "user", "content": "Tell me a long story."}], 60_000, 1.0, True, seed=1)
            task = asyncio.create_task(stream_times(session, server.base, running, times, stop))
            while len(times) < 20:
                await asyncio.sleep(0.01)
            sent, headers_at = time.perf_counter(), []
            await stream_times(session, server.base, chat_body(args.model, msgs, 1, 1.0, True, seed=2), long_first, stop,
                               headers_at)
            stop.set()
            await task
            t0, first = headers_at[0], long_first[0] if long_first else time.perf_counter()
            during = [t for t in times if t0 + BURST_S < t <= first]  # not the backlog flushed with the headers
            edges = [t0, *during, first]
            gaps = [b - a for a, b in zip(edges, edges[1:])]
            result.update(long_ttft_s=first - sent, long_engine_s=first - t0, stream_tokens_during_prefill=len(during),
                          stream_max_gap_s=max(gaps),
                          stream_tokens_per_s_before=19 / (times[19] - times[0]))
    finally:
        server.stop()
    return result


def report(result: dict) -> str:
    a = result["args"]
    rows = [[result["prompt_tokens"], result["long_ttft_s"], result["long_engine_s"], result["stream_tokens_during_prefill"],
             result["stream_max_gap_s"], result["stream_tokens_per_s_before"]]]
    return "\n".join([f"## Prefill interference: {a['model']} ({a['dtype']}), server threads {a['threads'] or 'default'}", "",
                      "From the long request's response headers (sent once its prompt is rendered, as it goes to "
                      "the engine) to its first content chunk: the running stream's content chunks (not counting the "
                      "burst flushed within 0.1 s of the headers, produced while the prompt was rendered) and the "
                      "longest gap between them.", "",
                      md_table(["long prompt tokens", "its TTFT s", "headers -> first token s",
                                "running stream's tokens meanwhile",
                                "longest gap between them s", "stream tok/s before"], rows),
                      "", load_note(result)])


if __name__ == "__main__":
    sys.exit(main_of("prefill_interference", parse_args, run, report))
