#!/usr/bin/env bash
# The terminal agent on this machine (a CPU is enough), one command: held-out success of smollm2-135m, then the warm
# start (openclaw-rl env sft: LoRA SFT on the train tasks' scripted solutions), then RL from it (env train --init:
# GRPO groups of episodes per task, each new adapter checked on train tasks RL never samples), with the held-out
# success after each, and one line comparing them. Progress on stderr; everything under runs/terminal-<time>/ (or
# $OUT). Extra arguments go to `openclaw-rl env train` and win over its defaults (e.g. --steps 12); the GPU
# counterpart is the Slime launchers in this folder. See scripts/agent_recipe.sh.
set -euo pipefail
EVAL_REPEAT=${EVAL_REPEAT:-4} exec "$(dirname "$0")/../scripts/agent_recipe.sh" terminal "$@"
