#!/usr/bin/env bash
# Agent RL on the toolcall setting (ReTool-style: math solved with a sandboxed python tool) with an unmodified
# Slime: Qwen3-4B, GRPO over N_SAMPLES_PER_PROMPT episodes per task. The same setting, hooks and settings as
# run_qwen3_8b_toolcall_rl.sh; only the model's defaults differ (SLIME_MODEL qwen3-4B, HF_CKPT /root/Qwen3-4B).
#
#   cd slime && bash ../toolcall-rl/retool_qwen3_4b_rl.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../toolcall-rl/retool_qwen3_4b_rl.sh      # write the datasets and config, print the commands
#
# Settings come from the environment: see scripts/slime_agents.sh and docs/slime.md ("Agent settings (Track 2)").
set -euo pipefail

SLIME_MODEL="${SLIME_MODEL:-qwen3-4B}"
HF_CKPT="${HF_CKPT:-/root/Qwen3-4B}"

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_settings toolcall 6
agent_export_tasks
agent_build_args
agent_launch
