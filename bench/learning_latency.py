"""Serving while learning: latency idle vs while the trainer trains, swap time, train-step time,
and the time from the user's feedback to a served policy version that has trained on it.

Real servers in subprocesses, on one run directory, heuristic judge:
  1. backlog: a ``--method none`` server (the engine on the same thread count as below; with a
     hint method, that method with a batch size it never fills, so hints are judged too) records
     ``--backlog`` two-turn conversations whose second message thanks or corrects the first
     answer; they get judged, and nothing trains;
  2. training: a ``--method`` (binary) server on that run directory; its trainer works through the
     backlog in batches, and sequential streaming probes (one user, no feedback, so nothing new
     to train on) are timed while at least one batch waits (``waiting_to_train >= batch size``
     in /healthz), i.e. while the trainer is busy;
  3. feedback -> served: with the backlog drained, ``--cycles`` times send one batch of feedback
     conversations and time from sending the last feedback message to /healthz reporting the
     next policy version (the feedback's own answer, judge, train step, canary, checkpoint, swap), or
     to the canary refusing that version (then the previous one keeps serving; counted apart);
  4. idle: the same probes on the same server, the trainer idle.
Train-step times come from the trainer's scalars (``scalars/scalars.csv``), swap times from the
server log. Prints Markdown tables and writes ``bench/results/learning_latency.json``. Nothing is
asserted. With a method that learns from hints (opd, combine) the corrections are standing
preferences ("From now on, answer in one short sentence."), so hinted turns, groups and replay
(``--serve-args``) have work to do.

  python bench/learning_latency.py                          # smollm2-135m, LoRA rank 16
  python bench/learning_latency.py --model tiny --quick
  python bench/learning_latency.py --method combine --serve-args "--group-size 4 --replay-turns 8"
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import os
import re
import shlex
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
from _common import (  # noqa: E402
    Server,
    chat_body,
    env_info,
    http_chat,
    http_chat_stream,
    main_of,
    md_table,
    summary,
)

GOOD = ["Thanks, that's perfect!", "Great, thank you!", "Perfect, thanks."]
BAD = ["No, that's wrong. Try again.", "That's not what I asked.", "Wrong, redo it."]
PREFERENCES = ["From now on, answer in one short sentence.", "Please always keep your answer to one short sentence.",
               "Next time, just one short sentence please."]  # corrections with a hint (opd, combine)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--probes", type=int, default=20, help="probe requests per phase")
    p.add_argument("--backlog", type=int, default=60, help="feedback conversations that give the trainer work")
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--cycles", type=int, default=3, help="feedback -> served measurements")
    p.add_argument("--threads", type=int, default=0, help="the servers' --threads; 0: every core, serve's default [0]")
    p.add_argument("--quick", action="store_true", help="fewer probes and a smaller backlog")
    p.add_argument("--method", default="binary", choices=["binary", "opd", "combine"], help="the trainer's method [binary]")
    p.add_argument("--serve-args", default="", help="more `openclaw-rl serve` flags for the training server, one string")
    p.add_argument("--out", help="JSON path [bench/results/learning_latency.json]")
    args = p.parse_args(argv)
    if args.quick:
        args.probes, args.backlog, args.cycles = 8, 16, 2
    return args


async def health(session, base):
    async with session.get(base + "/healthz") as r:
        return await r.json()


async def feedback_cycle(session, srv, args, c: int) -> dict:
    """Send feedback conversations one at a time until a batch waits (a turn the teacher check drops, or one
    judged 0, does not count, so another is sent), and time from the last one to /healthz reporting the next
    policy version, or the canary refusing it (the previous version keeps serving)."""
    h, waited = await health(session, srv.base), time.perf_counter()
    while h["policy_version"] < h["trained_turns"] // args.batch_size:  # the last swap is still coming
        if time.perf_counter() - waited > 120:  # a step of more than batch-size turns: no swap is coming
            print(f"  cycle {c}: version {h['policy_version']} after {h['trained_turns']} trained turns; going on", flush=True)
            break
        await asyncio.sleep(0.1)
        h = await health(session, srv.base)
    version, checks, judged0 = h["policy_version"], canary_checks(h), h["judged_turns"]
    sent, t_feedback, judged_at, started = 0, None, None, time.perf_counter()
    while True:
        h = await health(session, srv.base)
        now = time.perf_counter() - (t_feedback or started)
        refused = canary_checks(h) > checks and not canary_last(h).get("accepted", True)
        if h["policy_version"] > version or refused:
            return {"feedback_to_served_s": now, "judged_s": judged_at, "refused": h["policy_version"] <= version,
                    "conversations": sent}
        if judged_at is None and h["waiting_to_train"] >= args.batch_size:
            judged_at = now
        elif judged_at is None and h["judged_turns"] >= judged0 + sent:  # all judged, the batch still short
            t_feedback = await conversation(session, srv, 50_000 + 100 * c + sent, args.max_tokens, bad_of(args))
            sent += 1
        if time.perf_counter() - started > 600:
            raise RuntimeError(f"no new version 10 min after feedback ({sent} conversations sent; /healthz: version "
                               f"{h['policy_version']}, judged {h['judged_turns']} (from {judged0}), waiting "
                               f"{h['waiting_to_train']}, dropped {h['dropped_by_reason']})")
        await asyncio.sleep(0.05)


def canary_checks(h: dict) -> int:
    """Trained versions the canary has decided on (served or refused), from ``/healthz``."""
    return (h.get("training") or {}).get("canary", {}).get("checks", 0)


def canary_last(h: dict) -> dict:
    """The canary's last decision (``accepted``, ``reasons``), from ``/healthz``."""
    return (h.get("training") or {}).get("canary", {}).get("last", {})


