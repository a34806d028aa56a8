#!/usr/bin/env bash
# The warm start before agent RL on the terminal setting, with an unmodified Slime: supervised fine-tuning of
# Qwen3-8B on the train tasks' scripted solutions (Slime's SFT path, as in its
# examples/retool/retool_qwen3_4b_sft.sh). First `openclaw-rl env demos` plays every train task's solution
# through the sandboxed shell with the agent loop and writes the token data ($RUN_DIR/terminal-demos.jsonl:
# ids in HF_CKPT's chat template, loss mask 1 on the agent's tokens and 0 on the shell's output; held-out
# tasks are never in it); then Slime trains on it with --loss-type sft_loss and our rollout function
# slime_ext.hooks.sft.generate_rollout, which hands Slime each row's ids and mask exactly as written.
#
#   cd slime && bash ../terminal-rl/terminal_qwen3_8b_sft.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../terminal-rl/terminal_qwen3_8b_sft.sh    # write the demonstrations and config, print the commands
#   # then agent RL from the warm start:
#   REF_LOAD=<RUN_DIR>/megatron bash ../terminal-rl/terminal_qwen3_8b_rl.sh
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, NUM_EPOCH (3), ROLLOUT_BATCH_SIZE (16),
# LR (1e-5), DEMOS (a file written before), ...): see scripts/slime_agents.sh ("the warm start (SFT)").
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_sft_settings terminal 8
agent_write_demos
agent_build_sft_args
agent_sft_launch
