#!/usr/bin/env bash
# Serve with Combine (Binary RL + OPD) on the embedded backend. Extra arguments go to `openclaw-rl serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
make --no-print-directory .venv/.installed >/dev/null
exec .venv/bin/openclaw-rl serve --method combine --judge heuristic --w-rl 1 --w-opd 1 --lora-rank 16 --batch-size 4 "$@"
