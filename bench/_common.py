"""Helpers shared by the benchmarks: a server subprocess, /proc memory and CPU readings,
percentiles, a closed-loop request driver, streaming/non-streaming HTTP clients and output."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from slime_ext.launch import ServerProcess, free_port, sse_chunks  # noqa: E402,F401

CLK_TCK = os.sysconf("SC_CLK_TCK")

# Torch threads the benchmarks give the engine by default: all cores but one, which is left to the
# server's event loop and the benchmark's client. With every core busy in torch (the server's own
# default), OpenMP threads spin at their barriers while the event loop or any other process holds
# a core, and a 2-core machine slows down many times over (see bench/README.md).
DEFAULT_THREADS = max(1, (os.cpu_count() or 1) - 1)


# ----------------------------------------------------------------------------- /proc readings
def proc_mem(pid: int | str = "self") -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024.0  # kB -> MiB
    return out


def reset_peak(pid: int | str = "self") -> bool:
    """Reset a process's VmHWM to its current RSS (Linux >= 4.0: write 5 to clear_refs).

    Returns False when the kernel refuses; VmHWM is then the peak since the process started."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def proc_cpu_s(pid: int | str = "self") -> float:
    """User + system CPU seconds a process has used (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime (fields 14, 15 of stat)


def env_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "loadavg": os.getloadavg(),
    }
    try:
        import torch

        info["torch"] = torch.__version__
    except ImportError:
        pass
    try:
        info["git_rev"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                         text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return info


# ----------------------------------------------------------------------------- statistics
def percentile(values: list[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default); q in [0, 100]."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * q / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "mean": sum(values) / len(values) if values else float("nan"),
            "min": min(values) if values else float("nan"), "max": max(values) if values else float("nan")}


# ----------------------------------------------------------------------------- output
def md_table(headers: list[str], rows: list[list[Any]]) -> str:
    def cell(v: Any) -> str:
        if isinstance(v, float):
            if v != v:
                return "n/a"
            return f"{v:.2f}" if abs(v) < 100 else f"{v:.1f}" if abs(v) < 1000 else f"{v:.0f}"
        return str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_json(name: str, data: dict[str, Any], out: str | None = None) -> Path:
    path = Path(out) if out else RESULTS / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=float))
    return path


def parse_int_list(text: str) -> list[int]:
    return [int(x) for x in text.replace(" ", "").split(",") if x]


# ----------------------------------------------------------------------------- the server
class Server(ServerProcess):
    """The real server in a subprocess, with records in a temporary run dir removed on stop."""

    def __init__(self, model: str, threads: int = 0, extra: list[str] | None = None, port: int | None = None,
                 keep_run_dir: bool = False) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="openclaw-bench-"))
        self.keep = keep_run_dir
        # serving only unless the benchmark asks for learning (the last --method wins)
        extra = ["--log-level", "warning", "--method", "none", *(["--threads", str(threads)] if threads else []),
                 *(extra or [])]
        super().__init__(self.tmp / "run", model, extra, port=port, log_path=self.tmp / "serve.log")
        self.threads = threads

    def stop(self) -> None:
        super().stop()
        if not self.keep:
            shutil.rmtree(self.tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- load generation
async def closed_loop(n: int, concurrency: int, fn: Callable[[int], Awaitable[dict]]) -> tuple[list[dict], float]:
    """Run ``fn(0) .. fn(n-1)`` with ``concurrency`` workers, each taking the next index when it is
    free (a closed loop: ``concurrency`` requests in flight until the last ones). Returns the
    results in index order and the wall time from the first start to the last finish."""
    results: list[dict | None] = [None] * n
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            results[i] = await fn(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(min(concurrency, n))))
    return results, time.perf_counter() - t0  # type: ignore[return-value]


def chat_body(model: str, messages: list[dict], max_tokens: int, temperature: float, stream: bool,
              seed: int | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                            "temperature": temperature, "stream": stream}
    if stream:
        body["stream_options"] = {"include_usage": True}
    if seed is not None:
        body["seed"] = seed
    return body


async def http_chat(session, base: str, body: dict[str, Any]) -> dict[str, Any]:
    """One non-streaming chat completion: latency (s, send to parsed body) and usage."""
    t0 = time.perf_counter()
    async with session.post(base + "/v1/chat/completions", json=body) as resp:
        data = await resp.json()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {data}")
    t1 = time.perf_counter()
    return {"latency": t1 - t0, "completion_tokens": data["usage"]["completion_tokens"],
            "finish_reason": data["choices"][0]["finish_reason"], "text": data["choices"][0]["message"]["content"]}


async def http_chat_stream(session, base: str, body: dict[str, Any]) -> dict[str, Any]:
    """One streaming chat completion.

    ttft: send -> the first chunk carrying content or a tool call (or the finish chunk if the
    reply is empty); headers: send -> response headers (the server sends them and the role
    chunk before generating); latency: send -> ``data: [DONE]``."""
    t0 = time.perf_counter()
    ttft = None
    usage = None
    finish = None
    async with session.post(base + "/v1/chat/completions", json=body) as resp:
        t_headers = time.perf_counter()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {await resp.text()}")
        async for chunk in sse_chunks(resp):
            if chunk is None:
                break
            if "error" in chunk:
                raise RuntimeError(f"stream error: {chunk['error']}")
            if chunk.get("usage"):
                usage = chunk["usage"]
            for choice in chunk.get("choices", []):
                delta = choice.get("delta") or {}
                if ttft is None and (delta.get("content") or delta.get("tool_calls") or choice.get("finish_reason")):
                    ttft = time.perf_counter() - t0
                if choice.get("finish_reason"):
                    finish = choice["finish_reason"]
    t1 = time.perf_counter()
    return {"latency": t1 - t0, "ttft": ttft if ttft is not None else t1 - t0, "headers": t_headers - t0,
            "completion_tokens": usage["completion_tokens"] if usage else None, "finish_reason": finish}


async def wait_idle(session, base: str, timeout: float = 60.0) -> None:
    """Wait until the server reports no request in flight (between phases)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        async with session.get(base + "/healthz") as r:
            if (await r.json()).get("requests_in_flight", 0) == 0:
                return
        await asyncio.sleep(0.05)


def load_note(result: dict[str, Any]) -> str:
    env = result["env"]
    return (f"Server started in {result['server_startup_s']:.1f} s. Load average at start "
            f"{tuple(round(x, 2) for x in env['loadavg'])}, at end {tuple(round(x, 2) for x in env['loadavg_end'])} "
            f"on {env['cpu_count']} CPUs (other processes share this machine: figures are noisy).")


def main_of(name: str, parse_args, run, report, argv=None) -> int:
    """A benchmark's entry point: run it, print its tables, keep its JSON."""
    args = parse_args(argv)
    result = asyncio.run(run(args))
    result["env"].setdefault("loadavg_end", os.getloadavg())
    print(report(result))
    print(f"\nJSON: {write_json(name, result, args.out)}")
    return 0
