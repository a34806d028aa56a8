#!/usr/bin/env bash
# Shared part of openclaw-{binary,opd,combine}/run_qwen3_4b_openclaw_<method>.sh: train Qwen3-4B online
# from live conversations with an unmodified Slime (THUDM/slime v0.3.1), following the conventions of
# Slime's scripts/run-qwen3-4B.sh (MODEL_ARGS from scripts/models/qwen3-4B.sh; CKPT_ARGS, ROLLOUT_ARGS,
# PERF_ARGS, GRPO_ARGS, OPTIMIZER_ARGS, SGLANG_ARGS, MISC_ARGS; `ray start` + `ray job submit`), with
# train_async.py (rollout of step N+1 overlaps training of step N) instead of train.py.
#
# Sourced by the method scripts (and by scripts/slime_agents.sh, which reuses the helpers and the
# "shared with" section below), never run by itself. A method script sources this file and calls, in order:
#   openclaw_settings METHOD     settings from the environment, checks, GPU split, run directory
#   openclaw_build_args          the Slime argument arrays (MODEL_ARGS from Slime's file, CKPT_ARGS, ...;
#                                the one custom loss, slime_ext.hooks.loss.openclaw_loss, for every method)
#   openclaw_common_config       the plugin settings every method has (openclaw_yaml_num / _str / _secret)
#   openclaw_opd_config W_RL W_OPD   (OPD and Combine) their weights, clip and teacher
#   openclaw_launch              writes the plugin config, then starts (or, with DRY_RUN=1, prints) everything
#
# Settings (environment variables, all optional; see instructions/slime-cluster.md):
#   SLIME_DIR        Slime checkout (default: the current directory, so `cd slime && bash .../run_...sh`)
#   MEGATRON_DIR     Megatron-LM checkout put on PYTHONPATH (default: $SLIME_DIR/../Megatron-LM if it
#                    exists, else /root/Megatron-LM as in the slimerl/slime image and Slime's scripts)
#   HF_CKPT          Hugging Face checkpoint (default /root/Qwen3-4B, as in Slime's run-qwen3-4B.sh)
#   REF_LOAD         its Megatron torch_dist conversion (default ${HF_CKPT}_torch_dist)
#   NUM_GPUS         GPUs on this node (default: nvidia-smi's count, else 8)
#   ACTOR_GPUS, ROLLOUT_GPUS, PRM_GPUS   training / SGLang rollout / judge GPUs (8 GPUs: 4 / 2 / 2;
#                    4 / 4 / 0 with JUDGE_URL or JUDGE=heuristic)
#   COLOCATE=1       training and serving share the GPUs in turn (Slime's --colocate, with train.py): the way
#                    to run on ONE GPU (NUM_GPUS=1). SGLang is offloaded while a step trains, so requests wait
#                    for the step (up to the client's pause_wait_s); the optimizer state goes to the CPU on one
#                    GPU; the judge is JUDGE_URL or the heuristic (no GPU is left for a judge model)
#   PORT, HOST       where the OpenAI-compatible server listens (default 30000 on 0.0.0.0)
#   API_KEY          the key clients must send (written to the plugin config, mode 600; never printed)
#   JUDGE_URL        an external OpenAI-compatible judge (then JUDGE_MODEL, optional JUDGE_KEY); without it
#                    and with PRM_GPUS > 0 a judge SGLang server (JUDGE_MODEL_PATH, default HF_CKPT) is
#                    started on the PRM GPUs; with neither, the heuristic judge
#   RUN_DIR          run directory: plugin config, records, Megatron checkpoints (default runs/slime-<time>
#                    in this repository)
#   DRY_RUN=1        print every command (and the plugin config, secrets hidden) without running anything
# More knobs: ROLLOUT_BATCH_SIZE, LR, KL_COEF (the plugin's kl_coef and Slime's --use-kl-loss, which loads the
# reference model), TIS_CAP (the plugin's tis_cap and --get-mismatch-metrics, which makes Slime recompute the
# old log-probs), CONTEXT_LENGTH, MAX_RESPONSE_LEN, ACTOR_TP, ROLLOUT_GPUS_PER_ENGINE, SAVE_DIR, SAVE_INTERVAL,
# NUM_ROLLOUT, MODEL_ARGS_ROTARY_BASE, SERVED_MODEL_NAME, JUDGE_PORT, JUDGE_TP, JUDGE_START_TIMEOUT, MASTER_ADDR,
# RAY_DASHBOARD_PORT, REUSE_RAY, KEEP_RAY, W_RL, W_OPD, OPD_CLIP, DISTILL (token or topk_select_token),
# SAMPLING_DEFAULTS and ROLLOUT_TEMPERATURE (below).
#
# The learning is the embedded backend's, written once (slime_ext/learning/): the rollout hook runs its pipeline
# and the one custom loss its objective; a setting Slime cannot run the same way is refused by name when the
# rollout starts (slime_ext/hooks/config.py). One thing Slime runs without: the canary. Its train.py pushes
# every step's weights to SGLang (actor_model.update_weights()) and no hook can hold a version back (docs/slime.md:
# the only one between writing and reading weights is for disk syncs, and can only publish or fail); the plugin
# config says canary: false, and the script says so when it starts.
#
# Temperature: Slime's trainer scores every sample at one --rollout-temperature (ROLLOUT_TEMPERATURE,
# default 1.0), so the turns must be sampled at it. Requests that name no temperature get
# SAMPLING_DEFAULTS: `openai` (the default here: 1.0) or `model` (HF_CKPT's generation_config.json, e.g.
# Qwen3's 0.6; then set ROLLOUT_TEMPERATURE to that value). The plugin refuses to start when the two differ,
# and drops a turn whose request named another temperature. OPD and Combine need 1.0: the teacher is
# scored through SGLang at temperature 1 (see slime_ext/hooks/rollout.py).
#
# Processes: on exit (normal, error, INT or TERM) this script stops only what it started: the judge SGLang
# server by its recorded PID (it runs in its own process group, so its workers go with it), the Ray job by
# its submission id (`ray job stop`), the `ray job submit` client by its PID, and the Ray head if this
# script started it (`ray stop`; KEEP_RAY=1 leaves it running). It kills nothing by a name pattern. `ray stop`
# acts on the Ray processes of this node, so the script refuses to start when a Ray cluster is already
# running here: then the only Ray processes are the ones it started (REUSE_RAY=1 submits to the running
# cluster instead and never stops it). With DRY_RUN=1 it starts nothing; it only writes the plugin config.

