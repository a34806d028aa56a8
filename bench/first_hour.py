"""A new user's first hour, timed: start the server with `make serve`'s defaults, chat in `openclaw-rl chat`, rate
replies with /good and /bad, see a version trained on that feedback served, and read it in `records`.

  1. `openclaw-rl serve` with no flags but a fresh --run-dir and --port (the model, method, batch size, canary,
     judge and memory are the product's defaults): time until /healthz answers;
  2. `openclaw-rl chat` on a pseudo-terminal (``slime_ext.launch.Terminal``): four questions, each rated (two
     /good, two /bad with what would have been better, one of them a standing preference): each reply's time
     and length, and each rating's answer;
  3. then a short question every few seconds until the chat prints "now serving version 1" (the trainer has
     taken the four rated turns, the canary passed the new version, the server swapped it in): the time from the
     last rating to the version being served, and the sentence the chat printed;
  4. `openclaw-rl records` on the run: its time, and whether it says which turns version 1 trained on.
Prints a Markdown table; writes bench/results/first_hour.json. Nothing is asserted.

  python bench/first_hour.py                 # smollm2-135m, every default
  python bench/first_hour.py --model tiny    # the plumbing only, in seconds
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import ServerProcess, env_info, main_of, md_table  # noqa: E402

from slime_ext.launch import Terminal  # noqa: E402

RATED = [("What is the capital of France?", "/good"),
         ("Explain photosynthesis.", "/bad answer in one short sentence"),
         ("Tell me about the moon.", "/bad from now on, answer in one short sentence"),
         ("What is 2 + 2?", "/good")]
AFTER = ["Name a fruit.", "What colour is the sky?", "Say hello.", "What is a cat?"]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--wait-s", type=float, default=600, help="the longest wait for version 1 [600]")
    p.add_argument("--out", help="the JSON file [bench/results/first_hour.json]")
    return p.parse_args(argv)


def reply(term: Terminal, text: str) -> dict:
    """Type one message; the reply's time and what the chat printed after it."""
    started = time.perf_counter()
    term.type(text)
    shown = term.expect("you> ", timeout=300).string
    return {"message": text, "reply_s": time.perf_counter() - started, "shown": shown.strip()[-300:]}


async def run(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="openclaw-first-hour-"))
    out: dict = {"env": env_info(), "model": args.model}
    srv = ServerProcess(tmp / "run", model=args.model, log_path=tmp / "serve.log")
    srv.start(timeout=600)
    out["start_s"] = srv.startup_s
    print(f"server up in {srv.startup_s:.1f} s", file=sys.stderr)
    term = Terminal([sys.executable, "-m", "slime_ext.cli", "chat", "--url", srv.url])
    try:
        term.expect("you> ", timeout=60)
        turns = []
        for message, rating in RATED:
            turn = reply(term, message)
            started = time.perf_counter()
            term.type(rating)
            shown = term.expect("you> ", timeout=60).string.strip()[-300:]
            turn.update(rating=rating, rating_s=time.perf_counter() - started, rating_shown=shown)
            turns.append(turn)
            print(f"  {message!r}: reply {turn['reply_s']:.1f} s; {rating}", file=sys.stderr)
        rated_at, after = time.perf_counter(), []
        while "now serving version 1" not in term.transcript:
            if time.perf_counter() - rated_at > args.wait_s:
                break
            after.append(reply(term, AFTER[len(after) % len(AFTER)]))
            await asyncio.sleep(5)
        served = [line.strip() for line in term.transcript.splitlines() if "now serving version 1" in line]
        out.update(turns=turns, after=after, version_1_s=time.perf_counter() - rated_at if served else None,
                   served_sentence=served[0] if served else None)
        term.type("/quit")
        term.exit_code()
    finally:
        srv.stop()
    started = time.perf_counter()
    records = subprocess.run([sys.executable, "-m", "slime_ext.cli", "records", "--run-dir", str(srv.run_dir)],
                             capture_output=True, text=True).stdout
    out.update(records_s=time.perf_counter() - started, records_trained_lines=records.count("trained in v1"),
               records_feedback_lines=records.count("from the user's feedback"))
    return out


def report(r: dict) -> str:
    rows = [["server start (to /healthz)", f"{r['start_s']:.1f} s"]]
    rows += [[f"reply to {t['message']!r}", f"{t['reply_s']:.1f} s"] for t in r["turns"]]
    rows += [["a rating (/good, /bad) answered", f"{max(t['rating_s'] for t in r['turns']):.2f} s at most"],
             ["last rating -> version 1 served", f"{r['version_1_s']:.0f} s" if r["version_1_s"] else "not served"],
             ["replies while waiting", str(len(r["after"]))],
             ["`records` (turns shown as trained in v1)", f"{r['records_s']:.1f} s ({r['records_trained_lines']})"]]
    return (md_table(["step", "time"], rows) + f"\n\nThe chat printed: {r['served_sentence']!r}\n"
            f"Model {r['model']}; {r['env'].get('cpu_count')} cores; load at the end {r['env'].get('loadavg_end')}.")


if __name__ == "__main__":
    sys.exit(main_of("first_hour", parse_args, run, report))
