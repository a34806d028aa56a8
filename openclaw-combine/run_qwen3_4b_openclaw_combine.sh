#!/usr/bin/env bash
# Combine (Binary RL + On-Policy Distillation, the default method) on an unmodified Slime (the GPU
# counterpart of run_local.sh): Qwen3-4B serves an OpenAI-compatible API on PORT; every judged turn
# teaches its verdict (w_rl) and, when the user said what would have been better, the teacher's per-token
# gap from that hint (w_opd), in one PPO-clipped step (our custom loss, train_async.py).
#
#   cd slime && bash ../openclaw-combine/run_qwen3_4b_openclaw_combine.sh
#   DRY_RUN=1 bash .../run_qwen3_4b_openclaw_combine.sh     # print the commands, start nothing
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, ACTOR_GPUS, ROLLOUT_GPUS, PRM_GPUS,
# PORT, API_KEY, JUDGE_URL, W_RL, W_OPD, OPD_CLIP, ...): see scripts/slime_common.sh and
# instructions/slime-cluster.md.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_common.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_common.sh"

openclaw_settings combine
openclaw_build_args

# The rollout hook computes each token's advantage with the embedded trainer's pipeline (the verdict, and the
# teacher's gap under the hint, weighted by w_rl / w_opd from the plugin config); the custom loss applies it.
openclaw_common_config
openclaw_opd_config "${W_RL:-1.0}" "${W_OPD:-1.0}"
openclaw_launch
