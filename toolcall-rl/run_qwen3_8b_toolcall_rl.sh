#!/usr/bin/env bash
# Agent RL on the toolcall setting with an unmodified Slime (the GPU counterpart of run_local.sh): Qwen3-8B,
# GRPO over N_SAMPLES_PER_PROMPT episodes per task. Tasks: math problems solved with a sandboxed python
# tool, called in the model's own tool-call format; the reward comes from the final answer.
# Slime's default rollout reads the exported task dataset; slime_ext.hooks.generate plays each sample as
# one episode (observation tokens masked out of the loss) and returns its outcome as the reward.
#
#   cd slime && bash ../toolcall-rl/run_qwen3_8b_toolcall_rl.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../toolcall-rl/run_qwen3_8b_toolcall_rl.sh    # write the datasets and config, print the commands
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, MAX_TURNS (default 6), SAMPLES,
# N_SAMPLES_PER_PROMPT, ROLLOUT_BATCH_SIZE, NUM_ROLLOUT, LR, EVAL_INTERVAL, ...): see scripts/slime_agents.sh
# and docs/slime.md ("Agent settings (Track 2)").
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_settings toolcall 6
agent_export_tasks
agent_build_args
agent_launch
