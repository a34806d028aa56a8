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

# Open prompts a new user types in the first minutes, as they would type them (bench/reply_length.py): questions,
# explanations, "write a poem", "tell me about X", how-tos, small talk; no system message (the server's template adds
# the model's own).
NEW_USER = [
    "What is the meaning of life?", "Tell me about the Roman Empire.", "Explain how a computer works.",
    "Write a poem about the sea.", "How do I make a cup of tea?", "What is machine learning?",
    "Can you help me plan a trip to Japan?", "Tell me a joke.", "Why is the sky blue?",
    "How do I learn to program in Python?", "Write a short story about a robot who wants to be human.",
    "What are the benefits of exercise?", "Explain quantum computing in simple terms.",
    "Give me some tips for a job interview.", "What should I cook for dinner tonight?", "Tell me about black holes.",
    "How does the internet work?", "Write a haiku about autumn.",
    "What is the difference between a virus and a bacterium?", "How can I sleep better?", "Who was Albert Einstein?",
    "Explain the theory of evolution.", "Write a Python function that reverses a string.",
    "What are some good books to read?", "How do I change a flat tire?", "Tell me about climate change.",
    "What is the capital of Australia and what is it known for?", "Write a poem about love.", "How do vaccines work?",
    "What is the best way to save money?", "Explain recursion to a beginner.",
    "Tell me about the history of the internet.", "How do I write a good cover letter?", "What is photosynthesis?",
    "Write a limerick about a cat.", "What can you do?", "Hi! Who are you?", "Summarize the plot of Romeo and Juliet.",
    "How do I start a vegetable garden?", "What are the pros and cons of electric cars?",
]


def new_user_prompts() -> list[list[dict]]:
    """The ``NEW_USER`` prompts as one-message chat conversations."""
    return [[{"role": "user", "content": p}] for p in NEW_USER]
