"""Fixed, deterministic chat prompts for the benchmarks (no randomness: runs are comparable)."""

from __future__ import annotations

TOPICS = [
    "the water cycle", "binary search", "photosynthesis", "the French revolution", "TCP congestion control",
    "black holes", "sourdough bread", "the immune system", "plate tectonics", "hash tables", "jazz harmony",
    "the Roman aqueducts", "solar panels", "garbage collection", "coral reefs", "the printing press",
    "public-key cryptography", "volcanoes", "honey bees", "the stock market", "compilers", "glaciers",
    "the Silk Road", "electric motors", "sleep", "chess openings", "rainbows", "vaccines", "lighthouses",
    "neural networks", "tea ceremonies", "the moon landing",
]

SYSTEMS = [None, "You are a helpful assistant.", "You are a careful assistant. Answer clearly, with examples where useful."]

QUESTIONS = [
    "Explain {t}.",
    "Write a short poem about {t}.",
    "What are three important facts about {t}? For each one, give some detail and an example, and say why it matters.",
]

STORY = (
    "Write a long, detailed story about {t}. Describe the setting, introduce several characters and "
    "let them talk to each other. Make it at least 600 words and do not stop early."
)


def chat_prompts(n: int) -> list[list[dict]]:
    """``n`` chat conversations of varied length (with or without a system message)."""
    out = []
    for i in range(n):
        t = TOPICS[i % len(TOPICS)]
        msgs: list[dict] = []
        system = SYSTEMS[(i // len(QUESTIONS)) % len(SYSTEMS)]
        if system:
            msgs.append({"role": "system", "content": system})
        msgs.append({"role": "user", "content": QUESTIONS[i % len(QUESTIONS)].format(t=t)})
        out.append(msgs)
    return out


def story_prompts(n: int) -> list[list[dict]]:
    """``n`` requests for long stories: replies that do not end within a few dozen tokens."""
    return [[{"role": "user", "content": STORY.format(t=TOPICS[i % len(TOPICS)])}] for i in range(n)]
