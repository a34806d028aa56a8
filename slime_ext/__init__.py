"""openclaw-rl: serve a self-hosted agent and learn from its live conversations.

Importing this package is cheap: heavy dependencies (torch, transformers, megatron, sglang,
ray) are imported inside the functions that need them.
"""

__version__ = "0.1.0"
