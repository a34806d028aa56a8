#!/usr/bin/env bash
# An alias of toolcall_qwen3_4b_sft.sh under upstream OpenClaw-RL's name (toolcall-rl/retool_qwen3_4b_sft.sh):
# the same script, the same settings from the environment.
set -euo pipefail
exec "${BASH:-bash}" "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/toolcall_qwen3_4b_sft.sh" "$@"
