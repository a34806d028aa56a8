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
- **a small chat behind a big request**: one client sends a big chat request (a ``--prompt-mb`` MB
  user message, or ``--messages`` messages of ``--message-words`` words), and 0.3 s later another client, another user,
  sends a small one (``hi``, ``max_tokens`` 4); the figure is the small chat's latency, next to
  the same small chat's latency on an idle server, and what became of the big one.

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


SMALL = {"model": "m", "max_tokens": 4, "user": "small", "messages": [{"role": "user", "content": "hi"}]}


def chat(srv: ServerProcess, body: dict, timeout: float = 600) -> tuple[int, float, str]:
    """``(status, seconds, error message or '')`` of one non-streaming chat request."""
    req = urllib.request.Request(srv.url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    t0 = time.perf_counter()
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            r.read()
            return r.status, time.perf_counter() - t0, ""
    except urllib.error.HTTPError as e:
        return e.code, time.perf_counter() - t0, json.loads(e.read())["error"]["message"][:120]


def small_chat_behind(srv: ServerProcess, big_body: dict, lead_s: float = 0.3) -> dict:
    """The small chat's latency when it is sent ``lead_s`` after ``big_body`` (another user's)."""
    big: dict = {}

    def send_big() -> None:
        big["status"], big["s"], big["error"] = chat(srv, big_body)

    t = threading.Thread(target=send_big, daemon=True)
    t.start()
    time.sleep(lead_s)
    status, small_s, err = chat(srv, SMALL)
    t.join()
    return {"small_status": status, "small_s": small_s, "small_error": err, "big_status": big["status"],
            "big_s": big["s"], "big_error": big["error"], "big_mb": len(json.dumps(big_body)) / 1e6}


def big_prompts(prompt_mb: float, n_messages: int, words: int) -> dict[str, dict]:
    one = {"model": "m", "max_tokens": 1, "user": "big",
           "messages": [{"role": "user", "content": "word " * int(prompt_mb * 1024 * 1024 / 5)}]}
    many = {"model": "m", "max_tokens": 1, "user": "big",
            "messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}: " + "word " * words}
                         for i in range(n_messages - 1)] + [{"role": "user", "content": "and now?"}]}
    return {f"a {prompt_mb:g} MB prompt": one, f"a {n_messages}-message prompt": many}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny")
    p.add_argument("--prompt-mb", type=float, default=7.0)
    p.add_argument("--extra", default="", help="more serve flags, e.g. \"--header-timeout-s 10\"")
    p.add_argument("--messages", type=int, default=10_000, help="messages in the many-message prompt")
    p.add_argument("--message-words", type=int, default=100, help="words in each of them")
    p.add_argument("--skip-hold", action="store_true", help="only the /healthz and small-chat figures")
    p.add_argument("--hold-limit-s", type=float, default=120.0, help="stop waiting for the close after this long")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        srv = ServerProcess(Path(tmp) / "run", args.model, ["--method", "none", *shlex.split(args.extra)]).start()
        try:
            big = healthz_during_big_prompt(srv, args.prompt_mb)
            chat(srv, SMALL)  # warm
            alone = min(chat(srv, SMALL)[1] for _ in range(3))
            behind = {name: small_chat_behind(srv, body) for name, body in big_prompts(args.prompt_mb, args.messages, args.message_words).items()}
            hold = None if args.skip_hold else half_sent_hold_s(srv.port, args.hold_limit_s)
        finally:
            srv.stop()
    print("| figure | value |\n|---|---|")
    held = "-" if hold is None else (f">= {hold:g} s (still open)" if hold >= args.hold_limit_s else f"{hold:.2f} s")
    print(f"| half-sent request held for | {held} |")
    print(f"| /healthz latency while a {big['body_mb']:.1f} MB prompt is handled: max / median | "
          f"{big['healthz_max_s'] * 1000:.0f} ms / {big['healthz_median_s'] * 1000:.0f} ms ({big['healthz_polls']} polls) |")
    print(f"| the big request itself | {big['big_request_s']:.2f} s, HTTP {big['status']} {big.get('error', '')} |")
    print(f"| a small chat on an idle server | {alone:.2f} s |")
    for name, r in behind.items():
        print(f"| a small chat sent 0.3 s after {name} | {r['small_s']:.2f} s (HTTP {r['small_status']}); the big one: "
              f"{r['big_s']:.2f} s, HTTP {r['big_status']} {r['big_error']} |")
    out = Path(__file__).resolve().parent / "results" / "http_hardening.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"half_sent_hold_s": hold, **big, "small_chat_alone_s": alone,
                               "small_chat_behind": behind, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
