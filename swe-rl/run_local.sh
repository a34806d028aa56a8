#!/usr/bin/env bash
# Agent RL on the swe setting with the embedded backend on this machine (a CPU is enough): smollm2-135m
# plays episodes on the train tasks, one Binary RL step per round trains a LoRA adapter on them
# (observation tokens masked out), and the adapter is swapped into the engine. Progress on stderr;
# metrics.jsonl and the adapters under runs/swe-<time>/. Extra arguments go to `openclaw-rl env train`
# and win over these defaults (e.g. --steps 20, --model DIR, --out DIR); the GPU counterpart is
# run_qwen3_8b_swe_rl.sh (Slime).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
exec .venv/bin/openclaw-rl env train --setting swe --model smollm2-135m --out "runs/swe-$(date +%Y%m%d-%H%M%S)" \
   --steps 8 --episodes 8 --max-turns 8 --max-new-tokens 256 "$@"
