#!/usr/bin/env bash
# Agent RL on the swe setting with an unmodified Slime at cluster scale: Qwen3-32B on 8 nodes (per node:
# half the GPUs train, half serve rollouts), submitted to a Ray cluster you started over those nodes (the
# "remote" cluster: `ray start --head` on this node, `ray start --address <this node>:6379` on the others).
# The same setting, hooks and settings as run_qwen3_8b_swe_rl.sh; the defaults differ: SLIME_MODEL qwen3-32B,
# HF_CKPT /root/Qwen3-32B, NUM_NODES 8, ACTOR_TP 4, ROLLOUT_GPUS_PER_ENGINE 4.
#
#   cd slime && REUSE_RAY=1 bash ../swe-rl/run_swe_rl_32b_remote_8nodes.sh    # Slime at ./slime: make slime
#   DRY_RUN=1 bash ../swe-rl/run_swe_rl_32b_remote_8nodes.sh                  # print the commands
#
# Settings come from the environment: see scripts/slime_agents.sh and docs/slime.md ("Agent settings (Track 2)").
set -euo pipefail

SLIME_MODEL="${SLIME_MODEL:-qwen3-32B}"
HF_CKPT="${HF_CKPT:-/root/Qwen3-32B}"
NUM_NODES="${NUM_NODES:-8}"
ACTOR_TP="${ACTOR_TP:-4}"
ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-4}"

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_settings swe 12
agent_export_tasks
agent_build_args
agent_launch