async def probe(session, srv, i, max_tokens):
    msgs = [{"role": "user", "content": f"Probe {i}: name one fruit and say why you like it."}]
    return await http_chat_stream(session, srv.base, chat_body("m", msgs, max_tokens, 0.0, True, seed=i))


async def conversation(session, srv, i, max_tokens, bad=BAD):
    u = {"role": "user", "content": f"Question {i}: tell me a short fact about the number {i}."}
    first = await http_chat(session, srv.base, chat_body("m", [u], max_tokens, 1.0, False, seed=i))
    feedback = (GOOD if i % 2 == 0 else bad)[i % 3]
    reply = {"role": "assistant", "content": first["text"]}
    sent = time.perf_counter()
    await http_chat(session, srv.base, chat_body("m", [u, reply, {"role": "user", "content": feedback}],
                                                 max_tokens, 1.0, False, seed=1000 + i))
    return sent  # when the user's feedback left


def bad_of(args) -> list[str]:
    """The corrections: standing preferences (with a hint) when the method learns from hints."""
    return PREFERENCES if args.method != "binary" else BAD


async def run(args):
    env = env_info()
    threads = str(args.threads or os.cpu_count() or 1)  # what serve gives the engine (the trainer: idle priority)
    # lift --max-staleness so the trainer takes the backlog (all from version 0) in batches of
    # --batch-size, the steps this measures, not in larger catch-up steps
    common = ["--batch-size", str(args.batch_size), "--lora-rank", str(args.lora_rank), "--threads", threads,
              "--max-staleness", "1000000", "--status-interval-s", "0", "--log-level", "info"]
    out = {"env": env, "model": args.model, "batch_size": args.batch_size, "lora_rank": args.lora_rank,
           "max_tokens": args.max_tokens, "engine_threads": int(threads), "method": args.method,
           "serve_args": args.serve_args}
    timeout = aiohttp.ClientTimeout(total=600)
    # the recorder judges (with hints, when the method uses them) and never trains: a batch it never fills
    recording = ["--method", "none"] if args.method == "binary" else ["--method", args.method, "--batch-size", str(10**9)]
    recorder = Server(args.model, extra=[*common, *recording], keep_run_dir=True)
    recorder.start()
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            print(f"backlog: {args.backlog} feedback conversations (not training)...", file=sys.stderr)
            sem = asyncio.Semaphore(4)

            async def one(i):
                async with sem:
                    await conversation(session, recorder, i, args.max_tokens, bad_of(args))

            t0 = time.perf_counter()
            await asyncio.gather(*(one(i) for i in range(args.backlog)))
            while (await health(session, recorder.base))["judged_turns"] < args.backlog:
                await asyncio.sleep(0.2)
            out["backlog_s"] = time.perf_counter() - t0
    finally:
        recorder.stop()

    srv = Server(args.model, extra=["--method", args.method, *common, *shlex.split(args.serve_args)], port=None)
    srv.tmp, srv.run_dir = recorder.tmp, recorder.run_dir  # the same run: the backlog waits there
    srv.log_path = recorder.tmp / "serve-learning.log"
    srv.start()
    out["server_startup_s"] = srv.startup_s
    try:
        deadline = time.time() + 300
        while "trainer: ready" not in srv.log_tail(100000):  # the trainer process has loaded its model
            if time.time() > deadline:
                raise RuntimeError("the trainer did not start:\n" + srv.log_tail())
            await asyncio.sleep(0.2)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            for i in range(2):  # unmeasured: the fresh server's first requests build its kernels for these shapes
                await probe(session, srv, 9_000 + i, args.max_tokens)
            print("training: probes while a batch waits...", file=sys.stderr)
            busy, v0 = [], (await health(session, srv.base))["policy_version"]
            for i in range(args.probes):
                before = await health(session, srv.base)
                if before["waiting_to_train"] < args.batch_size:
                    break
                busy.append(await probe(session, srv, 10_000 + i, args.max_tokens))
            out["versions_during_training_probes"] = (await health(session, srv.base))["policy_version"] - v0

            # drain what is left, then time feedback -> served version
            deadline = time.time() + 900
            while (await health(session, srv.base))["waiting_to_train"] >= args.batch_size:
                if time.time() > deadline:
                    raise RuntimeError("the trainer did not drain its backlog in 15 min")
                await asyncio.sleep(0.5)
            cycles = [await feedback_cycle(session, srv, args, c) for c in range(args.cycles)]
            print(f"idle: {args.probes} probes...", file=sys.stderr)
            idle = [await probe(session, srv, i, args.max_tokens) for i in range(args.probes)]
        # rows are (version, wall_time, tag, value); with a hint method the recorder's idle trainer
        # created the file first, so it may hold no header line
        steps = [float(r[3]) for r in csv.reader(open(srv.run_dir / "scalars" / "scalars.csv"))
                 if len(r) == 4 and r[2] == "train/step_s"]
        log_text = srv.log_tail(10_000_000)
        swaps = [float(x) for x in re.findall(r"swap took ([0-9.]+) s", log_text)]
        pauses = [float(x) for x in re.findall(r"decoding paused ([0-9.]+) s", log_text)]
    finally:
        srv.keep = False
        srv.stop()
    out.update(
        idle={"latency": summary([r["latency"] for r in idle]), "ttft": summary([r["ttft"] for r in idle])},
        training={"latency": summary([r["latency"] for r in busy]), "ttft": summary([r["ttft"] for r in busy])},
        train_step_s=summary(steps), swap_s=summary(swaps), swap_pause_s=summary(pauses),
        feedback_to_served_s=summary([c["feedback_to_served_s"] for c in cycles]), cycles=cycles,
        probes={"idle": [(r["latency"], r["ttft"]) for r in idle], "training": [(r["latency"], r["ttft"]) for r in busy]},
    )
    out["env"]["loadavg_end"] = os.getloadavg()
    return out


