#!/usr/bin/env bash
# Agent RL on the GUI setting with an unmodified Slime (the GPU counterpart of run_local.sh): Qwen3-8B,
# GRPO over N_SAMPLES_PER_PROMPT episodes per task. Tasks: small web sites in headless Chromium (forms, menus,
# search and filter, multi-step flows, infeasible requests); the agent reads the page's accessibility tree and
# clicks, types, selects, presses keys and scrolls; the reward comes from the state the pages recorded.
# Slime's default rollout reads the exported task dataset; slime_ext.hooks.generate plays each sample as
# one episode (observation tokens masked out of the loss) and returns its outcome as the reward.
# Every node that runs rollouts needs Chromium (scripts/install_browser.sh installs Debian's).
#
#   cd slime && bash ../gui-rl/run_qwen3_8b_gui_rl.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../gui-rl/run_qwen3_8b_gui_rl.sh    # write the datasets and config, print the commands
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, MAX_TURNS (default 10), SAMPLES,
# N_SAMPLES_PER_PROMPT, ROLLOUT_BATCH_SIZE, NUM_ROLLOUT, LR, EVAL_INTERVAL, ...): see scripts/slime_agents.sh
# and docs/slime.md ("Agent settings (Track 2)").
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_agents.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_agents.sh"

agent_settings gui 10
if [[ "${DRY_RUN:-0}" != 1 ]] && ! command -v chromium >/dev/null 2>&1 && ! command -v google-chrome >/dev/null 2>&1; then
   openclaw_die "the gui setting needs Chromium on every rollout node: bash scripts/install_browser.sh (Debian's chromium)"
fi
agent_export_tasks
agent_build_args
agent_launch
