#!/usr/bin/env bash
# On-Policy Distillation on an unmodified Slime (the GPU counterpart of run_local.sh): Qwen3-4B serves an
# OpenAI-compatible API on PORT; when the user's next message says what would have been better, the
# judge extracts it as a hint, the teacher (the request with the hint) scores the recorded answer, and
# the per-token gap teacher - rollout drives the update (our custom loss, train_async.py).
#
#   cd slime && bash ../openclaw-opd/run_qwen3_4b_openclaw_opd.sh
#   DRY_RUN=1 bash .../run_qwen3_4b_openclaw_opd.sh         # print the commands, start nothing
#
# Settings come from the environment (SLIME_DIR, HF_CKPT, NUM_GPUS, ACTOR_GPUS, ROLLOUT_GPUS, PRM_GPUS,
# PORT, API_KEY, JUDGE_URL, W_OPD, OPD_CLIP, ...): see scripts/slime_common.sh and
# instructions/slime-cluster.md.
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_common.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_common.sh"

openclaw_settings opd
openclaw_build_args

# The teacher term needs the per-token teacher log-probs (Sample.teacher_log_probs, set by the reward
# post-process hook) inside the loss: our custom loss, not Slime's --use-opd (which would add the same
# term a second time to the advantages).
openclaw_common_config
openclaw_opd_config 0 "${W_OPD:-1.0}"
openclaw_launch
