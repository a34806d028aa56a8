"""``openclaw-rl chat``: a terminal chat with a running server, and explicit feedback on its replies.

It keeps the conversation (one ``X-Session-Id`` per conversation, so every message is a turn of the same
session and the next message is the judge's signal about the previous reply), prints each reply as it streams,
and takes commands:

  /good                       the last reply was right (POST /v1/feedback, verdict +1)
  /bad [what would be better] it was not; the words after /bad are the hint the trainer learns from
  /new                        start a new conversation
  /memory                     your preferences (GET /v1/memory): what the server remembers you asked for
  /help, /quit

After each reply it says which policy version served it and how the judge read the person's message as feedback
on the reply before (``GET /v1/feedback/{id}``), and when the server starts serving a newly trained version it
prints what that version learned from (``/healthz``'s ``training.served``). Only the standard library:
it speaks HTTP to the server like any other client, so it works against a server on another machine too.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, TextIO

HELP = ("commands: /good (the last reply was right), /bad [what would have been better], /new (a new "
        "conversation), /memory (your preferences), /help, /quit")


class ChatError(Exception):
    """What went wrong talking to the server, in one line for the user."""


@dataclass
class Client:
    """The server's HTTP API, as this chat uses it."""

    url: str  # the API base, ending in /v1
    api_key: str | None = None
    timeout_s: float = 600.0

    @property
    def root(self) -> str:
        return self.url.removesuffix("/").removesuffix("/v1")

    def _request(self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None):
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Content-Type": "application/json", **(headers or {}),
                **({"Authorization": f"Bearer {self.api_key}"} if self.api_key else {})}
        req = urllib.request.Request(self.root + path, data=data, method=method, headers=sent)
        try:
            return urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as e:
            raise ChatError(f"the server said {e.code}: {error_message(e.read())}") from None
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise ChatError(f"cannot reach the server at {self.url} ({reason}); start one with `openclaw-rl serve` "
                            f"or pass --url") from None

    def get(self, path: str) -> dict[str, Any]:
        with self._request("GET", path) as r:
            return json.loads(r.read())

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        with self._request("POST", path, body) as r:
            return json.loads(r.read())

    def stream_chat(self, body: dict[str, Any], session: str) -> Iterator[dict[str, Any]]:
        """The chunks of one streamed chat completion."""
        with self._request("POST", "/v1/chat/completions", {**body, "stream": True},
                           {"X-Session-Id": session, "Accept": "text/event-stream"}) as r:
            for raw in r:
                line = raw.decode("utf-8", "replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                chunk = json.loads(data)
                if "error" in chunk:
                    raise ChatError(f"the server stopped the reply: {chunk['error'].get('message', chunk['error'])}")
                yield chunk


def error_message(body: bytes) -> str:
    """The message of an API error body (OpenAI's shape), or the body's start."""
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:200].decode("utf-8", "replace")


