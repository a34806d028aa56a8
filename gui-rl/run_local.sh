#!/usr/bin/env bash
# Agent RL on the GUI setting with the embedded backend on this machine (a CPU is enough): smollm2-135m plays
# episodes on the train tasks in headless Chromium, one Binary RL step per round trains a LoRA adapter on them
# (observation tokens masked out), and the adapter is swapped into the engine. Progress on stderr;
# metrics.jsonl, the adapters and a screenshot of every step under runs/gui-<time>/. Extra arguments go to
# `openclaw-rl env train` and win over these defaults (e.g. --steps 20, --model DIR, --out DIR); the GPU
# counterpart is run_qwen3_8b_gui_rl.sh (Slime). Needs Chromium: `make browser` installs Debian's.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
exec .venv/bin/openclaw-rl env train --setting gui --model smollm2-135m --out "runs/gui-$(date +%Y%m%d-%H%M%S)" \
   --steps 8 --episodes 8 --max-turns 10 --max-new-tokens 96 "$@"
