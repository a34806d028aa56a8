#!/usr/bin/env bash
# Agent RL on the swe setting with an unmodified Slime (the GPU counterpart of run_local.sh): Qwen3-8B,
# GRPO over N_SAMPLES_PER_PROMPT episodes per task. Tasks: fix a bug injected into a small repository
# (read, grep, edit, test, submit); the reward comes from its test suite.
# Slime's default rollout reads the exported task dataset; slime_ext.hooks.generate plays each sample as
# one episode (observation tokens masked out of the loss) and returns its outcome as the reward.
#
#   cd slime && bash ../swe-rl/run_qwen3_8b_swe_rl.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../swe-rl/run_qwen3_8b_swe_rl.sh    # write the datasets and config, print the commands
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, MAX_TURNS (default 12), SAMPLES,
# N_SAMPLES_PER_PROMPT, ROLLOUT_BATCH_SIZE, NUM_ROLLOUT, LR, EVAL_INTERVAL, ...): see scripts/slime_agents.sh
# and docs/slime.md ("Agent settings (Track 2)").
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_settings swe 12
agent_export_tasks
agent_build_args
agent_launch
