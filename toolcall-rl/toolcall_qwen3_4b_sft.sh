#!/usr/bin/env bash
# The warm start before agent RL on the toolcall setting (ReTool-style: math solved with a sandboxed python
# tool), with an unmodified Slime: supervised fine-tuning of Qwen3-4B on the train tasks' scripted solutions,
# the counterpart of upstream OpenClaw-RL's toolcall-rl/retool_qwen3_4b_sft.sh and Slime's
# examples/retool/retool_qwen3_4b_sft.sh. First `openclaw-rl env demos` plays every train task's solution
# through the python tool with the agent loop and writes the token data ($RUN_DIR/toolcall-demos.jsonl: ids in
# HF_CKPT's chat template with its native tool calls, loss mask 1 on the agent's tokens and 0 on the tool's
# results; held-out tasks are never in it); then Slime trains on it with --loss-type sft_loss and our rollout
# function slime_ext.hooks.sft.generate_rollout, which hands Slime each row's ids and mask exactly as written.
#
#   cd slime && bash ../toolcall-rl/toolcall_qwen3_4b_sft.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../toolcall-rl/toolcall_qwen3_4b_sft.sh      # write the demonstrations and config, print the commands
#   # then agent RL from the warm start:
#   REF_LOAD=<RUN_DIR>/megatron bash ../toolcall-rl/retool_qwen3_4b_rl.sh
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, NUM_EPOCH (3), ROLLOUT_BATCH_SIZE (16),
# LR (1e-5), DEMOS (a file written before), ...): see scripts/slime_agents.sh ("the warm start (SFT)").
set -euo pipefail

SLIME_MODEL="${SLIME_MODEL:-qwen3-4B}"
HF_CKPT="${HF_CKPT:-/root/Qwen3-4B}"

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_sft_settings toolcall 6
agent_write_demos
agent_build_sft_args
agent_sft_launch
