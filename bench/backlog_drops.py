"""Judged turns dropped after a backlog at restart: what a trainer that was behind does with feedback.

Real servers in subprocesses, on one run directory, heuristic judge, default trainer settings
(``--batch-size 4``, ``--max-staleness 4``):
  1. backlog: a ``--method none`` server records ``--backlog`` two-turn conversations whose second
     message thanks, corrects, or says something the judge cannot score (verdict 0); they are
     judged and nothing trains: the situation after a crash with a backlog;
  2. restart: a ``--method binary`` server on that run directory; its trainer works through the
     backlog until nothing waits;
  3. the store's counts (/healthz): judged, trained, dropped by reason; each version's step
     metrics (``checkpoints/v<N>/trainer_state.json``: turns, the staleness it trained at).
Prints a Markdown table and writes ``bench/results/backlog_drops.json``. Nothing is asserted.

  python bench/backlog_drops.py                    # tiny, 200 conversations
  python bench/backlog_drops.py --model smollm2-135m
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
from _common import Server, chat_body, env_info, http_chat, main_of, md_table  # noqa: E402

FEEDBACK = ["Thanks, that's perfect!", "No, that's wrong. Try again.", "Great, thank you!", "Wrong, redo it.",
            "Hmm."]  # the last: no verdict (0), so Binary RL has no signal in it


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--backlog", type=int, default=200, help="feedback conversations waiting at restart")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--max-staleness", type=int, default=4)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--quick", action="store_true", help="a 40-conversation backlog")
    p.add_argument("--out", help="JSON path [bench/results/backlog_drops.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.backlog = 40
    return args


async def health(session, base):
    async with session.get(base + "/healthz") as r:
        return await r.json()


async def conversation(session, srv, i, max_tokens):
    u = {"role": "user", "content": f"Question {i}: tell me a short fact about the number {i}."}
    first = await http_chat(session, srv.base, chat_body("m", [u], max_tokens, 1.0, False, seed=i))
    reply = {"role": "assistant", "content": first["text"]}
    await http_chat(session, srv.base, chat_body("m", [u, reply, {"role": "user", "content": FEEDBACK[i % 5]}],
                                                 max_tokens, 1.0, False, seed=1000 + i))


async def record_backlog(args, common) -> Server:
    """Phase 1: a recording-only server; returns it stopped, its run directory kept."""
    recorder = Server(args.model, extra=["--method", "none", *common], keep_run_dir=True)
    recorder.start()
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as session:
            sem = asyncio.Semaphore(4)

            async def one(i):
                async with sem:
                    await conversation(session, recorder, i, args.max_tokens)

            await asyncio.gather(*(one(i) for i in range(args.backlog)))
            while (await health(session, recorder.base))["judged_turns"] < args.backlog:
                await asyncio.sleep(0.2)
    finally:
        recorder.stop()
    return recorder


async def drain(srv, timeout_s: float = 1800) -> dict:
    """Phase 2: wait until the restarted server's trainer has nothing left it can train; its counts."""
    deadline = time.time() + timeout_s
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
        last, still = None, 0
        while time.time() < deadline:
            h = await health(session, srv.base)
            key = (h["trained_turns"], h["dropped_turns"])
            still = still + 1 if key == last else 0
            last = key
            if h["waiting_to_train"] < srv.batch_size and still >= 20:  # nothing moved for 5 s
                return h
            await asyncio.sleep(0.25)
    raise RuntimeError("the trainer did not drain the backlog:\n" + srv.log_tail())


def step_metrics(run_dir: Path) -> list[dict]:
    """Per version: the step's metrics (turns, staleness, ...), from each checkpoint's ``trainer_state.json``
    (kept for every version, also once its weights are pruned)."""
    steps = []
    for path in sorted((run_dir / "checkpoints").glob("v*/trainer_state.json")):
        state = json.loads(path.read_text())
        steps.append({"version": state["version"], **{k: v for k, v in state["metrics"].items()
                                                       if isinstance(v, (int, float))}})
    return steps


async def run(args):
    common = ["--batch-size", str(args.batch_size), "--lora-rank", str(args.lora_rank),
              "--max-staleness", str(args.max_staleness), "--status-interval-s", "0", "--log-level", "info"]
    out = {"env": env_info(), "model": args.model, "backlog": args.backlog, "batch_size": args.batch_size,
           "max_staleness": args.max_staleness}
    print(f"backlog: {args.backlog} feedback conversations (not training)...", file=sys.stderr)
    recorder = await record_backlog(args, common)
    srv = Server(args.model, extra=["--method", "binary", *common], port=None)
    srv.tmp, srv.run_dir = recorder.tmp, recorder.run_dir  # the same run: the backlog waits there
    srv.log_path = recorder.tmp / "serve-restart.log"
    srv.batch_size = args.batch_size
    print("restart with training: draining the backlog...", file=sys.stderr)
    t0 = time.perf_counter()
    srv.start()
    try:
        h = await drain(srv)
        out["drain_s"] = time.perf_counter() - t0
        steps = step_metrics(Path(srv.run_dir))
    finally:
        srv.stop()  # and deletes the run directory
    out.update(counts={k: h[k] for k in ("judged_turns", "trained_turns", "dropped_turns", "dropped_by_reason",
                                         "waiting_to_train")}, steps=steps)
    return out


def report(out) -> str:
    c, steps = out["counts"], out["steps"]
    stale = sum(n for reason, n in c["dropped_by_reason"].items() if reason.startswith("stale"))
    reasons = ", ".join(f"{r}: {n}" for r, n in sorted(c["dropped_by_reason"].items())) or "none"
    return (f"{out['backlog']}-conversation backlog at restart, {out['model']}, batch {out['batch_size']}, "
            f"max-staleness {out['max_staleness']}, drained in {out['drain_s']:.0f} s\n\n"
            + md_table(["judged", "trained", "dropped as stale", "dropped (all reasons)", "versions",
                        "turns per version", "largest staleness trained"],
                       [[c["judged_turns"], c["trained_turns"], stale, reasons, len(steps),
                         "/".join(str(int(s.get("turns", 0))) for s in steps),
                         max((int(s.get("staleness_max", 0)) for s in steps), default="-")]]))


if __name__ == "__main__":
    sys.exit(main_of("backlog_drops", parse_args, run, report))
