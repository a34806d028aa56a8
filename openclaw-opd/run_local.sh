#!/usr/bin/env bash
# Serve with On-Policy Distillation on the embedded backend. Extra arguments go to `openclaw-rl serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
exec .venv/bin/openclaw-rl serve --method opd --judge heuristic --teacher base --lora-rank 16 --batch-size 4 "$@"
