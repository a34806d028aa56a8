#!/usr/bin/env bash
# Agent RL on the terminal setting with the embedded backend on this machine (a CPU is enough): smollm2-135m
# plays episodes on the train tasks, one Binary RL step per round trains a LoRA adapter on them
# (observation tokens masked out), and the adapter is swapped into the engine. Progress on stderr;
# metrics.jsonl and the adapters under runs/terminal-<time>/. Extra arguments go to `openclaw-rl env train`
# and win over these defaults (e.g. --steps 20, --model DIR, --out DIR); the GPU counterpart is
# terminal_qwen3_8b_rl.sh (Slime).
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
exec .venv/bin/openclaw-rl env train --setting terminal --model smollm2-135m --out "runs/terminal-$(date +%Y%m%d-%H%M%S)" \
   --steps 8 --episodes 8 "$@"
