"""``tiny`` with a real end-of-turn prior, for tests about response length.

The built-in ``tiny`` model has random weights (std 0.02) and a tied output layer, so its
next-token distribution is almost uniform over the 49152-token vocabulary: ``<|im_end|>`` has a
probability of about 2e-5 per step and every response runs to ``max_tokens``. ``build_eos_model``
derives a model whose per-step EOS probability is moderate (mean sampled length about 13 of
24 tokens, from 1 to 24) and depends little on the context, so a policy can learn to stop earlier:

1. A constant offset along a fixed unit direction ``u`` is added to every input embedding, so the
   residual stream (and the final normalized hidden state) of every position has a large, stable
   component along ``u``.
2. The output layer is untied from the input embeddings (it keeps their original values) and the
   EOS row is set to ``eos_scale * u``: the EOS logit is then ``eos_scale * (h . u)``, about the
   same at every position, while the other logits stay those of the random model.

Nothing else changes, so the LoRA targets (attention and MLP projections) can move the EOS
probability by moving the final hidden state along ``u`` (their inputs carry the constant
component, so a context-independent shift is easy to learn).
"""

from __future__ import annotations

from pathlib import Path

# The offset along u, in units of the mean embedding row norm, and the EOS row's length. With
# these, h . u is about 5.6 +- 0.35 over positions and the EOS logit about 8.0 against a
# log-sum-exp of the other logits of about 10.8: a per-step EOS probability of roughly 0.06.
EMBED_OFFSET = 2.0
EOS_SCALE = 1.45
DIRECTION_SEED = 0


def build_eos_model(out: str | Path, *, embed_offset: float = EMBED_OFFSET, eos_scale: float = EOS_SCALE) -> Path:
    """Write the EOS-prior variant of ``tiny`` (float32 safetensors, with the tokenizer) to ``out``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from slime_ext.models import resolve_model

    src = resolve_model("tiny")
    out = Path(out)
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    assert eos == model.config.eos_token_id == tok.eos_token_id
    emb = model.get_input_embeddings().weight
    u = torch.randn(emb.shape[1], generator=torch.Generator().manual_seed(DIRECTION_SEED))
    u /= u.norm()
    with torch.no_grad():
        head = emb.detach().clone()
        head[eos] = eos_scale * u
        emb.add_(embed_offset * emb.norm(dim=1).mean() * u)
    model.config.tie_word_embeddings = False
    model.lm_head.weight = torch.nn.Parameter(head)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out
