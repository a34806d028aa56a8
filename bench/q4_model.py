"""A laptop-sized model for the speed benchmarks: Qwen2.5-0.5B's shape, random weights on a 4-bit grid.

No 0.5B checkpoint can be downloaded here, and speed does not depend on what the weights say, so this
writes one: Qwen2.5-0.5B-Instruct's architecture (Qwen2: hidden 896, 24 layers, 14 query heads and 2 KV
heads of 128, MLP 4,864, q/k/v biases, tied embeddings), random weights, every linear layer on a Q4_1
grid (per group of 32 weights: a scale and a minimum, as a GGUF stores them, so our engine reads them as
int4 at one row, as it does SmolLM2's, and llama.cpp's Q4_1 holds them exactly), the embedding in bf16.
The tokenizer and chat template are SmolLM2's (the only ones here): a vocabulary of 49,152 where Qwen's
has 151,936, so the output layer (tied to the embedding) is 44 M parameters, not 136 M, and a step
reads about 90 MB less than the real model's would.

With ``--llama-cpp DIR`` (a llama.cpp source tree with ``build/bin/llama-quantize`` built, bench/README.md)
it also writes the GGUF llama.cpp serves: ``convert_hf_to_gguf.py`` to bf16, then ``llama-quantize``
to Q4_1. Bench-time tools only: nothing of llama.cpp's enters this repository.

  python bench/q4_model.py --out /tmp/q4-0.5b --llama-cpp /tmp/llama/src
  python bench/vs_llamacpp.py --llama-server ... --model /tmp/q4-0.5b --gguf /tmp/q4-0.5b/model-q4_1.gguf
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, max_position_embeddings=8192, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, use_sliding_window=False)


def grid(out_f: int, in_f: int, gen, std: float = 0.02):
    """A random ``[out, in]`` bf16 weight on a Q4_1 grid of groups of 32 (scale x q + min, q in 0..15)."""
    import torch

    q = torch.randint(0, 16, (out_f, in_f // 32, 32), generator=gen).float()
    q[..., 0], q[..., 1] = 0, 15  # each group spans its grid, as Q4_1 picks scale and minimum
    scale = 2 * std * 1.7 / 15  # q's spread in 0..15 times scale: about std
    return ((q - 7.5) * scale).reshape(out_f, in_f).bfloat16()


def write_model(out: Path, seed: int = 0) -> None:
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    from slime_ext.models import resolve_model

    tok_dir = resolve_model("smollm2-135m")
    tok = AutoTokenizer.from_pretrained(tok_dir)
    config = Qwen2Config(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         torch_dtype="bfloat16", **QWEN25_05B)
    gen = torch.Generator().manual_seed(seed)
    with torch.device("meta"):
        model = Qwen2ForCausalLM(config)
    model = model.to_empty(device="cpu").to(torch.bfloat16)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2 and "embed_tokens" not in name:
                p.copy_(grid(*p.shape, gen))
            elif "norm" in name:
                p.fill_(1.0)
            elif name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
            else:  # the embedding (and the tied output layer)
                p.copy_(torch.randn(p.shape, generator=gen) * 0.02)
    model.tie_weights()
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out)
    for f in tok_dir.iterdir():  # SmolLM2's files as they are (re-saved, llama.cpp's converter no longer knows them)
        if f.name.startswith(("tokenizer", "special_tokens", "vocab", "merges", "chat_template")):
            shutil.copy(f, out / f.name)
    print(f"wrote {out}: Qwen2, {n / 1e6:.0f} M parameters, linear layers on a Q4_1 grid", file=sys.stderr)


def write_gguf(out: Path, llama_cpp: Path) -> Path:
    bf16, q4 = out / "model-bf16.gguf", out / "model-q4_1.gguf"
    # the converter's own needs beyond this project's (sentencepiece): on $PYTHONPATH (bench/README.md)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(llama_cpp / "gguf-py"),
                                                                      os.environ.get("PYTHONPATH")]))}
    # transformers loads SmolLM2's tokenizer as Qwen2's under a Qwen2 config, whose pre-tokenizer the converter
    # does not recognize; the files are SmolLM2's, so it is told which one they are
    convert = ("import sys; sys.path.insert(0, sys.argv[1]); import conversion.base as b, convert_hf_to_gguf as c; "
               "b.TextModel.get_vocab_base_pre = lambda self, tok: 'smollm'; sys.argv = sys.argv[1:]; c.main()")
    subprocess.run([sys.executable, "-c", convert, str(llama_cpp), str(out), "--outtype", "bf16",
                    "--outfile", str(bf16)], check=True, env=env)
    subprocess.run([str(llama_cpp / "build" / "bin" / "llama-quantize"), str(bf16), str(q4), "Q4_1"], check=True)
    bf16.unlink()
    print(f"wrote {q4}", file=sys.stderr)
    return q4


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="directory to write the HF checkpoint (and the GGUF) into")
    p.add_argument("--llama-cpp", default=None, help="a llama.cpp source tree with build/bin/llama-quantize: "
                                                      "also write model-q4_1.gguf")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = Path(args.out)
    write_model(out, args.seed)
    if args.llama_cpp:
        write_gguf(out, Path(args.llama_cpp))
    return 0


if __name__ == "__main__":
    sys.exit(main())
