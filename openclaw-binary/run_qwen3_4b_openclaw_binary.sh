#!/usr/bin/env bash
# Binary RL on an unmodified Slime (the GPU counterpart of run_local.sh): Qwen3-4B serves an
# OpenAI-compatible API on PORT, each turn is judged from the user's next message, and the verdict
# (+1 / -1) is the advantage of every response token of a PPO-clipped step (train_async.py).
#
#   cd slime && bash ../openclaw-binary/run_qwen3_4b_openclaw_binary.sh
#   DRY_RUN=1 bash .../run_qwen3_4b_openclaw_binary.sh      # print the commands, start nothing
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, ACTOR_GPUS, ROLLOUT_GPUS, PRM_GPUS,
# PORT, API_KEY, JUDGE_URL, ...): see scripts/slime_common.sh and instructions/slime-cluster.md.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_common.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_common.sh"

openclaw_settings binary
openclaw_build_args

# Binary RL runs the one custom loss of every method (slime_ext.hooks.loss.openclaw_loss: the embedded
# trainer's PPO with its dual clip): the advantage of every token is the verdict (minus the running baseline
# with baseline: running), and the ratio is taken against the recorded log-probs.

openclaw_common_config
openclaw_launch