# ----------------------------------------------------------------------------------------------- helpers

openclaw_die() {
   printf 'error: %s\n' "$*" >&2
   exit 1
}

# A yes / no setting: sets the variable named $1 to 1 or 0 from the environment variable named $2 (1, true,
# yes, on / 0, false, no, off or unset), or dies naming it; $3 says what 1 means.
openclaw_flag() {
   local value="${!2:-0}"
   case "$value" in
      1 | true | yes | on) printf -v "$1" 1 ;;
      0 | false | no | off | "") printf -v "$1" 0 ;;
      *) openclaw_die "$2=${value}: expected 1 ($3) or 0" ;;
   esac
}

openclaw_note() {
   printf '# %s\n' "$*"
}

openclaw_is_dry_run() {
   case "${DRY_RUN:-0}" in
      1 | true | yes | on) return 0 ;;
      *) return 1 ;;
   esac
}

openclaw_is_uint() {
   [[ $1 =~ ^[0-9]+$ ]]
}

openclaw_is_number() {
   [[ $1 =~ ^[0-9]+([.][0-9]*)?([eE][-+]?[0-9]+)?$ ]]
}

# Quote one word for a shell: bare when it is plainly safe, else in single quotes.
openclaw_quote() {
   local q="'\\''"
   if [[ $1 =~ ^[A-Za-z0-9_./:=,@%+-]+$ ]]; then
      printf '%s' "$1"
   else
      printf "'%s'" "${1//\'/$q}"
   fi
}

# Print a command so that it can be pasted back into a shell: one flag per line, Slime-script style.
openclaw_show() {
   local out="" word first=1
   for word in "$@"; do
      if ((first)); then
         first=0
      elif [[ $word == --* ]]; then
         out+=$' \\\n   '
      else
         out+=" "
      fi
      out+="$(openclaw_quote "$word")"
   done
   printf '%s\n' "$out"
}

# ------------------------------------------------------- shared with scripts/slime_agents.sh (agent settings)

# SLIME_DIR (default: the current directory) must be a Slime checkout with TRAIN_PY and
# scripts/models/MODEL_FILE; MEGATRON_DIR defaults to $SLIME_DIR/../Megatron-LM, else /root/Megatron-LM.
openclaw_find_slime() {
   local train_py=$1 model_file=$2
   SLIME_DIR="$(cd -- "${SLIME_DIR:-$PWD}" &>/dev/null && pwd)" || openclaw_die "SLIME_DIR does not exist"
   [[ -f "${SLIME_DIR}/${train_py}" && -f "${SLIME_DIR}/scripts/models/${model_file}" ]] ||
      openclaw_die "${SLIME_DIR} is not a Slime checkout (no ${train_py} or scripts/models/${model_file}); run from the checkout (cd slime && bash $0) or set SLIME_DIR"
   if [[ -z ${MEGATRON_DIR:-} ]]; then
      if [[ -d "${SLIME_DIR}/../Megatron-LM" ]]; then
         MEGATRON_DIR="$(cd -- "${SLIME_DIR}/../Megatron-LM" && pwd)"
      else
         MEGATRON_DIR=/root/Megatron-LM # the slimerl/slime image's layout, as in Slime's own scripts
      fi
   fi
}

