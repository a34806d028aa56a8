#!/usr/bin/env bash
# The agent recipe on this machine for one setting (what <setting>-rl/run_local.sh runs): held-out success of the
# base model, the warm start (`env sft`: LoRA SFT on the train split's scripted solutions), held-out success
# after it, RL from it (`env train --init`: GRPO groups, the check slice), held-out success after RL, and one line
# comparing the three. Usage: agent_recipe.sh SETTING [env train arguments...]; the extra arguments go to
# `env train` and win over its defaults. OUT (default runs/SETTING-<time>) is the run folder; EVAL_REPEAT (default
# 1) plays every held-out task that many times; SEED (default 0).
set -euo pipefail
setting=$1
shift
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
cli=.venv/bin/openclaw-rl
out=${OUT:-runs/$setting-$(date +%Y%m%d-%H%M%S)}
common=(--setting "$setting" --model smollm2-135m --seed "${SEED:-0}")
evaluate=("$cli" env eval "${common[@]}" --repeat "${EVAL_REPEAT:-1}")
mkdir -p "$out"
"${evaluate[@]}" --out "$out/base.json" >/dev/null
"$cli" env sft "${common[@]}" --out "$out/sft"
"${evaluate[@]}" --adapter "$out/sft/adapter" --out "$out/sft.json" >/dev/null
"$cli" env train "${common[@]}" --init "$out/sft/adapter" --out "$out/rl" "$@"
"${evaluate[@]}" --adapter "$out/rl/adapter" --out "$out/rl.json" >/dev/null
success() { sed -n 's/^ *"success_rate": \([0-9.]*\),*$/\1/p' "$1"; }
echo "$setting held-out success: base $(success "$out/base.json"), warm start $(success "$out/sft.json"), warm start + RL" \
     "$(success "$out/rl.json") (summaries, adapters and plots in $out)"
