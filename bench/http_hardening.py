"""HTTP hardening figures: how long a half-sent request is held, and how fast `/healthz` answers
while a huge prompt is being handled.

  .venv/bin/python bench/http_hardening.py [--model tiny] [--prompt-mb 7] [--extra "--header-timeout-s 10"]

- **half-sent hold**: open a connection to a real `openclaw-rl serve`, send half a request line
  (``POST /v1/chat/comp``) and nothing more; the figure is the time until the server closes it
  (``recv`` returns end-of-file), with the server's default settings unless ``--extra`` says otherwise.
- **/healthz under a big prompt**: one client sends a chat request whose user message is
  ``--prompt-mb`` MB of text; meanwhile another polls ``GET /healthz`` every 50 ms; the figure is
  the slowest and the median ``/healthz`` latency while the big request is in flight, and how long
  the big request took (and its status: with the tiny model's 64k context it is a 400).

Prints a Markdown table; writes bench/results/http_hardening.json.
"""

from __future__ import annotations

import argparse
import json
import shlex
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from slime_ext.launch import ServerProcess  # noqa: E402


def half_sent_hold_s(port: int, limit_s: float) -> float:
    """Seconds from sending half a request line until the server closes the connection (``limit_s``
    when it still holds it then)."""
    with socket.create_connection(("127.0.0.1", port), timeout=limit_s) as s:
        s.sendall(b"POST /v1/chat/comp")
        t0 = time.perf_counter()
        try:
            while s.recv(4096):
                pass
        except ConnectionResetError:
            pass
        except TimeoutError:
            return limit_s
        return time.perf_counter() - t0


def healthz_during_big_prompt(srv: ServerProcess, prompt_mb: float) -> dict:
    body = json.dumps({"model": "m", "max_tokens": 1,
                       "messages": [{"role": "user", "content": "word " * int(prompt_mb * 1024 * 1024 / 5)}]}).encode()
    done = threading.Event()
    result: dict = {}

    def big() -> None:
        req = urllib.request.Request(srv.url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                result["status"] = r.status
        except urllib.error.HTTPError as e:
            result["status"] = e.code
            result["error"] = json.loads(e.read())["error"]["message"][:120]
        result["big_request_s"] = time.perf_counter() - t0
        done.set()

    threading.Thread(target=big, daemon=True).start()
    lat: list[float] = []
    while not done.is_set():
        t0 = time.perf_counter()
        with urllib.request.urlopen(srv.base + "/healthz", timeout=600) as r:
            r.read()
        lat.append(time.perf_counter() - t0)
        time.sleep(0.05)
    result.update(healthz_max_s=max(lat), healthz_median_s=statistics.median(lat), healthz_polls=len(lat),
                  body_mb=len(body) / 1e6)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny")
    p.add_argument("--prompt-mb", type=float, default=7.0)
    p.add_argument("--extra", default="", help="more serve flags, e.g. \"--header-timeout-s 10\"")
    p.add_argument("--skip-hold", action="store_true", help="only the /healthz figure")
    p.add_argument("--hold-limit-s", type=float, default=120.0, help="stop waiting for the close after this long")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "run", args.model, ["--method", "none", *shlex.split(args.extra)]).start()
        try:
            big = healthz_during_big_prompt(srv, args.prompt_mb)
            hold = None if args.skip_hold else half_sent_hold_s(srv.port, args.hold_limit_s)
        finally:
            srv.stop()
    print("| figure | value |\n|---|---|")
    held = "-" if hold is None else (f">= {hold:g} s (still open)" if hold >= args.hold_limit_s else f"{hold:.2f} s")
    print(f"| half-sent request held for | {held} |")
    print(f"| /healthz latency while a {big['body_mb']:.1f} MB prompt is handled: max / median | "
          f"{big['healthz_max_s'] * 1000:.0f} ms / {big['healthz_median_s'] * 1000:.0f} ms ({big['healthz_polls']} polls) |")
    print(f"| the big request itself | {big['big_request_s']:.2f} s, HTTP {big['status']} {big.get('error', '')} |")
    out = Path(__file__).resolve().parent / "results" / "http_hardening.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"half_sent_hold_s": hold, **big, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
