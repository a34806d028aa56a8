#!/usr/bin/env bash
# Agent RL on the GUI setting with a vision-language model on an unmodified Slime: Qwen3-VL-8B sees each page
# as a screenshot *and* its accessibility tree (the tree's ids are how it acts). The same setting, hooks and
# settings as run_qwen3_8b_gui_rl.sh, with VISION=1: every observation's screenshot goes to SGLang's /generate
# as image_data next to the prompt's placeholder tokens, and each sample carries the images and their
# pixel_values for Megatron (slime_ext/chat/vision.py). The embedded backend (run_local.sh) stays text-only.
#
#   cd slime && bash ../gui-rl/gui_qwen3vl_8b_rl.sh    # Slime at ./slime: make slime (or SLIME_DIR)
#   DRY_RUN=1 bash ../gui-rl/gui_qwen3vl_8b_rl.sh      # write the datasets and config, print the commands
#
# Defaults: HF_CKPT /root/Qwen3-VL-8B-Instruct; SLIME_MODEL qwen3-8B (the shape of Qwen3-VL-8B's language
# model) with MODEL_ARGS_ROTARY_BASE 5000000 (its rope theta). Slime v0.3.1 has no Megatron model of Qwen3-VL's
# vision tower, so a real run needs MODEL_PROVIDER=module.function (a provider of yours, e.g. from
# Megatron-Bridge; Slime's --custom-model-provider-path); SLIME_MODEL=qwen3.5-35B-A3B-vl with a Qwen3.5-35B-A3B
# checkpoint needs none. Every other setting: see scripts/slime_agents.sh and docs/slime.md.
set -euo pipefail

export SLIME_MODEL="${SLIME_MODEL:-qwen3-8B}"
export HF_CKPT="${HF_CKPT:-/root/Qwen3-VL-8B-Instruct}"
export MODEL_ARGS_ROTARY_BASE="${MODEL_ARGS_ROTARY_BASE:-5000000}"
export VISION=1
exec "${BASH:-bash}" "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/run_qwen3_8b_gui_rl.sh" "$@"
