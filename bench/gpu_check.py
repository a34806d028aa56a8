"""The whole loop on one CUDA GPU with the packaged SmolLM2 (no network): ``serve --device cuda`` with
Binary RL, streamed chat (time to first token, tokens/s at 1 and 8 streams), judged feedback, two
training steps and their swaps into the engine, and, when ``sglang`` is importable, our SGLang client
against an SGLang server on the same GPU. Prints the figures and the GPU's peak memory in use.

    bash bench/gpu_check.sh              # or: python bench/gpu_check.py [--timeout-s 540]

A machine without a CUDA GPU is skipped with a message saying so (exit 0). Under 10 minutes on one GPU.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
import time

import aiohttp
from _common import ROOT, Server, chat_body, free_port, http_chat, http_chat_stream

BAD = ["No, that's wrong. Please answer in one short sentence.", "That is not what I asked for, try again.",
       "Wrong: keep it short."]


class PeakMemory(threading.Thread):
    """The GPU's memory in use (all processes: server, trainer, SGLang), sampled every 0.2 s; ``peak_gib``."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak_gib, self.done = 0.0, threading.Event()

    def run(self) -> None:
        import torch

        while not self.done.is_set():
            free, total = torch.cuda.mem_get_info()
            self.peak_gib = max(self.peak_gib, (total - free) / 2**30)
            time.sleep(0.2)


async def health(session, base: str) -> dict:
    async with session.get(base + "/healthz") as r:
        return await r.json()


async def serving(session, base: str) -> dict:
    """Time to first token and tokens/s, 1 stream and 8 at once (128 tokens each, greedy)."""
    msgs = [{"role": "user", "content": "Write a short paragraph about the sea."}]
    await http_chat_stream(session, base, chat_body("m", msgs, 8, 0.0, True))  # warm-up
    one = await http_chat_stream(session, base, chat_body("m", msgs, 128, 0.0, True))
    t0 = time.perf_counter()
    many = await asyncio.gather(*(http_chat_stream(session, base, chat_body("m", msgs, 128, 1.0, True, seed=i))
                                  for i in range(8)))
    wall = time.perf_counter() - t0
    return {"ttft_s": round(one["ttft"], 4), "tokens_per_s_1_stream": round(one["completion_tokens"] / one["latency"], 1),
            "tokens_per_s_8_streams": round(sum(m["completion_tokens"] for m in many) / wall, 1)}


async def learning(session, base: str, timeout_s: float) -> dict:
    """Feedback conversations until two versions are trained and served; the step and swap times."""
    t0, i, seen = time.perf_counter(), 0, []
    while (h := await health(session, base))["policy_version"] < 2:
        if time.perf_counter() - t0 > timeout_s:
            raise RuntimeError(f"two versions were not served within {timeout_s:.0f} s: {json.dumps(h)[:400]}")
        u = {"role": "user", "content": f"Question {i}: tell me a fact about the number {i}."}
        first = await http_chat(session, base, chat_body("m", [u], 32, 1.0, False, seed=i))
        reply = {"role": "assistant", "content": first["text"]}
        await http_chat(session, base, chat_body("m", [u, reply, {"role": "user", "content": BAD[i % 3]}], 8, 1.0,
                                                 False, seed=1000 + i))
        i += 1
        training = h.get("training") or {}
        if training.get("step_s") is not None and (not seen or seen[-1] != training):
            seen.append(training)
    training = (await health(session, base)).get("training") or {}
    return {"conversations": i, "to_two_versions_s": round(time.perf_counter() - t0, 1),
            "train_step_s": training.get("step_s"), "swap_s": training.get("swap_s"),
            "canary_s": training.get("canary_s")}


def sglang_path(model_dir: str, timeout_s: float) -> dict:
    """Our SGLang client against ``sglang.launch_server`` on this GPU, when sglang is importable."""
    try:
        import sglang  # noqa: F401
    except Exception as e:  # not installed, or broken: say which
        return {"sglang": f"skipped: sglang is not importable ({type(e).__name__})"}
    from slime_ext.engines.base import SamplingParams
    from slime_ext.engines.sglang import SGLangEngine

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "sglang.launch_server", "--model-path", model_dir, "--port",
                             str(port), "--mem-fraction-static", "0.3"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)

    async def go() -> dict:
        deadline = time.time() + timeout_s
        while True:
            try:
                engine = await SGLangEngine.connect(f"http://127.0.0.1:{port}")
                break
            except Exception:
                if time.time() > deadline or proc.poll() is not None:
                    return {"sglang": "failed: the server did not come up"}
                await asyncio.sleep(1)
        try:
            t0 = time.perf_counter()
            toks = [t async for t in engine.generate(list(range(100, 120)), SamplingParams(max_new_tokens=128))]
            return {"sglang": "ok", "sglang_tokens_per_s": round(len(toks) / (time.perf_counter() - t0), 1)}
        finally:
            await engine.close()

    try:
        return asyncio.run(go())
    finally:
        proc.terminate()
        proc.wait(30)


async def run(args) -> dict:
    srv = Server("smollm2-135m", extra=["--device", "cuda", "--method", "binary", "--batch-size", "2",
                                        "--judge", "heuristic", "--status-interval-s", "0", "--log-level", "info"])
    srv.start(timeout=300)
    try:
        out = {"server_startup_s": round(srv.startup_s, 1)}
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as session:
            out.update(await serving(session, srv.base))
            out.update(await learning(session, srv.base, args.timeout_s / 2))
    except Exception:
        print(srv.log_tail(), file=sys.stderr)
        raise
    finally:
        srv.stop()
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--timeout-s", type=float, default=540, help="the whole check's time limit [540]")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print(f"gpu_check: skipped: no CUDA GPU that torch can use here (torch {torch.__version__}"
              f"{', a CPU-only build' if torch.version.cuda is None else ''}); run it on a machine with one")
        return 0
    sys.path.insert(0, str(ROOT))
    from slime_ext.models import resolve_model

    memory = PeakMemory()
    memory.start()
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    out.update(asyncio.run(run(args)))
    out.update(sglang_path(str(resolve_model("smollm2-135m")), args.timeout_s / 4))
    memory.done.set()
    out["peak_gpu_memory_gib"] = round(memory.peak_gib, 2)
    for k, v in out.items():
        print(f"{k:>24}: {v}")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
