"""The OpenAI-compatible HTTP API (aiohttp)."""
