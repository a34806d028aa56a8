#!/usr/bin/env bash
# Agent RL on the swe setting with an unmodified Slime: Qwen3-4B on 4 nodes with training and rollout
# colocated on every GPU (Slime's --colocate: each offloads while the other runs), submitted to a Ray
# cluster you started over those nodes (REUSE_RAY=1). The same setting, hooks and settings as
# run_qwen3_8b_swe_rl.sh; the defaults differ: SLIME_MODEL qwen3-4B, HF_CKPT /root/Qwen3-4B, NUM_NODES 4,
# COLOCATE 1.
#
#   cd slime && REUSE_RAY=1 bash ../swe-rl/run_swe_rl_4b_4nodes_colocate.sh    # Slime at ./slime: make slime
#   DRY_RUN=1 bash ../swe-rl/run_swe_rl_4b_4nodes_colocate.sh                  # print the commands
#
# Settings come from the environment: see scripts/slime_agents.sh and docs/slime.md ("Agent settings (Track 2)").
set -euo pipefail

SLIME_MODEL="${SLIME_MODEL:-qwen3-4B}"
HF_CKPT="${HF_CKPT:-/root/Qwen3-4B}"
NUM_NODES="${NUM_NODES:-4}"
COLOCATE="${COLOCATE:-1}"

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_settings swe 12
agent_export_tasks
agent_build_args
agent_launch
