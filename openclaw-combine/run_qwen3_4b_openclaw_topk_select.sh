#!/usr/bin/env bash
# Upstream OpenClaw-RL's recommended recipe, topk_select, on an unmodified Slime: several candidate hints
# per turn, the one whose hinted teacher's top-K overlaps the student's most teaches, and the PPO-clipped
# top-K OPD term (advantage clip(log pi_T - log pi_old, +-1.0) x softmax(log pi_old over S_t), summed
# over S_t) is added to the GRPO loss as w_rl * L_GRPO + w_opd * L_OPD (docs/learning.md, "topk_select").
#
#   cd slime && bash ../openclaw-combine/run_qwen3_4b_openclaw_topk_select.sh
#
# What Slime can carry today: the rollout hook hands the trainer one teacher log-prob per response token
# (Sample.teacher_log_probs); Slime's batch has no field for each candidate teacher's top-K ids and
# log-probs at every position, nor for pi_old's top-K, so the custom loss cannot see them. The full recipe
# therefore runs on the embedded backend only:
#
#   openclaw-rl serve --distill topk_select --hint-m 3 --judge-votes 3 --topk 4 --topk-support student \
#      --topk-select-rule sequence_optimal --opd-clip 1.0 ...
#
# and this script runs the token-level reduction (TOPK_SELECT=token, the default, said in its output), which
# Slime can carry and the embedded backend runs too (--distill topk_select_token); any other TOPK_SELECT is
# refused before anything starts. The reduction: the support is the sampled token (K = 1, its softmax weight 1),
# the candidate is the accepted hint (with one candidate every selection rule picks it), and the advantage is
# clip(teacher - rollout, +-OPD_CLIP) with OPD_CLIP = 1.0 (upstream's launcher), PPO-clipped (0.2 / 0.28) on its
# own and added to the verdict's PPO loss: w_rl * L_GRPO + w_opd * L_OPD (learning/objective.py, the one custom
# loss). It differs from upstream's in two more ways: the ratio is taken against the recorded log-probs
# (--use-rollout-logprobs), and the teacher is the current policy scored through SGLang, not the frozen base model.
#
#   DRY_RUN=1 bash ../openclaw-combine/run_qwen3_4b_openclaw_topk_select.sh   # print the commands
#
# Other settings as in run_qwen3_4b_openclaw_combine.sh (scripts/slime_common.sh).
set -euo pipefail

# shellcheck source-path=SCRIPTDIR source=../scripts/slime_common.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/../scripts/slime_common.sh"

case "${TOPK_SELECT:-token}" in
   token) ;;
   *) openclaw_die "TOPK_SELECT=${TOPK_SELECT}: the full topk_select needs each candidate teacher's top-K at every response position, which Slime's batch cannot carry to the custom loss (one teacher log-prob per token only; docs/slime.md); run it on the embedded backend (openclaw-rl serve --distill topk_select --hint-m 3 --judge-votes 3 --topk 4 --topk-support student --opd-clip 1.0), or leave TOPK_SELECT=token (the default) for its token-level reduction on Slime (one candidate, K = 1, clip 1.0)" ;;
esac

openclaw_settings combine
openclaw_note "topk_select, token-level reduction (TOPK_SELECT=token, distill: topk_select_token; the full recipe with several candidate hints and top-K supports runs on the embedded backend: openclaw-rl serve --distill topk_select): support = the sampled token, one candidate hint (the accepted one), loss w_rl * L_PPO(verdict) + w_opd * L_PPO(clip(teacher - rollout, +-${OPD_CLIP:-1.0}))"
openclaw_build_args

openclaw_common_config
DISTILL=topk_select_token OPD_CLIP="${OPD_CLIP:-1.0}" openclaw_opd_config "${W_RL:-1.0}" "${W_OPD:-1.0}"
openclaw_launch