def report(r) -> str:
    rows = []
    for metric in ("latency", "ttft"):
        i, t = r["idle"][metric], r["training"][metric]
        rows.append([metric, i["n"], i["p50"], i["p99"], t["n"], t["p50"], t["p99"], t["p50"] / i["p50"], t["p99"] / i["p99"]])
    text = [f"## Serving while learning ({r['model']}, {r.get('method', 'binary')} {r.get('serve_args', '')}, "
            f"LoRA rank {r['lora_rank']}, batch {r['batch_size']}, {r['max_tokens']} tokens per probe, seconds)", "",
            md_table(["probe", "idle n", "idle p50", "idle p99", "training n", "training p50", "training p99",
                      "p50 ratio", "p99 ratio"], rows), "",
            f"{r['versions_during_training_probes']} versions were published during the training probes.", ""]
    rows = [[name, r[key]["n"], r[key]["p50"], r[key]["max"]] for name, key in
            (("train step", "train_step_s"), ("weight swap (load, merge, install)", "swap_s"),
             ("decoding paused by a swap", "swap_pause_s"),
             ("feedback -> served version (or the canary's refusal)", "feedback_to_served_s"))]
    refused = sum(c.get("refused", False) for c in r["cycles"])
    text += [md_table(["", "n", "p50 (s)", "max (s)"], rows), "",
             f"{refused} of {len(r['cycles'])} feedback cycles ended in a canary refusal (the previous version kept "
             f"serving); the others in a served version.", "",
             f"Server started in {r['server_startup_s']:.1f} s; load average {tuple(round(x, 2) for x in r['env']['loadavg'])} "
             f"at start, {tuple(round(x, 2) for x in r['env']['loadavg_end'])} at end, {r['env']['cpu_count']} CPUs."]
    return "\n".join(text)


if __name__ == "__main__":
    sys.exit(main_of("learning_latency", parse_args, run, report))
