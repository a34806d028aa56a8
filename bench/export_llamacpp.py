"""An exported GGUF in llama.cpp: does ``llama-server`` serve what our server serves? (bench, not CI)

Takes a run directory's version (``--run-dir``), or makes one: a LoRA version of SmolLM2-135M with a random
adapter (``--lora-scale``), written as the trainer writes one. Exports it with ``openclaw-rl export --format
gguf``, starts llama.cpp's ``llama-server`` on the file, and compares greedy replies token by token with our
engine serving the same version (float32), on the same prompt token ids (the chat template applied once, here).

  python bench/export_llamacpp.py --llama-server /tmp/llama/src/build/bin/llama-server

Prints, per prompt, how many of the reply's tokens agree before the first difference, and writes
``bench/results/export_llamacpp.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_llamacpp import LlamaServer  # noqa: E402

PROMPTS = ["What is the capital of France?", "Give me three tips for sleeping well.", "Explain what a CPU does.",
           "Write a haiku about the sea.", "How do I boil an egg?", "Name two planets and say one fact about each."]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--llama-server", required=True, help="path of llama.cpp's llama-server binary")
    p.add_argument("--run-dir", help="a run directory with a trained version [a random LoRA version of smollm2-135m]")
    p.add_argument("--version", type=int, help="the version to export [the newest]")
    p.add_argument("--gguf-type", default="f32", choices=("f32", "f16"), help="the GGUF's matrices [f32]")
    p.add_argument("--lora-scale", type=float, default=0.05, help="the made-up adapter's B, times N(0, 1) [0.05]")
    p.add_argument("--max-tokens", type=int, default=48, help="greedy tokens per reply [48]")
    p.add_argument("--out", default="bench/results/export_llamacpp.json", help="JSON output path")
    return p.parse_args(argv)


def made_up_version(run_dir: Path, scale: float) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from slime_ext.models import resolve_model
    from slime_ext.trainers import checkpoints

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(resolve_model("smollm2-135m"), dtype=torch.float32),
                           LoraConfig(r=16, lora_alpha=32, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                           "gate_proj", "up_proj", "down_proj"]))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)
    checkpoints.write(run_dir, 1, model, torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0),
                      {"turns": [], "metrics": {}})


async def ours(run_dir: Path, version: int, prompts: list[list[int]], max_tokens: int) -> list[list[int]]:
    from slime_ext.engines.base import SamplingParams
    from slime_ext.engines.local import LocalEngine
    from slime_ext.models import resolve_model
    from slime_ext.trainers import checkpoints

    eng = LocalEngine(resolve_model("smollm2-135m"), dtype="float32", prefix_cache_tokens=0)
    try:
        await eng.swap(checkpoints.directory(run_dir) / f"v{version:06d}", version)
        sampling = SamplingParams(temperature=0, max_new_tokens=max_tokens, stop_token_ids=(2,))
        replies = []
        for ids in prompts:
            replies.append([t.token_id async for t in eng.generate(ids, sampling)])
        return replies
    finally:
        await eng.close()


def llama(server: LlamaServer, ids: list[int], max_tokens: int) -> list[int]:
    body = {"prompt": ids, "n_predict": max_tokens, "temperature": 0, "top_k": 1, "cache_prompt": False,
            "return_tokens": True}
    req = urllib.request.Request(server.base + "/completion", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.loads(r.read())["tokens"]


def agree(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def main(argv=None) -> int:
    from transformers import AutoTokenizer

    from slime_ext.models import resolve_model
    from slime_ext.trainers.export import export

    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="export-llamacpp-"))
    run_dir = Path(args.run_dir) if args.run_dir else work / "run"
    if not args.run_dir:
        made_up_version(run_dir, args.lora_scale)
    written = export(run_dir, args.version, "gguf", work / "model.gguf", gguf_type=args.gguf_type,
                     progress=lambda m: print(m, file=sys.stderr))
    tok = AutoTokenizer.from_pretrained(resolve_model("smollm2-135m"))
    prompts = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True,
                                       return_dict=False) for p in PROMPTS]
    mine = asyncio.run(ours(run_dir, written["version"], prompts, args.max_tokens))
    server = LlamaServer(args.llama_server, str(work / "model.gguf"), threads=2, parallel=1, ctx=2048).start()
    try:
        theirs = [llama(server, ids, args.max_tokens) for ids in prompts]
    finally:
        server.stop()
    rows = [{"prompt": p, "ours": tok.decode(a), "llama.cpp": tok.decode(b), "tokens": len(a),
             "agree_before_first_difference": agree(a, b), "identical": a == b[:len(a)]}
            for p, a, b in zip(PROMPTS, mine, theirs)]
    print(f"version {written['version']} of {run_dir} as a {args.gguf_type} GGUF: greedy replies, ours vs llama.cpp")
    for r in rows:
        print(f"- {r['prompt']!r}: {r['agree_before_first_difference']}/{r['tokens']} tokens agree"
              f"{' (identical)' if r['identical'] else ''}\n    ours:      {r['ours'][:90]!r}\n"
              f"    llama.cpp: {r['llama.cpp'][:90]!r}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"written": written, "gguf_type": args.gguf_type, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