@dataclass
class Chat:
    """One person's chat: the conversation so far, the last reply's id, the version last seen served."""

    client: Client
    model: str
    max_tokens: int | None = None
    out: TextIO = sys.stdout
    messages: list[dict[str, str]] = field(default_factory=list)
    session: str = field(default_factory=lambda: f"chat-{uuid.uuid4().hex[:12]}")
    last_id: str | None = None
    rated: set[str] = field(default_factory=set)  # replies the person rated with /good or /bad
    version: int | None = None
    learns: bool = False  # the server trains on judged turns (its /healthz says)

    def say(self, text: str = "", end: str = "\n") -> None:
        self.out.write(text + end)
        self.out.flush()

    def start(self) -> None:
        health = self.client.get("/healthz")
        self.version = health.get("policy_version")
        self.learns = bool(health.get("learns"))
        learning = "it learns from your feedback" if self.learns else "it records, it does not train"
        self.say(f"connected to {health.get('model')} at {self.client.url}: serving version {self.version}; {learning}")
        self.say(HELP)

    def handle(self, line: str) -> bool:
        """Act on one line the person typed; False when the chat should end."""
        text = line.strip()
        if not text:
            return True
        command, _, rest = text.partition(" ")
        commands: dict[str, Callable[[str], bool | None]] = {
            "/quit": lambda _: False, "/exit": lambda _: False, "/help": lambda _: self.say(HELP),
            "/new": self.new, "/good": lambda _: self.feedback(1, None), "/bad": lambda r: self.feedback(-1, r),
            "/memory": self.memory}
        if command.startswith("/") and command not in commands:
            self.say(f"unknown command {command}; {HELP}")
            return True
        try:
            if command in commands:
                return commands[command](rest.strip()) is not False
            self.ask(text)
        except ChatError as e:
            self.say(f"  ! {e}")
        return True

    def ask(self, text: str) -> None:
        """Send the person's message with the conversation so far and print the reply as it streams."""
        messages = [*self.messages, {"role": "user", "content": text}]
        body: dict[str, Any] = {"model": self.model, "messages": messages}
        if self.max_tokens:
            body["max_tokens"] = self.max_tokens
        parts, reply_id, finish = [], None, None
        self.say("assistant> ", end="")
        for chunk in self.client.stream_chat(body, self.session):
            reply_id = chunk.get("id", reply_id)
            for choice in chunk.get("choices", []):
                piece = (choice.get("delta") or {}).get("content") or ""
                parts.append(piece)
                self.say(piece, end="")
                finish = choice.get("finish_reason") or finish
        self.say()
        self.messages = [*messages, {"role": "assistant", "content": "".join(parts)}]
        previous, self.last_id = self.last_id, reply_id
        cut = " (cut: the length limit, or the server's repetition stop)" if finish == "length" else ""
        self.say(f"  [version {self.served_version()}{cut}]")
        if previous is not None and previous not in self.rated:
            self.say_how_it_was_read(previous)

    def say_how_it_was_read(self, response_id: str) -> None:
        """What the judge made of the person's message as feedback on the reply before (once it has judged it)."""
        seen = self.client.get(f"/v1/feedback/{response_id}")
        if seen.get("source") != "judge" or not seen.get("verdict"):
            return  # not judged yet, or read as neither approval nor correction
        hint = f", hint {seen['hint']!r}" if seen.get("hint") else ""
        self.say(f"  (your message was read as {seen['verdict']:+d} on the reply before{hint})")

    def served_version(self) -> int | None:
        """The version serving now; when it changed since last seen, what the new one learned is printed."""
        health = self.client.get("/healthz")
        version = health.get("policy_version")
        if self.version is not None and version != self.version:
            served = (health.get("training") or {}).get("served") or f"now serving version {version}"
            self.say(f"  * {served}")
        self.version = version
        return version

    def feedback(self, verdict: int, hint: str | None) -> None:
        if self.last_id is None:
            self.say("  nothing to rate yet: /good and /bad rate the last reply")
            return
        out = self.client.post("/v1/feedback", {"response_id": self.last_id, "verdict": verdict, "hint": hint or None})
        self.rated.add(self.last_id)
        said = f"{'+1' if out['verdict'] > 0 else '-1'}" + (f" with the hint {out['hint']!r}" if out.get("hint") else "")
        batch = out.get("batch_size") or 0
        waits = (f"; {out['waiting_to_train']}/{batch} turns wait for the next training step" if batch
                 else "; the trainer takes it with its next batch" if self.learns
                 else "; this server records it but does not train")
        standing = "; kept as a standing preference" if out.get("standing") else ""
        self.say(f"  recorded {said} for the reply served by version {out['served_by_version']}{standing}{waits}")

    def new(self, _: str = "") -> None:
        self.messages, self.last_id = [], None
        self.session = f"chat-{uuid.uuid4().hex[:12]}"
        self.say("  (a new conversation)")

    def memory(self, _: str = "") -> None:
        out = self.client.get("/v1/memory")
        prefs = out.get("data", [])
        if not prefs:
            self.say("  no preferences yet: a correction that says what you want (/bad answer in one sentence) adds one")
        for p in prefs:
            kind = "standing" if p["standing"] else "one-off "
            applied = ", applied to your requests" if p.get("applied") else ""
            self.say(f"  [{p['id']}] {kind} {p['hint']!r} (stated {p['times']}x{applied})")
        if prefs and out.get("memory") == "off":
            self.say("  (the server runs with --memory off: they teach the trainer, they are not added to requests)")


def run_chat(url: str, api_key: str | None, model: str, max_tokens: int | None,
             read: Callable[[str], str] = input, out: TextIO = sys.stdout) -> int:
    """The chat loop until /quit or end of input; 1 when the server cannot be reached at the start."""
    chat = Chat(Client(url, api_key or os.environ.get("OPENCLAW_RL_API_KEY")), model=model, max_tokens=max_tokens,
                out=out)
    try:
        chat.start()
    except ChatError as e:
        print(f"openclaw-rl chat: {e}", file=sys.stderr)
        return 1
    while True:
        try:
            line = read("you> ")
        except (EOFError, KeyboardInterrupt):
            chat.say()
            return 0
        if not chat.handle(line):
            return 0
