"""Server-sent events as Anthropic's and OpenAI's Responses streams write them: an event name, then its JSON."""

from __future__ import annotations

import json
from typing import Any


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
