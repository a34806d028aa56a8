"""Does telling the model that its answer already begins with the given opening help it go on? (greedy check)

    .venv/bin/python experiments/personalization/opening_told.py 'Well,|Great question!|Hey there!'

For each opening: the preference "Always start your answer with "<opening>"." in the memory block (as served),
the opening given as the answer's first tokens (as ``--memory-opening`` gives it), and the model's greedy
continuation (48 tokens, bfloat16, one thread) for the 12 held-out and 16 general questions; prints the share
that names the answer, as served now and with one more memory line saying the answer already begins with the
opening. Results in docs/learning.md ("An opening the user quoted is given").
"""

from __future__ import annotations

import statistics
import sys

import torch

from slime_ext.chat.memory import with_memory
from slime_ext.chat.prompt import PromptRenderer
from slime_ext.models import resolve_model
from slime_ext.simulate.questions import correctness_tasks, preference_tasks
from slime_ext.trainers.canary_data import holds_key

TOLD = 'Your answer already begins with "{op}": go on from there with the answer itself.'


def main() -> int:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    model_dir = resolve_model("smollm2-135m")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    renderer = PromptRenderer(tokenizer)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).eval()
    questions = [(t.prompt, t.keys) for t in preference_tasks("heldout", 12, 0)]
    questions += [(q.prompt, q.keys) for q in correctness_tasks()]
    for op in (sys.argv[1] if len(sys.argv) > 1 else "Well,|So,").split("|"):
        given = tokenizer.encode(op, add_special_tokens=False)
        for name, extra in (("as served", []), ("told", [TOLD.format(op=op)])):
            answered = []
            for prompt, keys in questions:
                hints = [f'Always start your answer with "{op}".', *extra]
                ids = renderer.render(with_memory([{"role": "user", "content": prompt}], hints), [])
                with torch.no_grad():
                    out = model.generate(torch.tensor([ids + given]), max_new_tokens=48, do_sample=False)
                answered.append(holds_key(keys, tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)))
            print(f"{op!r:20} {name:9} answered {statistics.fmean(answered):.2f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
