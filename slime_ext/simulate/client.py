"""A small OpenAI-compatible chat client over ``urllib`` for the simulator and the experiment.

Retries server failures (HTTP 5xx, connection errors, timeouts, bad JSON) with backoff and counts
every failed attempt in ``failed``; a request that still fails returns ``None`` instead of raising,
so a long experiment survives a restarting or overloaded server. An HTTP 4xx is our own mistake
and raises ``RuntimeError`` at once. The API key goes only into the ``Authorization`` header.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

RETRIES = 3


class ChatClient:
    def __init__(self, base_url: str, *, model: str = "m", max_tokens: int = 96, api_key: str | None = None,
                 timeout_s: float = 300.0, retries: int = RETRIES):
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.retries = retries
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self.failed = 0

    def __repr__(self) -> str:  # never shows the key
        return f"ChatClient({self.url!r}, model={self.model!r})"

    def chat(self, messages: list[dict], headers: dict[str, str] | None = None, **sampling: Any) -> str | None:
        """The assistant's text for ``messages``, or ``None`` when every attempt failed."""
        body = json.dumps({"model": self.model, "messages": messages, "max_tokens": self.max_tokens,
                           **sampling}).encode()
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=body, headers={**self._headers, **(headers or {})})
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read())["choices"][0]["message"]["content"] or ""
            except urllib.error.HTTPError as e:
                if e.code < 500:
                    raise RuntimeError(f"{self.url} refused the request: HTTP {e.code}: {e.read()[:300]!r}") from None
            except (OSError, TimeoutError, ValueError, KeyError, IndexError, TypeError):
                pass  # URLError, reset, timeout, bad JSON or shape
            self.failed += 1
            if attempt < self.retries:
                time.sleep(0.5 * 2 ** attempt)
        return None
