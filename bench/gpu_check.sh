#!/usr/bin/env bash
# The whole loop on one CUDA GPU with the packaged SmolLM2, under 10 minutes, no network (bench/gpu_check.py:
# serve --device cuda, chat, judged feedback, two training steps and their swaps, the SGLang client when sglang
# is importable; tokens/s, time to first token, train-step and swap time, peak GPU memory). Skips with a
# message, exit 0, on a machine without a CUDA GPU.
#
#   bash bench/gpu_check.sh [--timeout-s 540]
set -euo pipefail
root="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." &>/dev/null && pwd)"
python="${OPENCLAW_PYTHON:-${root}/.venv/bin/python}"
[[ -x $python ]] || python="$(command -v python3)"
cd "${root}/bench"
exec timeout 600 "$python" gpu_check.py "$@"
