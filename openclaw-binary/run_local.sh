#!/usr/bin/env bash
# Serve with Binary RL on the embedded backend. Extra arguments go to `openclaw-rl serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
exec .venv/bin/openclaw-rl serve --method binary --judge heuristic --lora-rank 16 --batch-size 4 "$@"
