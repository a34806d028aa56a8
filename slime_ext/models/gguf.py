"""GGUF files: write a Llama-family model as one (``write_gguf``), and read one as a checkpoint (``convert_gguf``).

The writer lays a Hugging Face ``LlamaForCausalLM`` out as llama.cpp's own converter does: llama.cpp's tensor
names, its row order for the query and key projections (``_permute``: llama.cpp rotates interleaved pairs,
Hugging Face rotates halves), the norms in float32 and the matrices in ``f32`` or ``f16``, the hyper-parameters
under ``llama.*``, and the byte-level BPE tokenizer (tokens, token types, merges, special ids, chat template)
from the tokenizer's ``tokenizer.json``. llama.cpp, Ollama and transformers' GGUF loader read it. Other
architectures are refused rather than written wrong.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

GGUF_TYPES = ("f32", "f16")
# Hugging Face names of a Llama decoder layer's tensors -> llama.cpp's (``blk.N.`` + this)
LAYER_NAMES = {"input_layernorm.weight": "attn_norm.weight", "self_attn.q_proj.weight": "attn_q.weight",
               "self_attn.k_proj.weight": "attn_k.weight", "self_attn.v_proj.weight": "attn_v.weight",
               "self_attn.o_proj.weight": "attn_output.weight", "post_attention_layernorm.weight": "ffn_norm.weight",
               "mlp.gate_proj.weight": "ffn_gate.weight", "mlp.up_proj.weight": "ffn_up.weight",
               "mlp.down_proj.weight": "ffn_down.weight"}
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4


class GgufError(ValueError):
    """A model or tokenizer this writer cannot lay out as GGUF."""


def write_gguf(model, tok, path: Path, gguf_type: str = "f16") -> None:
    """Write ``model`` (a ``LlamaForCausalLM``) and its tokenizer ``tok`` to the GGUF file ``path``."""
    import gguf
    import numpy as np

    config = model.config
    if config.model_type != "llama" or getattr(config, "attention_bias", False) or getattr(config, "mlp_bias", False):
        raise GgufError(f"GGUF export writes Llama-family models; this one is {config.model_type!r} (export it as "
                        "merged, and convert that with llama.cpp's convert_hf_to_gguf.py)")
    if gguf_type not in GGUF_TYPES:
        raise GgufError(f"the GGUF type must be one of {', '.join(GGUF_TYPES)}, got {gguf_type!r}")
    writer = gguf.GGUFWriter(str(path), "llama")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    writer.add_name(Path(getattr(config, "_name_or_path", "") or "model").name)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_freq_base(float(_rope_theta(config)))
    writer.add_layer_norm_rms_eps(float(config.rms_norm_eps))
    writer.add_rope_dimension_count(head_dim)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if gguf_type == "f32" else gguf.LlamaFileType.MOSTLY_F16)
    _add_tokenizer(writer, tok, config.vocab_size)
    matrix = np.float32 if gguf_type == "f32" else np.float16
    for name, tensor in _tensors(model, config):
        data = tensor.detach().float().cpu().numpy()
        writer.add_tensor(name, data if data.ndim == 1 else data.astype(matrix))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _rope_theta(config) -> float:
    params = getattr(config, "rope_parameters", None) or {}
    if params.get("rope_type", "default") not in ("default", None):
        raise GgufError(f"GGUF export writes plain rotary embeddings; this model's are {params['rope_type']!r}")
    return params.get("rope_theta", getattr(config, "rope_theta", 10000.0))


def _tensors(model, config):
    """``(llama.cpp name, tensor)`` of every weight, the query and key rows in llama.cpp's order."""
    state = model.state_dict()
    yield "token_embd.weight", state["model.embed_tokens.weight"]
    for i in range(config.num_hidden_layers):
        for hf, ours in LAYER_NAMES.items():
            t = state[f"model.layers.{i}.{hf}"]
            if hf == "self_attn.q_proj.weight":
                t = _permute(t, config.num_attention_heads)
            elif hf == "self_attn.k_proj.weight":
                t = _permute(t, config.num_key_value_heads)
            yield f"blk.{i}.{ours}", t
    yield "output_norm.weight", state["model.norm.weight"]
    if not config.tie_word_embeddings:
        yield "output.weight", state["lm_head.weight"]


def _permute(w, heads: int):
    """llama.cpp's row order of a query or key projection: each head's halves interleaved (``convert_hf_to_gguf``'s
    ``LlamaModel.permute``); transformers' GGUF loader undoes it."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _add_tokenizer(writer, tok, vocab_size: int) -> None:
    data = json.loads(tok.backend_tokenizer.to_str())
    bpe = data.get("model", {})
    if bpe.get("type") != "BPE":
        raise GgufError(f"GGUF export writes byte-level BPE tokenizers; this one is {bpe.get('type')!r}")
    tokens: list[str | None] = [None] * vocab_size
    types = [TOKEN_NORMAL] * vocab_size
    for text, i in bpe["vocab"].items():
        if i < vocab_size:
            tokens[i] = text
    for added in data.get("added_tokens", []):
        if added["id"] < vocab_size:
            tokens[added["id"]] = added["content"]
            types[added["id"]] = TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED
    for i, text in enumerate(tokens):
        if text is None:  # an id the tokenizer never produces (padding of the embedding)
            tokens[i], types[i] = f"[PAD{i}]", TOKEN_USER_DEFINED
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer(tokens))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in bpe.get("merges", [])])
    for add, value in ((writer.add_bos_token_id, tok.bos_token_id), (writer.add_eos_token_id, tok.eos_token_id),
                       (writer.add_pad_token_id, tok.pad_token_id), (writer.add_unk_token_id, tok.unk_token_id)):
        if value is not None:
            add(value)
    writer.add_add_bos_token(False)
    if tok.chat_template:
        writer.add_chat_template(tok.chat_template)


# llama.cpp picks its pre-tokenizer (the regex that splits text before BPE) by name. A tokenizer is recognised
# here by its first 512 tokens: the built-in models' (SmolLM2's) is "smollm"; others get llama.cpp's default.
KNOWN_PRE = {"5e4cce71e82e8ddead6b4b46c9b3103b": "smollm"}  # md5 of the first 512 tokens, one per line


def _pre_tokenizer(tokens: list[str]) -> str:
    return KNOWN_PRE.get(hashlib.md5("\n".join(tokens[:512]).encode()).hexdigest(), "default")


def convert_gguf(path: Path, out: Path) -> None:
    """Read the GGUF file ``path`` (dequantized) and write it to ``out`` as a safetensors checkpoint."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.models.builtin import save_checkpoint

    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    save_checkpoint(model, tok, out)


def file_key(path: Path) -> str:
    """A name for the checkpoint converted from ``path``: its stem and a hash of its path, size and mtime."""
    st = path.stat()
    digest = hashlib.sha256(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode()).hexdigest()[:12]
    return f"{path.stem}-{digest}"
