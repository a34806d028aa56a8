"""Test support: a tiny "vision-language" checkpoint made from the tiny test model, laid out as a Qwen-VL one.

Its tokenizer has the Qwen-VL vision tokens (``<|vision_start|>``, ``<|image_pad|>``, ``<|vision_end|>``), its
chat template renders an image part of a message as ``<|vision_start|><|image_pad|><|vision_end|>`` (as
Qwen2-VL's and Qwen3-VL's templates do), and ``preprocessor_config.json`` is a Qwen2-VL image processor with
Qwen3-VL's patch (16) and merge (2) sizes, capped to few pixels so that a screenshot is a dozen tokens. The
language model is the tiny one with its embeddings grown to the new tokens: it cannot see images, but the
SGLang-protocol test server checks them (``_sglang_server.py``) and reads each placeholder run as tokens.
"""

from __future__ import annotations

from pathlib import Path

VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
PATCH, MERGE = 16, 2
MAX_PIXELS = 128 * 96  # a 1024x768 screenshot becomes 128x96: a 8x6 patch grid, 12 placeholder tokens
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string -%}{{ message.content }}"
    "{%- else -%}{%- for part in message.content -%}"
    "{%- if part.type == 'image' -%}<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif part.type == 'text' -%}{{ part.text }}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def make_tiny_vl(dest: Path) -> Path:
    """Write the tiny vision-language checkpoint into ``dest`` (see the module docstring); returns ``dest``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from slime_ext.models import resolve_model

    src = resolve_model("tiny")
    tok = AutoTokenizer.from_pretrained(src)
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    tok.chat_template = CHAT_TEMPLATE
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    model.resize_token_embeddings(len(tok), mean_resizing=False)
    with torch.no_grad():  # the same weights every time (tied: the new tokens' logits are 0)
        model.get_input_embeddings().weight[-len(VISION_TOKENS):] = 0.0
    dest.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(dest)
    tok.save_pretrained(dest)
    Qwen2VLImageProcessorPil(patch_size=PATCH, merge_size=MERGE, temporal_patch_size=2, min_pixels=32 * 32,
                             max_pixels=MAX_PIXELS).save_pretrained(dest)
    return dest