# NUM_GPUS (default: CUDA_VISIBLE_DEVICES's count, else nvidia-smi's, else 8) and OPENCLAW_GPU_IDS, the ids
# of this node's GPUs in order (CUDA_VISIBLE_DEVICES's, else 0 .. NUM_GPUS-1).
openclaw_detect_gpus() {
   local detected=0 i
   if [[ -n ${CUDA_VISIBLE_DEVICES:-} ]]; then
      IFS=, read -r -a OPENCLAW_GPU_IDS <<<"${CUDA_VISIBLE_DEVICES}"
      detected=${#OPENCLAW_GPU_IDS[@]}
   elif command -v nvidia-smi >/dev/null 2>&1; then
      detected=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
   fi
   if [[ -z ${NUM_GPUS:-} ]]; then
      NUM_GPUS=$detected
      ((NUM_GPUS > 0)) || NUM_GPUS=8
   fi
   openclaw_is_uint "$NUM_GPUS" || openclaw_die "NUM_GPUS=${NUM_GPUS}: expected a number"
   if [[ -z ${CUDA_VISIBLE_DEVICES:-} ]]; then
      OPENCLAW_GPU_IDS=()
      for ((i = 0; i < NUM_GPUS; i++)); do OPENCLAW_GPU_IDS+=("$i"); done
   fi
   ((NUM_GPUS <= ${#OPENCLAW_GPU_IDS[@]})) ||
      openclaw_die "NUM_GPUS=${NUM_GPUS} but CUDA_VISIBLE_DEVICES lists ${#OPENCLAW_GPU_IDS[@]} GPUs"
}

# ACTOR_TP (default 2 when ACTOR_GPUS is even) and ROLLOUT_GPUS_PER_ENGINE (default 1), checked.
openclaw_parallel_sizes() {
   ACTOR_TP="${ACTOR_TP:-$((ACTOR_GPUS % 2 == 0 ? 2 : 1))}"
   ROLLOUT_GPUS_PER_ENGINE="${ROLLOUT_GPUS_PER_ENGINE:-1}"
   if ! openclaw_is_uint "$ACTOR_TP" || ((ACTOR_TP == 0 || ACTOR_GPUS % ACTOR_TP != 0)); then
      openclaw_die "ACTOR_TP=${ACTOR_TP} must divide ACTOR_GPUS=${ACTOR_GPUS}"
   fi
   if ! openclaw_is_uint "$ROLLOUT_GPUS_PER_ENGINE" || ((ROLLOUT_GPUS_PER_ENGINE == 0 || ROLLOUT_GPUS % ROLLOUT_GPUS_PER_ENGINE != 0)); then
      openclaw_die "ROLLOUT_GPUS_PER_ENGINE=${ROLLOUT_GPUS_PER_ENGINE} must divide ROLLOUT_GPUS=${ROLLOUT_GPUS}"
   fi
}

# The paths that go on PYTHONPATH must not break it; outside a dry run, what the job needs must exist.
openclaw_preflight() {
   local path
   for path in "$OPENCLAW_REPO_ROOT" "$SLIME_DIR" "$MEGATRON_DIR" "$RUN_DIR"; do
      [[ $path != *[\"\\:]* ]] || openclaw_die "${path}: a path with a quote, backslash or colon cannot go on PYTHONPATH"
   done
   [[ ${PYTHONPATH:-} != *[\"\\]* ]] || openclaw_die "PYTHONPATH=${PYTHONPATH}: a quote or backslash cannot go into the Ray job's environment"
   if ! openclaw_is_dry_run; then
      [[ -e $HF_CKPT ]] || openclaw_die "HF_CKPT=${HF_CKPT} does not exist (see instructions/slime-cluster.md)"
      [[ -e $REF_LOAD ]] || openclaw_die "REF_LOAD=${REF_LOAD} does not exist: convert the model with Slime's tools/convert_hf_to_torch_dist.py (instructions/slime-cluster.md)"
      [[ -d $MEGATRON_DIR ]] || openclaw_die "MEGATRON_DIR=${MEGATRON_DIR} does not exist"
      command -v ray >/dev/null 2>&1 || openclaw_die "ray is not on PATH (run inside the slimerl/slime image)"
   fi
}

# Is this number zero (0, 0.0, 0e5, ...)?
openclaw_is_zero() {
   [[ $1 =~ ^0*[.]?0*([eE][-+]?[0-9]+)?$ ]]
}

# GRPO_ARGS += what the plugin's kl_coef and tis_cap need Slime to compute, only when asked for: the reference
# model's log-probs (--use-kl-loss loads a second copy of the model) and the old log-probs (--get-mismatch-metrics
# recomputes them with the current weights before the step); the custom loss takes the weights from the plugin.
openclaw_kl_args() {
   if ! openclaw_is_zero "$KL_COEF"; then
      GRPO_ARGS+=(--use-kl-loss --kl-loss-coef "${KL_COEF}" --kl-loss-type low_var_kl)
   fi
   if ! openclaw_is_zero "$TIS_CAP"; then
      GRPO_ARGS+=(--get-mismatch-metrics)
   fi
}

# PERF_ARGS, OPTIMIZER_ARGS, WANDB_ARGS, SGLANG_ARGS and MISC_ARGS, as in Slime's run scripts.
openclaw_slime_common_args() {
   PERF_ARGS=(
      --tensor-model-parallel-size "${ACTOR_TP}"
      --sequence-parallel
      --pipeline-model-parallel-size 1
      --context-parallel-size 1
      --expert-model-parallel-size 1
      --expert-tensor-parallel-size 1

      --recompute-granularity full
      --recompute-method uniform
      --recompute-num-layers 1

      --use-dynamic-batch-size
      --max-tokens-per-gpu "${MAX_TOKENS_PER_GPU}"
   )

   OPTIMIZER_ARGS=(
      --optimizer adam
      --lr "${LR}"
      --lr-decay-style constant
      --weight-decay 0.1
      --adam-beta1 0.9
      --adam-beta2 0.98
   )

   WANDB_ARGS=(
      # --use-wandb  (note: W&B logs Slime's args, which include the plugin config with the API key)
   )

   SGLANG_ARGS=(
      --rollout-num-gpus-per-engine "${ROLLOUT_GPUS_PER_ENGINE}"
      --sglang-mem-fraction-static "${SGLANG_MEM_FRACTION:-0.8}"
      --sglang-context-length "${CONTEXT_LENGTH}"
   )

   MISC_ARGS=(
      # default dropout in megatron is 0.1
      --attention-dropout 0.0
      --hidden-dropout 0.0
      # should be good for model performance
      --accumulate-allreduce-grads-in-fp32
      --attention-softmax-in-fp32
      --attention-backend flash
   )
}

# The Ray job's runtime environment: Megatron, Slime and this repository on PYTHONPATH of every worker.
# Sets OPENCLAW_HAS_NVLINK (0 / 1) and OPENCLAW_RUNTIME_ENV_JSON.
openclaw_runtime_env() {
   local nvlink_count=0
   OPENCLAW_HAS_NVLINK=0
   if command -v nvidia-smi >/dev/null 2>&1; then
      nvlink_count=$(nvidia-smi topo -m 2>/dev/null | grep -o 'NV[0-9][0-9]*' | wc -l || true)
   fi
   if ((nvlink_count > 0)); then OPENCLAW_HAS_NVLINK=1; fi
   # the caller's PYTHONPATH last: folders of their own hooks, judges and settings (docs/extending.md)
   OPENCLAW_RUNTIME_ENV_JSON="{\"env_vars\": {\"PYTHONPATH\": \"${MEGATRON_DIR}:${SLIME_DIR}:${OPENCLAW_REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}\", \"CUDA_DEVICE_MAX_CONNECTIONS\": \"1\", \"NCCL_NVLS_ENABLE\": \"${OPENCLAW_HAS_NVLINK}\"}}"
}

# ------------------------------------------------------------------------------------------------ settings

# The separate-GPU split (train_async.py): ACTOR_GPUS train, ROLLOUT_GPUS serve, PRM_GPUS judge ($1: 1 when
# the judge is a model of ours, which then gets the GPUs left over).
openclaw_split_gpus() {
   local own_judge="$1"
   ACTOR_GPUS="${ACTOR_GPUS:-$((NUM_GPUS / 2))}"
   openclaw_is_uint "$ACTOR_GPUS" || openclaw_die "ACTOR_GPUS=${ACTOR_GPUS}: expected a number"
   if ((own_judge)); then
      ROLLOUT_GPUS="${ROLLOUT_GPUS:-$((NUM_GPUS >= 4 ? NUM_GPUS / 4 : 1))}"
   else
      ROLLOUT_GPUS="${ROLLOUT_GPUS:-$((NUM_GPUS - ACTOR_GPUS))}"
   fi
   openclaw_is_uint "$ROLLOUT_GPUS" || openclaw_die "ROLLOUT_GPUS=${ROLLOUT_GPUS}: expected a number"
   local rest=$((NUM_GPUS - ACTOR_GPUS - ROLLOUT_GPUS))
   ((rest >= 0 && own_judge)) || rest=0
   PRM_GPUS="${PRM_GPUS:-$rest}"
   openclaw_is_uint "$PRM_GPUS" || openclaw_die "PRM_GPUS=${PRM_GPUS}: expected a number"
   ((ACTOR_GPUS >= 1 && ROLLOUT_GPUS >= 1)) ||
      openclaw_die "train_async.py needs separate training and rollout GPUs: ACTOR_GPUS=${ACTOR_GPUS}, ROLLOUT_GPUS=${ROLLOUT_GPUS} (NUM_GPUS=${NUM_GPUS}); on one GPU use COLOCATE=1 (train.py: training and serving take turns on it)"
   if [[ -n $JUDGE_URL ]] && ((PRM_GPUS > 0)); then
      openclaw_die "JUDGE_URL is set and PRM_GPUS=${PRM_GPUS}: use an external judge (JUDGE_URL) or a judge on PRM_GPUS, not both"
   fi
   if [[ $JUDGE == heuristic || $JUDGE == off ]] && ((PRM_GPUS > 0)); then
      openclaw_die "JUDGE=${JUDGE} with PRM_GPUS=${PRM_GPUS}: a ${JUDGE} judge needs no GPUs"
   fi
   ((ACTOR_GPUS + ROLLOUT_GPUS + PRM_GPUS <= NUM_GPUS)) ||
      openclaw_die "ACTOR_GPUS + ROLLOUT_GPUS + PRM_GPUS must be <= NUM_GPUS (${ACTOR_GPUS} + ${ROLLOUT_GPUS} + ${PRM_GPUS} > ${NUM_GPUS})"
   OPENCLAW_TRAIN_PY=train_async.py
}

# On one GPU (colocated, ACTOR_GPUS=1) the Adam state lives on the CPU (Megatron's optimizer offload): full-parameter
# Qwen3-4B then needs its bf16 weights and fp32 gradients on the GPU (~8 + 16 GB) plus activations, while SGLang is
# offloaded; a model of 8B or more does not fit one 80 GB GPU this way (Slime v0.3.1 has no LoRA).
openclaw_one_gpu_args() {
   ((ACTOR_GPUS == 1)) || return 0
   OPTIMIZER_ARGS+=(--optimizer-cpu-offload --overlap-cpu-optimizer-d2h-h2d --use-precision-aware-optimizer)
   openclaw_note "one GPU: the optimizer state is on the CPU (--optimizer-cpu-offload); fits Qwen3-4B full-parameter training on an 80 GB GPU by estimate, not 8B or larger"
}

# COLOCATE=1 (train.py): every GPU trains, and serves while no step trains (Slime's --colocate offloads one for
# the other). No GPU is left for a judge model: JUDGE_URL or the heuristic.
openclaw_colocated_split() {
   ACTOR_GPUS="${ACTOR_GPUS:-$NUM_GPUS}"
   if ! openclaw_is_uint "$ACTOR_GPUS" || ((ACTOR_GPUS < 1 || ACTOR_GPUS > NUM_GPUS)); then
      openclaw_die "ACTOR_GPUS=${ACTOR_GPUS}: expected 1 .. NUM_GPUS (${NUM_GPUS}) with COLOCATE=1"
   fi
   ((${ROLLOUT_GPUS:-0} == 0 && ${PRM_GPUS:-0} == 0)) ||
      openclaw_die "COLOCATE=1: training and serving share ACTOR_GPUS, so ROLLOUT_GPUS and PRM_GPUS must be unset or 0 (a judge model needs its own GPUs: use JUDGE_URL, or the heuristic judge)"
   ROLLOUT_GPUS=0
   PRM_GPUS=0
   OPENCLAW_TRAIN_PY=train.py
}

openclaw_settings() {
   OPENCLAW_METHOD="${1:-}"
   case "$OPENCLAW_METHOD" in
      binary | opd | combine) ;;
      *) openclaw_die "openclaw_settings: the method must be binary, opd or combine, got '${OPENCLAW_METHOD}'" ;;
   esac
   OPENCLAW_REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." &>/dev/null && pwd)"
   export PYTHONUNBUFFERED=1 # keeps Ray from buffering stdout/stderr (as Slime's scripts do)

   openclaw_find_slime train_async.py qwen3-4B.sh

   HF_CKPT="${HF_CKPT:-/root/Qwen3-4B}"
   REF_LOAD="${REF_LOAD:-${HF_CKPT%/}_torch_dist}"
   SERVED_MODEL_NAME="${SERVED_MODEL_NAME:-qwen3-4b}"

   # GPUs: Ray gets the first ACTOR_GPUS + ROLLOUT_GPUS of this node's GPUs, the judge the next PRM_GPUS.
   openclaw_detect_gpus

   JUDGE="${JUDGE:-}"
   JUDGE_URL="${JUDGE_URL:-}"
   case "$JUDGE" in
      "" | openai | heuristic | off) ;;
      *) openclaw_die "JUDGE=${JUDGE}: expected openai, heuristic or off (self needs LoRA, which Slime has not)" ;;
   esac
   # Defaults: half the GPUs train; a quarter (at least one) serves rollouts; the rest judge, unless the
   # judge is external or not a model, then they serve rollouts too (8 GPUs: 4 / 2 / 2, or 4 / 4 / 0).
   local own_judge=1
   if [[ -n $JUDGE_URL || $JUDGE == heuristic || $JUDGE == off ]]; then own_judge=0; fi
   openclaw_flag OPENCLAW_COLOCATE COLOCATE "training and serving share the GPUs in turn"
   if ((OPENCLAW_COLOCATE)); then
      openclaw_colocated_split
   else
      openclaw_split_gpus "$own_judge"
   fi
   local n_ray=$((ACTOR_GPUS + ROLLOUT_GPUS))
   RAY_GPU_LIST="$(IFS=,; echo "${OPENCLAW_GPU_IDS[*]:0:n_ray}")"
   JUDGE_GPU_LIST=""
   if ((PRM_GPUS > 0)); then JUDGE_GPU_LIST="$(IFS=,; echo "${OPENCLAW_GPU_IDS[*]:n_ray:PRM_GPUS}")"; fi

   openclaw_parallel_sizes

   # The judge: an external endpoint, a judge SGLang server on PRM_GPUS, or the lexical heuristic.
   JUDGE_KEY="${JUDGE_KEY:-}"
   MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
   JUDGE_PORT="${JUDGE_PORT:-31000}"
   JUDGE_MODEL_PATH="${JUDGE_MODEL_PATH:-$HF_CKPT}"
   JUDGE_TP="${JUDGE_TP:-1}"
   JUDGE_START_TIMEOUT="${JUDGE_START_TIMEOUT:-1200}"
   OPENCLAW_START_JUDGE=0
   if [[ -n $JUDGE_URL ]]; then
      JUDGE=openai
      JUDGE_MODEL="${JUDGE_MODEL:-}"
      [[ -n $JUDGE_MODEL ]] || openclaw_die "JUDGE_URL is set: set JUDGE_MODEL too (the model name that endpoint serves)"
   elif ((PRM_GPUS > 0)); then
      JUDGE=openai
      OPENCLAW_START_JUDGE=1
      JUDGE_MODEL="${JUDGE_MODEL:-judge}"
      JUDGE_URL="http://${MASTER_ADDR}:${JUDGE_PORT}/v1"
      if ! openclaw_is_uint "$JUDGE_TP" || ((JUDGE_TP == 0 || PRM_GPUS % JUDGE_TP != 0)); then
         openclaw_die "JUDGE_TP=${JUDGE_TP} must divide PRM_GPUS=${PRM_GPUS}"
      fi
   else
      JUDGE="${JUDGE:-heuristic}"
      [[ $JUDGE != openai ]] || openclaw_die "JUDGE=openai needs JUDGE_URL or PRM_GPUS > 0"
      JUDGE_MODEL=""
   fi

   PORT="${PORT:-30000}"
   HOST="${HOST:-0.0.0.0}"
   API_KEY="${API_KEY:-}"
   ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}"
   CONTEXT_LENGTH="${CONTEXT_LENGTH:-32768}"
   MAX_RESPONSE_LEN="${MAX_RESPONSE_LEN:-8192}"
   MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-$CONTEXT_LENGTH}"
   NUM_ROLLOUT="${NUM_ROLLOUT:-100000000}" # live serving has no epochs: effectively unbounded
   SAVE_INTERVAL="${SAVE_INTERVAL:-20}"
   LR="${LR:-1e-6}"
   KL_COEF="${KL_COEF:-0}"
   TIS_CAP="${TIS_CAP:-0}"
   SAMPLING_DEFAULTS="${SAMPLING_DEFAULTS:-openai}"
   ROLLOUT_TEMPERATURE="${ROLLOUT_TEMPERATURE:-1.0}"
   RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
   local name
   for name in PORT JUDGE_PORT ROLLOUT_BATCH_SIZE CONTEXT_LENGTH MAX_RESPONSE_LEN MAX_TOKENS_PER_GPU \
      NUM_ROLLOUT SAVE_INTERVAL JUDGE_START_TIMEOUT RAY_DASHBOARD_PORT; do
      openclaw_is_uint "${!name}" || openclaw_die "${name}=${!name}: expected a whole number"
   done
   [[ $SAMPLING_DEFAULTS == openai || $SAMPLING_DEFAULTS == model ]] ||
      openclaw_die "SAMPLING_DEFAULTS=${SAMPLING_DEFAULTS}: expected openai or model"
   for name in LR KL_COEF TIS_CAP ROLLOUT_TEMPERATURE; do
      openclaw_is_number "${!name}" || openclaw_die "${name}=${!name}: expected a number"
   done
   ((ROLLOUT_BATCH_SIZE >= 1)) || openclaw_die "ROLLOUT_BATCH_SIZE must be at least 1"
   [[ $API_KEY != *$'\n'* && $JUDGE_KEY != *$'\n'* ]] || openclaw_die "API_KEY / JUDGE_KEY must be one line"

   # The run directory: absolute, since the Ray job runs elsewhere than this shell.
   local run_dir="${RUN_DIR:-${OPENCLAW_REPO_ROOT}/runs/slime-$(date +%Y%m%d-%H%M%S)}"
   [[ $run_dir == /* ]] || run_dir="${PWD}/${run_dir}"
   RUN_DIR="${run_dir%/}"
   SAVE_DIR="${SAVE_DIR:-${RUN_DIR}/megatron}"
   OPENCLAW_CONFIG="${RUN_DIR}/openclaw_rl.yaml"
   SUBMISSION_ID="openclaw-rl-${OPENCLAW_METHOD}-$(date +%Y%m%d-%H%M%S)-$$"
   openclaw_preflight
   OPENCLAW_YAML=()
   OPENCLAW_YAML_SHOWN=()
}

# ---------------------------------------------------------------------------------------- Slime arguments

openclaw_build_args() {
   # Model architecture, from Slime's own file (MODEL_ARGS_ROTARY_BASE=5000000 for the 2507 checkpoints).
   # shellcheck source=/dev/null
   source "${SLIME_DIR}/scripts/models/qwen3-4B.sh"
   declare -p MODEL_ARGS >/dev/null 2>&1 || openclaw_die "${SLIME_DIR}/scripts/models/qwen3-4B.sh did not set MODEL_ARGS"

   CKPT_ARGS=(
      --hf-checkpoint "${HF_CKPT}"
      --ref-load "${REF_LOAD}"
      # --load = --save: a restart with the same RUN_DIR resumes from the latest checkpoint.
      --load "${SAVE_DIR}"
      --save "${SAVE_DIR}"
      --save-interval "${SAVE_INTERVAL}"
   )

   ROLLOUT_ARGS=(
      # Live conversations instead of a prompt dataset: the rollout function serves the OpenAI-compatible
      # API in the RolloutManager and returns ROLLOUT_BATCH_SIZE judged turns per step.
      --rollout-function-path "${ROLLOUT_FUNCTION:-slime_ext.hooks.rollout.live_rollout}"
      --custom-reward-post-process-path "${REWARD_POST_PROCESS:-slime_ext.hooks.reward.post_process_rewards}"
      # The plugin's own settings (the YAML under one key, openclaw_rl: see openclaw_write_config).
      --custom-config-path "${OPENCLAW_CONFIG}"
      --disable-rollout-global-dataset
      --num-rollout "${NUM_ROLLOUT}"
      --rollout-batch-size "${ROLLOUT_BATCH_SIZE}"
      --n-samples-per-prompt 1
      --rollout-max-response-len "${MAX_RESPONSE_LEN}"
      --rollout-max-context-len "${CONTEXT_LENGTH}"
      # The temperature Slime scores every sample at: the one requests are served at (SAMPLING_DEFAULTS).
      --rollout-temperature "${ROLLOUT_TEMPERATURE}"
      # One optimizer step per rollout step; weights go to SGLang after every step.
      --global-batch-size "${ROLLOUT_BATCH_SIZE}"
      --update-weights-interval 1
      --balance-data
   )

   # Advantage = the verdict, unnormalized, on every response token:
   # - grpo's returns are the sample's reward broadcast over its tokens (minus kl_coef * KL, 0 here:
   #   slime/backends/megatron_utils/loss.py compute_advantages_and_returns -> ppo_utils.get_grpo_returns);
   # - --disable-rewards-normalization turns off the group mean/std normalization of
   #   RolloutManager._post_process_rewards (slime/ray/rollout.py), which with one sample per prompt would
   #   zero every reward; our --custom-reward-post-process-path replaces that function anyway, and this
   #   flag keeps the built-in path unnormalized too;
   # - no --normalize-advantages (reinforce_plus_plus is not used: Slime's validation requires
   #   --normalize-advantages with it, slime/utils/arguments.py, which would whiten the verdicts).
   # --use-rollout-logprobs: the PPO ratio is taken against the log-probs recorded when the turn was
   # sampled, so a turn sampled by an older version (async training, staleness) is corrected.
   # The loss is ours for every method (the embedded trainer's objective: learning/objective.py); it reads each
   # token's advantage from what the rollout hook computed, and Slime's advantages only for the verdict term of
   # DISTILL=topk_select_token. --eps-clip / --eps-clip-high are the values it clips at (the plugin refuses others).
   GRPO_ARGS=(
      --advantage-estimator grpo
      --disable-rewards-normalization
      --use-rollout-logprobs
      --entropy-coef 0.00
      --eps-clip 0.2
      --eps-clip-high 0.28
      --loss-type custom_loss
      --custom-loss-function-path "${LOSS_FUNCTION:-slime_ext.hooks.loss.openclaw_loss}"
   )
   openclaw_kl_args
   openclaw_slime_common_args
}

# ------------------------------------------------------------------------------------ plugin configuration

# Append one setting to the plugin config: a number, or a string (single-quoted YAML). Secrets are shown
# as a placeholder in what is printed; the file itself has them.
openclaw_yaml_num() {
   openclaw_is_number "$2" || openclaw_die "$1=$2: expected a number"
   OPENCLAW_YAML+=("  $1: $2")
   OPENCLAW_YAML_SHOWN+=("  $1: $2")
}

openclaw_yaml_str() {
   local q="''"
   OPENCLAW_YAML+=("  $1: '${2//\'/$q}'")
   OPENCLAW_YAML_SHOWN+=("  $1: '${2//\'/$q}'")
}

openclaw_yaml_secret() {
   local q="''"
   OPENCLAW_YAML+=("  $1: '${2//\'/$q}'")
   OPENCLAW_YAML_SHOWN+=("  $1: '<hidden>'")
}

# The common settings; the method script adds its own before openclaw_launch.
openclaw_common_config() {
   openclaw_yaml_str method "${OPENCLAW_METHOD}"
   openclaw_yaml_str model "${HF_CKPT}"
   openclaw_yaml_str served_model_name "${SERVED_MODEL_NAME}"
   openclaw_yaml_str host "${HOST}"
   openclaw_yaml_num port "${PORT}"
   if [[ -n $API_KEY ]]; then openclaw_yaml_secret api_key "${API_KEY}"; fi
   openclaw_yaml_str run_dir "${RUN_DIR}"
   openclaw_yaml_str judge "${JUDGE}"
   if [[ $JUDGE == openai ]]; then
      openclaw_yaml_str judge_url "${JUDGE_URL}"
      openclaw_yaml_str judge_model "${JUDGE_MODEL}"
      if [[ -n $JUDGE_KEY ]]; then openclaw_yaml_secret judge_key "${JUDGE_KEY}"; fi
   fi
   openclaw_yaml_num max_tokens_cap "${MAX_RESPONSE_LEN}"
   openclaw_yaml_str sampling_defaults "${SAMPLING_DEFAULTS}"
   openclaw_yaml_num kl_coef "${KL_COEF}"
   openclaw_yaml_num tis_cap "${TIS_CAP}"
   # No gate on Slime (see the top of this file): said here, so the plugin does not refuse the default.
   OPENCLAW_YAML+=("  canary: false")
   OPENCLAW_YAML_SHOWN+=("  canary: false")
}

# OPD / Combine settings: openclaw_opd_config W_RL W_OPD. Only the distillation kinds whose teacher term is per
# token: Slime carries one float per response token to the loss (Sample.teacher_log_probs), no teacher top-k.
openclaw_opd_config() {
   local distill="${DISTILL:-token}"
   [[ $distill == token || $distill == topk_select_token ]] ||
      openclaw_die "DISTILL=${distill}: on Slime only the token-level teacher terms run (token, topk_select_token); top-k distillation is the embedded backend's"
   openclaw_yaml_num w_rl "$1"
   openclaw_yaml_num w_opd "$2"
   # unset: the distill kind's own clip (learning/settings.py: distill_clip; token 5, topk_select_token 1.0)
   if [[ -n ${OPD_CLIP:-} ]]; then openclaw_yaml_num opd_clip "$OPD_CLIP"; fi
   openclaw_yaml_str distill "${distill}"
   # The rollout hook scores the hinted prompt through Slime's SGLang engines, i.e. with the current
   # policy (self-distillation); there is no frozen base model to score with on this path.
   openclaw_yaml_str teacher policy
}

# Write the plugin config. Slime (slime/utils/arguments.py, after validation) does
# `for k, v in yaml.safe_load(f).items(): setattr(args, k, v)`, overriding any argument of the same name;
# ServeConfig names such as lr, kl_coef or seed would silently replace Slime's and Megatron's own. So every
# setting sits under one new key: args.openclaw_rl is a mapping of slime_ext.config.ServeConfig settings,
# in every process (Slime pickles args into each Ray actor).
openclaw_write_config() {
   mkdir -p "${RUN_DIR}"
   local tmp="${OPENCLAW_CONFIG}.tmp.$$"
   (
      umask 077
      {
         echo "# openclaw-rl plugin settings for Slime (--custom-config-path), written by scripts/slime_common.sh."
         echo "# Slime sets each top-level key onto its args; the hooks read args.openclaw_rl (ServeConfig settings)."
         echo "openclaw_rl:"
         printf '%s\n' "${OPENCLAW_YAML[@]}"
      } >"$tmp"
   )
   chmod 600 "$tmp"
   mv -f "$tmp" "${OPENCLAW_CONFIG}"
}

# ------------------------------------------------------------------------------------------------ launching

OPENCLAW_JUDGE_PID=""
OPENCLAW_STARTED_RAY=0
OPENCLAW_START_RAY=1
OPENCLAW_SUBMITTED=0
OPENCLAW_JOB_DONE=0
OPENCLAW_SUBMIT_PID=""

# Is this child process still running? One that has exited but is not reaped yet (a zombie) is not.
openclaw_alive() {
   local stat
   kill -0 "$1" 2>/dev/null || return 1
   [[ -r /proc/$1/stat ]] || return 0
   read -r stat <"/proc/$1/stat" || return 0
   stat="${stat##*) }"
   [[ ${stat%% *} != Z ]]
}

openclaw_stop_judge() {
   [[ -n $OPENCLAW_JUDGE_PID ]] || return 0
   local pid=$OPENCLAW_JUDGE_PID target waited=0
   OPENCLAW_JUDGE_PID=""
   # The judge runs in its own process group (setsid), so its SGLang workers are stopped with it. Until
   # this script reaps the leader, that group id cannot be reused by anyone else.
   target="-${pid}"
   kill -0 -- "$target" 2>/dev/null || target="$pid"
   echo "stopping the judge SGLang server (pid ${pid})" >&2
   kill -TERM -- "$target" 2>/dev/null || true
   while ((waited < 30)) && openclaw_alive "$pid"; do
      sleep 1
      waited=$((waited + 1))
   done
   kill -KILL -- "$target" 2>/dev/null || true
   wait "$pid" 2>/dev/null || true
}

openclaw_cleanup() {
   local rc=$?
   trap - EXIT INT TERM
   if [[ -n $OPENCLAW_SUBMIT_PID ]]; then
      kill -TERM "$OPENCLAW_SUBMIT_PID" 2>/dev/null || true # the `ray job submit` client this script started
      wait "$OPENCLAW_SUBMIT_PID" 2>/dev/null || true
   fi
   if ((OPENCLAW_SUBMITTED && !OPENCLAW_JOB_DONE)); then
      echo "stopping Ray job ${SUBMISSION_ID}" >&2
      ray job stop --address="${OPENCLAW_RAY_ADDRESS}" "${SUBMISSION_ID}" >&2 || true
   fi
   openclaw_stop_judge
   if ((OPENCLAW_STARTED_RAY)); then
      if [[ ${KEEP_RAY:-0} == 1 ]]; then
         echo "leaving the Ray head this script started running (KEEP_RAY=1); stop it with: ray stop" >&2
      else
         echo "stopping the Ray head this script started" >&2
         ray stop >&2 || true
      fi
   fi
   exit "$rc"
}

openclaw_wait_for_judge() {
   local url="http://${MASTER_ADDR}:${JUDGE_PORT}/health_generate" waited=0
   echo "waiting for the judge SGLang server at ${url} (log: ${RUN_DIR}/judge_sglang.log)"
   until curl -sf --max-time 10 "$url" >/dev/null 2>&1; do
      openclaw_alive "$OPENCLAW_JUDGE_PID" || {
         tail -n 30 "${RUN_DIR}/judge_sglang.log" >&2 || true
         openclaw_die "the judge SGLang server exited; its log is ${RUN_DIR}/judge_sglang.log"
      }
      ((waited < JUDGE_START_TIMEOUT)) || openclaw_die "the judge SGLang server did not answer in ${JUDGE_START_TIMEOUT} s (JUDGE_START_TIMEOUT)"
      sleep 5
      waited=$((waited + 5))
   done
   echo "judge ready at ${JUDGE_URL} (model ${JUDGE_MODEL})"
}

# The Ray head and job-submission commands, Slime-script style: OPENCLAW_RAY_START_CMD (a head that sees
# only GPU_LIST, NUM_GPUS of them) and OPENCLAW_SUBMIT_CMD (`ray job submit ... --`, the caller appends
# `python3 train.py ...`). Needs openclaw_runtime_env first; sets OPENCLAW_RAY_ADDRESS.
openclaw_ray_commands() {
   OPENCLAW_RAY_ADDRESS="http://127.0.0.1:${RAY_DASHBOARD_PORT}"
   OPENCLAW_RAY_START_CMD=(env "CUDA_VISIBLE_DEVICES=$1" ray start --head
      --node-ip-address "${MASTER_ADDR}"
      --num-gpus "$2"
      --disable-usage-stats
      --dashboard-host "${RAY_DASHBOARD_HOST:-127.0.0.1}"
      --dashboard-port "${RAY_DASHBOARD_PORT}")
   OPENCLAW_SUBMIT_CMD=(ray job submit --address="${OPENCLAW_RAY_ADDRESS}"
      --submission-id "${SUBMISSION_ID}"
      --runtime-env-json="${OPENCLAW_RUNTIME_ENV_JSON}"
      --)
}

# Before starting anything for real: enter SLIME_DIR, install the cleanup trap (it stops only what this
# script started), and refuse a Ray cluster that is already running here unless REUSE_RAY=1
# (sets OPENCLAW_START_RAY).
openclaw_take_over() {
   cd "${SLIME_DIR}" || openclaw_die "cannot enter ${SLIME_DIR}"
   trap openclaw_cleanup EXIT
   trap 'exit 130' INT
   trap 'exit 143' TERM

   OPENCLAW_START_RAY=1
   if ray status >/dev/null 2>&1; then
      [[ ${REUSE_RAY:-0} == 1 ]] ||
         openclaw_die "a Ray cluster is already running on this node; stop it first (ray stop), or set REUSE_RAY=1 to submit the job to it"
      echo "submitting to the running Ray cluster (REUSE_RAY=1); it is left running afterwards"
      OPENCLAW_START_RAY=0
   fi
}

# Start the Ray head (the command given) unless openclaw_take_over found one to reuse.
openclaw_start_ray() {
   ((OPENCLAW_START_RAY)) || return 0
   openclaw_show "$@"
   OPENCLAW_STARTED_RAY=1
   "$@"
}

# Submit the job (the command given) and wait for it. In the background and waited for, so that INT / TERM
# reach the trap at once (a foreground command would delay them until the job ends); the trap then stops
# the job by its submission id.
openclaw_submit_and_wait() {
   openclaw_show "$@"
   OPENCLAW_SUBMITTED=1
   "$@" &
   OPENCLAW_SUBMIT_PID=$!
   local rc=0
   wait "${OPENCLAW_SUBMIT_PID}" || rc=$?
   OPENCLAW_SUBMIT_PID=""
   if ((rc == 0)); then OPENCLAW_JOB_DONE=1; fi
   return "$rc"
}

openclaw_launch() {
   openclaw_write_config
   openclaw_runtime_env

   local judge_cmd=()
   if ((OPENCLAW_START_JUDGE)); then
      judge_cmd=(env "CUDA_VISIBLE_DEVICES=${JUDGE_GPU_LIST}" python3 -m sglang.launch_server
         --model-path "${JUDGE_MODEL_PATH}"
         --served-model-name "${JUDGE_MODEL}"
         --host "${MASTER_ADDR}"
         --port "${JUDGE_PORT}"
         --tp-size "${JUDGE_TP}")
      if ((PRM_GPUS / JUDGE_TP > 1)); then judge_cmd+=(--dp-size "$((PRM_GPUS / JUDGE_TP))"); fi
      judge_cmd+=(--mem-fraction-static "${JUDGE_MEM_FRACTION:-0.85}")
   fi

   # Ray sees only the training and rollout GPUs, so the judge's are never scheduled twice.
   openclaw_ray_commands "${RAY_GPU_LIST}" "$((ACTOR_GPUS + ROLLOUT_GPUS))"
   local ray_start_cmd=("${OPENCLAW_RAY_START_CMD[@]}")

   local placement=(--rollout-num-gpus "${ROLLOUT_GPUS}")
   if ((OPENCLAW_COLOCATE)); then
      placement=(--colocate) # Slime gives the rollout every actor GPU, in turn
      openclaw_one_gpu_args
   fi
   local submit_cmd=("${OPENCLAW_SUBMIT_CMD[@]}" python3 "${OPENCLAW_TRAIN_PY}"
      --actor-num-nodes 1
      --actor-num-gpus-per-node "${ACTOR_GPUS}"
      "${placement[@]}"
      --num-gpus-per-node "$((ACTOR_GPUS + ROLLOUT_GPUS))"
      "${MODEL_ARGS[@]}"
      "${CKPT_ARGS[@]}"
      "${ROLLOUT_ARGS[@]}"
      "${OPTIMIZER_ARGS[@]}"
      "${GRPO_ARGS[@]}"
      "${WANDB_ARGS[@]}"
      "${PERF_ARGS[@]}"
      "${SGLANG_ARGS[@]}"
      "${MISC_ARGS[@]}")

   openclaw_note "openclaw-rl on Slime: method ${OPENCLAW_METHOD}$(openclaw_is_dry_run && echo ' (DRY_RUN=1: nothing is started)')"
   openclaw_note "Slime: ${SLIME_DIR}   Megatron: ${MEGATRON_DIR}   model: ${HF_CKPT} (torch_dist: ${REF_LOAD})"
   if ((OPENCLAW_COLOCATE)); then
      openclaw_note "GPUs: training and serving take turns on ${RAY_GPU_LIST} (COLOCATE=1, ${OPENCLAW_TRAIN_PY}): requests wait while a step trains"
   else
      openclaw_note "GPUs: actor ${ACTOR_GPUS} + rollout ${ROLLOUT_GPUS} on ${RAY_GPU_LIST} (Ray); judge ${PRM_GPUS}${JUDGE_GPU_LIST:+ on ${JUDGE_GPU_LIST}} (NVLink: ${OPENCLAW_HAS_NVLINK})"
   fi
   openclaw_note "judge: ${JUDGE}${JUDGE_URL:+ at ${JUDGE_URL}}${JUDGE_MODEL:+ (model ${JUDGE_MODEL})}"
   openclaw_note "server: http://${HOST}:${PORT}/v1 (model ${SERVED_MODEL_NAME}), API key: $([[ -n $API_KEY ]] && echo 'set (in the config file only)' || echo 'none: anyone who can reach the port can use it')"
   openclaw_note "run directory: ${RUN_DIR}"
   openclaw_note "no canary on Slime: its train.py pushes every step's weights to SGLang with no hook to hold a version back (openclaw-rl serve gates each version; docs/slime.md)"
   openclaw_note "plugin config (mode 600): ${OPENCLAW_CONFIG}"
   printf '#   %s\n' "openclaw_rl:" "${OPENCLAW_YAML_SHOWN[@]}"

   if openclaw_is_dry_run; then
      if ((OPENCLAW_START_JUDGE)); then
         openclaw_note "the judge SGLang server, in the background (its own process group; log ${RUN_DIR}/judge_sglang.log):"
         openclaw_show setsid "${judge_cmd[@]}"
      fi
      openclaw_note "the Ray head (refused if a Ray cluster is already running here, unless REUSE_RAY=1):"
      openclaw_show "${ray_start_cmd[@]}"
      openclaw_note "the training job, from ${SLIME_DIR}:"
      openclaw_show "${submit_cmd[@]}"
      openclaw_note "on exit: ray job stop ${SUBMISSION_ID}; stop the judge by its PID; ray stop if this script started the Ray head"
      return 0
   fi

   openclaw_take_over

   if ((OPENCLAW_START_JUDGE)); then
      command -v curl >/dev/null 2>&1 || openclaw_die "curl is needed to wait for the judge server"
      openclaw_show setsid "${judge_cmd[@]}"
      if command -v setsid >/dev/null 2>&1; then
         setsid "${judge_cmd[@]}" >"${RUN_DIR}/judge_sglang.log" 2>&1 &
      else
         "${judge_cmd[@]}" >"${RUN_DIR}/judge_sglang.log" 2>&1 &
      fi
      OPENCLAW_JUDGE_PID=$!
      echo "judge SGLang server started (pid ${OPENCLAW_JUDGE_PID}, log ${RUN_DIR}/judge_sglang.log)"
   fi

   openclaw_start_ray "${ray_start_cmd[@]}"

   if ((OPENCLAW_START_JUDGE)); then openclaw_wait_for_judge; fi

   openclaw_submit_and_wait "${submit_cmd[@]}"
}
