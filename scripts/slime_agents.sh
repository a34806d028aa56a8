#!/usr/bin/env bash
# Shared part of the agent-setting launchers (Track 2): terminal-rl/terminal_qwen3_8b_rl.sh,
# toolcall-rl/run_qwen3_8b_toolcall_rl.sh, swe-rl/run_qwen3_8b_swe_rl.sh. They train Qwen3-8B with GRPO on
# this repository's task sets with an unmodified Slime (THUDM/slime v0.3.1), following Slime's
# scripts/run-qwen3-8B.sh (MODEL_ARGS from scripts/models/qwen3-8B.sh; CKPT_ARGS, ROLLOUT_ARGS, EVAL_ARGS,
# PERF_ARGS, GRPO_ARGS, OPTIMIZER_ARGS, SGLANG_ARGS, MISC_ARGS; `ray start` + `ray job submit`).
#
# Unlike the personal-agent launchers (scripts/slime_common.sh: a live proxy replaces Slime's rollout),
# these use Slime's DEFAULT rollout: a prompt dataset naming one task per row (`openclaw-rl env export`),
# N_SAMPLES_PER_PROMPT samples per task, and our --custom-generate-function-path
# (slime_ext.hooks.generate.generate), which plays each sample as one episode through Slime's SGLang
# router and returns it with the environment's outcome as its reward; Slime's GRPO normalizes the rewards
# over the samples of each task.
#
# Sourced by the setting scripts, never run by itself. A setting script sources this file and calls:
#   agent_settings SETTING MAX_TURNS   settings from the environment (MAX_TURNS: the setting's default)
#   agent_export_tasks                 writes $RUN_DIR/<setting>-train.jsonl and -heldout.jsonl (also when
#                                      DRY_RUN=1: it needs no GPU)
#   agent_build_args                   the Slime argument arrays
#   agent_launch                       writes $RUN_DIR/plugin.yaml, then starts (DRY_RUN=1: prints) the job
# The warm start before RL (<setting>-rl/*_sft.sh: Slime's SFT on the setting's scripted solutions) calls instead:
#   agent_sft_settings SETTING MAX_TURNS   settings from the environment (all GPUs train; no SGLang)
#   agent_write_demos                  writes $RUN_DIR/<setting>-demos.jsonl with `openclaw-rl env demos` (train
#                                      split only; also when DRY_RUN=1 if HF_CKPT is here: it needs no GPU)
#   agent_build_sft_args               the Slime argument arrays (--loss-type sft_loss, our rollout function)
#   agent_sft_launch                   writes $RUN_DIR/plugin.yaml, then starts (DRY_RUN=1: prints) the job
#
# Settings (environment variables, all optional):
#   SLIME_DIR, MEGATRON_DIR  as for the personal-agent scripts (default: the current directory, so
#                    `cd slime && bash .../run_qwen3_8b_<setting>_rl.sh`)
#   SLIME_MODEL      Slime's model file, scripts/models/$SLIME_MODEL.sh (default qwen3-8B)
#   HF_CKPT          Hugging Face checkpoint (default /root/Qwen3-8B); REF_LOAD its torch_dist conversion
#                    (default ${HF_CKPT}_torch_dist)
#   NUM_GPUS, ACTOR_GPUS, ROLLOUT_GPUS   GPUs of this node; training / SGLang rollout (default: half each)
#   COLOCATE=1       training and rollout share all the GPUs, in turn (Slime's --colocate)
#   OPENCLAW_RL_SETTINGS   settings of your own (absolute folders, .py files or modules, ':'-separated; the
#                    exporter and the generate hook load them: docs/extending.md); with AGENT_SETTING named
#                    by your own launcher (agent_settings NAME)
#   GENERATE_FUNCTION      Slime's --custom-generate-function-path (default slime_ext.hooks.generate.generate)
#   NUM_NODES        nodes (default 1), each with the GPUs above; more than 1 submits to a Ray cluster the
#                    user started over them (REUSE_RAY=1)
#   MAX_TURNS        model messages per episode (default: the setting's)
#   SAMPLES          episode (one sample per episode, the default) or step (one sample per model message)
#   VISION=1         the setting's images (gui screenshots) go to the model with its observations: HF_CKPT must
#                    be a vision-language model of the Qwen-VL family (gui-rl/gui_qwen3vl_8b_rl.sh sets it)
#   MODEL_PROVIDER   module.function: Slime's --custom-model-provider-path, the Megatron model for a checkpoint
#                    Slime's scripts/models files do not build (Qwen3-VL on Slime v0.3.1: its vision tower)
#   N_SAMPLES_PER_PROMPT   episodes per task and step, the GRPO group (default 8; at least 2)
#   DYNAMIC_FILTER   1 (default): a task whose N_SAMPLES_PER_PROMPT episodes all earned the same reward (GRPO learns
#                    nothing from it) is dropped and another sampled in its place
#                    (slime_ext.hooks.filters.drop_constant_groups; Slime counts the drops per step as
#                    rollout/dynamic_filter/drop_<reason>); 0: every group is trained on
#   OVER_SAMPLING_BATCH_SIZE   tasks sampled per round when groups are dropped (Slime's
#                    --over-sampling-batch-size; default ROLLOUT_BATCH_SIZE)
#   ROLLOUT_BATCH_SIZE     tasks per step (default 8; at most the number of train tasks)
#   NUM_ROLLOUT      training steps (default 200)
#   MAX_RESPONSE_LEN tokens per model message (default 2048); CONTEXT_LENGTH the engine's context (32768);
#                    CONTEXT_BUDGET tokens per episode, prompt included (default CONTEXT_LENGTH)
#   EVAL_INTERVAL    evaluate on the held-out tasks every this many steps (default 10; 0: never);
#                    N_SAMPLES_PER_EVAL_PROMPT episodes per held-out task (default 4)
#   LR (1e-6), KL_COEF (0), SAVE_INTERVAL (20), MAX_TOKENS_PER_GPU (CONTEXT_LENGTH), ACTOR_TP,
#   ROLLOUT_GPUS_PER_ENGINE, SGLANG_MEM_FRACTION, MODEL_ARGS_ROTARY_BASE, MASTER_ADDR, RAY_DASHBOARD_PORT,
#   REUSE_RAY, KEEP_RAY: as for the personal-agent scripts
#   ASYNC=1          train_async.py (rollout of step N+1 overlaps training of step N) instead of train.py
#   OPENCLAW_PYTHON  a Python that imports this repository, for `env export` (default: .venv/bin/python
#                    of this repository, else `openclaw-rl` on PATH, else python3 with this repository
#                    on PYTHONPATH)
#   RUN_DIR          run directory: datasets, plugin config, Megatron checkpoints (default
#                    runs/<setting>-slime-<time> in this repository); SAVE_DIR (default $RUN_DIR/megatron)
#   DRY_RUN=1        write the datasets and the plugin config, print every command, start nothing
#
# Processes: exactly as scripts/slime_common.sh (whose helpers this file uses): on exit it stops only what
# it started (the Ray job by its submission id, the `ray job submit` client by its PID, the Ray head if it
# started it), kills nothing by a name pattern, and refuses to start when a Ray cluster already runs here
# (REUSE_RAY=1 submits to it instead).

# shellcheck source-path=SCRIPTDIR source=slime_common.sh
source "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/slime_common.sh"

AGENT_GENERATE_HOOK="${GENERATE_FUNCTION:-slime_ext.hooks.generate.generate}" # GENERATE_FUNCTION: your own, module.function
AGENT_FILTER_HOOK=slime_ext.hooks.filters.drop_constant_groups # Slime's --dynamic-sampling-filter-path
AGENT_SFT_HOOK=slime_ext.hooks.sft.generate_rollout            # the warm start's --rollout-function-path

# ------------------------------------------------------------------------------------------------ settings

# The trainer script (ASYNC), the model (SLIME_MODEL, HF_CKPT, REF_LOAD), Slime's checkout, the GPUs and the
# nodes: the same for agent RL and its warm start.
agent_model_and_nodes() {
   local async
   openclaw_flag async ASYNC "train_async.py; 0: train.py"
   AGENT_TRAIN_PY=train.py
   if ((async)); then AGENT_TRAIN_PY=train_async.py; fi
   SLIME_MODEL="${SLIME_MODEL:-qwen3-8B}"
   [[ $SLIME_MODEL =~ ^[A-Za-z0-9._-]+$ ]] || openclaw_die "SLIME_MODEL=${SLIME_MODEL}: expected a file name under Slime's scripts/models (without .sh)"
   openclaw_find_slime "${AGENT_TRAIN_PY}" "${SLIME_MODEL}.sh"
   HF_CKPT="${HF_CKPT:-/root/Qwen3-8B}"
   REF_LOAD="${REF_LOAD:-${HF_CKPT%/}_torch_dist}"
   openclaw_detect_gpus
   NUM_NODES="${NUM_NODES:-1}"
   if ! openclaw_is_uint "$NUM_NODES" || ((NUM_NODES < 1)); then
      openclaw_die "NUM_NODES=${NUM_NODES}: expected a whole number >= 1"
   fi
   ((NUM_NODES == 1)) || [[ ${REUSE_RAY:-0} == 1 ]] || openclaw_is_dry_run ||
      openclaw_die "NUM_NODES=${NUM_NODES}: start a Ray cluster over the ${NUM_NODES} nodes first (ray start --head here, ray start --address on the others), then run this with REUSE_RAY=1 to submit to it"
}

agent_settings() {
   AGENT_SETTING="${1:-}"
   local default_max_turns="${2:-8}"
   [[ $AGENT_SETTING =~ ^[a-z][a-z0-9_-]*$ ]] ||
      openclaw_die "agent_settings: expected a setting name (terminal, toolcall, swe, gui), got '${AGENT_SETTING}'"
   OPENCLAW_REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." &>/dev/null && pwd)"
   export PYTHONUNBUFFERED=1 # keeps Ray from buffering stdout/stderr (as Slime's scripts do)

   agent_model_and_nodes
   # GPUs: no judge here, so half train and half serve rollouts (8 GPUs: 4 / 4); COLOCATE=1: both on all of
   # them, in turn (Slime's --colocate offloads one while the other runs). NUM_NODES > 1: that many nodes of
   # the same GPUs each, in a Ray cluster the user started (REUSE_RAY=1; this script starts one node's head).
   openclaw_flag OPENCLAW_COLOCATE COLOCATE "training and rollout share the GPUs in turn"
   if ((OPENCLAW_COLOCATE)); then
      ACTOR_GPUS="${ACTOR_GPUS:-$NUM_GPUS}"
      ROLLOUT_GPUS=0
   else
      ACTOR_GPUS="${ACTOR_GPUS:-$((NUM_GPUS / 2))}"
      ROLLOUT_GPUS="${ROLLOUT_GPUS:-$((NUM_GPUS - ACTOR_GPUS))}"
   fi
   openclaw_is_uint "$ACTOR_GPUS" || openclaw_die "ACTOR_GPUS=${ACTOR_GPUS}: expected a number"
   openclaw_is_uint "$ROLLOUT_GPUS" || openclaw_die "ROLLOUT_GPUS=${ROLLOUT_GPUS}: expected a number"
   ((ACTOR_GPUS >= 1 && (ROLLOUT_GPUS >= 1 || OPENCLAW_COLOCATE))) ||
      openclaw_die "separate training and rollout GPUs are needed (or COLOCATE=1): ACTOR_GPUS=${ACTOR_GPUS}, ROLLOUT_GPUS=${ROLLOUT_GPUS} (NUM_GPUS=${NUM_GPUS})"
   ((ACTOR_GPUS + ROLLOUT_GPUS <= NUM_GPUS)) ||
      openclaw_die "ACTOR_GPUS + ROLLOUT_GPUS must be <= NUM_GPUS (${ACTOR_GPUS} + ${ROLLOUT_GPUS} > ${NUM_GPUS})"
   RAY_GPU_LIST="$(IFS=,; echo "${OPENCLAW_GPU_IDS[*]:0:ACTOR_GPUS+ROLLOUT_GPUS}")"
   openclaw_parallel_sizes

   # The episodes: read by slime_ext.hooks.generate from the plugin config.
   MAX_TURNS="${MAX_TURNS:-$default_max_turns}"
   SAMPLES="${SAMPLES:-episode}"
   case "$SAMPLES" in
      episode | step) ;;
      *) openclaw_die "SAMPLES=${SAMPLES}: expected episode (one training sample per episode) or step (one per model message)" ;;
   esac
   agent_vision_settings

   MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
   N_SAMPLES_PER_PROMPT="${N_SAMPLES_PER_PROMPT:-8}"
   ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-8}"
   OVER_SAMPLING_BATCH_SIZE="${OVER_SAMPLING_BATCH_SIZE:-$ROLLOUT_BATCH_SIZE}"
   DYNAMIC_FILTER="${DYNAMIC_FILTER:-1}"
   openclaw_flag AGENT_DYNAMIC_FILTER DYNAMIC_FILTER "drop the tasks whose episodes all earned the same reward"
   NUM_ROLLOUT="${NUM_ROLLOUT:-200}"
   MAX_RESPONSE_LEN="${MAX_RESPONSE_LEN:-2048}"
   CONTEXT_LENGTH="${CONTEXT_LENGTH:-32768}"
   CONTEXT_BUDGET="${CONTEXT_BUDGET:-$CONTEXT_LENGTH}"
   MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-$CONTEXT_LENGTH}"
   EVAL_INTERVAL="${EVAL_INTERVAL:-10}"
   N_SAMPLES_PER_EVAL_PROMPT="${N_SAMPLES_PER_EVAL_PROMPT:-4}"
   SAVE_INTERVAL="${SAVE_INTERVAL:-20}"
   LR="${LR:-1e-6}"
   KL_COEF="${KL_COEF:-0}"
   TIS_CAP=0 # the agent settings train with Slime's own loss; TIS there is Slime's --use-tis
   RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
   local name
   for name in MAX_TURNS N_SAMPLES_PER_PROMPT ROLLOUT_BATCH_SIZE OVER_SAMPLING_BATCH_SIZE NUM_ROLLOUT MAX_RESPONSE_LEN \
      CONTEXT_LENGTH CONTEXT_BUDGET MAX_TOKENS_PER_GPU EVAL_INTERVAL N_SAMPLES_PER_EVAL_PROMPT SAVE_INTERVAL \
      RAY_DASHBOARD_PORT; do
      openclaw_is_uint "${!name}" || openclaw_die "${name}=${!name}: expected a whole number"
   done
   for name in LR KL_COEF; do
      openclaw_is_number "${!name}" || openclaw_die "${name}=${!name}: expected a number"
   done
   ((MAX_TURNS >= 1)) || openclaw_die "MAX_TURNS must be at least 1"
   ((ROLLOUT_BATCH_SIZE >= 1 && NUM_ROLLOUT >= 1 && N_SAMPLES_PER_EVAL_PROMPT >= 1)) ||
      openclaw_die "ROLLOUT_BATCH_SIZE, NUM_ROLLOUT and N_SAMPLES_PER_EVAL_PROMPT must be at least 1"
   ((OVER_SAMPLING_BATCH_SIZE >= ROLLOUT_BATCH_SIZE)) ||
      openclaw_die "OVER_SAMPLING_BATCH_SIZE=${OVER_SAMPLING_BATCH_SIZE} must be at least ROLLOUT_BATCH_SIZE=${ROLLOUT_BATCH_SIZE} (Slime refuses less)"
   ((N_SAMPLES_PER_PROMPT >= 2)) ||
      openclaw_die "N_SAMPLES_PER_PROMPT=${N_SAMPLES_PER_PROMPT}: GRPO compares the episodes of one task with each other, so it needs at least 2 (every advantage would be 0)"
   ((MAX_RESPONSE_LEN < CONTEXT_BUDGET && CONTEXT_BUDGET <= CONTEXT_LENGTH)) ||
      openclaw_die "expected MAX_RESPONSE_LEN < CONTEXT_BUDGET <= CONTEXT_LENGTH, got ${MAX_RESPONSE_LEN}, ${CONTEXT_BUDGET}, ${CONTEXT_LENGTH}"

   # The run directory: absolute, since the Ray job runs elsewhere than this shell.
   local run_dir="${RUN_DIR:-${OPENCLAW_REPO_ROOT}/runs/${AGENT_SETTING}-slime-$(date +%Y%m%d-%H%M%S)}"
   [[ $run_dir == /* ]] || run_dir="${PWD}/${run_dir}"
   RUN_DIR="${run_dir%/}"
   SAVE_DIR="${SAVE_DIR:-${RUN_DIR}/megatron}"
   AGENT_CONFIG="${RUN_DIR}/plugin.yaml"
   AGENT_TRAIN_DATA="${RUN_DIR}/${AGENT_SETTING}-train.jsonl"
   AGENT_EVAL_DATA="${RUN_DIR}/${AGENT_SETTING}-heldout.jsonl"
   SUBMISSION_ID="openclaw-rl-${AGENT_SETTING}-$(date +%Y%m%d-%H%M%S)-$$"
   openclaw_preflight
}

# VISION and MODEL_PROVIDER (see the top of this file) into AGENT_VISION (1 / 0) and MODEL_PROVIDER. Slime
# v0.3.1 builds a vision-language Megatron model only from its *-vl model files (Qwen3.5); any other vision
# checkpoint needs a model provider of the user's, so a real run without one is refused here, not mid-job.
agent_vision_settings() {
   openclaw_flag AGENT_VISION VISION "the setting's images go to a vision-language model"
   MODEL_PROVIDER="${MODEL_PROVIDER:-}"
   [[ -z $MODEL_PROVIDER || $MODEL_PROVIDER =~ ^[A-Za-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*$ ]] ||
      openclaw_die "MODEL_PROVIDER=${MODEL_PROVIDER}: expected module.function (Slime's --custom-model-provider-path)"
   if ((AGENT_VISION)) && [[ $SLIME_MODEL != *-vl && -z $MODEL_PROVIDER ]]; then
      local why="VISION=1 trains a vision-language model, but Slime's scripts/models/${SLIME_MODEL}.sh builds a text-only Megatron model: set MODEL_PROVIDER=module.function (a Megatron model provider for ${HF_CKPT##*/} with its vision tower, e.g. Qwen3-VL from Megatron-Bridge; Slime loads it with --custom-model-provider-path), or use a vision model Slime builds itself (SLIME_MODEL=qwen3.5-35B-A3B-vl HF_CKPT=<Qwen3.5-35B-A3B>)"
      openclaw_is_dry_run || openclaw_die "$why"
      openclaw_note "note: ${why}"
   fi
}

# ------------------------------------------------------------------------------------------ the datasets

# The command that runs `openclaw-rl` from this repository, into AGENT_CLI.
agent_find_cli() {
   if [[ -n ${OPENCLAW_PYTHON:-} ]]; then
      AGENT_CLI=(env "PYTHONPATH=${OPENCLAW_REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" "${OPENCLAW_PYTHON}" -m slime_ext.cli)
   elif [[ -x ${OPENCLAW_REPO_ROOT}/.venv/bin/python ]]; then
      AGENT_CLI=("${OPENCLAW_REPO_ROOT}/.venv/bin/python" -m slime_ext.cli)
   elif command -v openclaw-rl >/dev/null 2>&1; then
      AGENT_CLI=(openclaw-rl)
   elif command -v python3 >/dev/null 2>&1; then
      AGENT_CLI=(env "PYTHONPATH=${OPENCLAW_REPO_ROOT}${PYTHONPATH:+:${PYTHONPATH}}" python3 -m slime_ext.cli)
   else
      openclaw_die "no Python to export the tasks with: run \`make install\` in ${OPENCLAW_REPO_ROOT}, or set OPENCLAW_PYTHON"
   fi
}

# Non-empty lines of a file.
agent_count_rows() {
   local n=0 line
   while IFS= read -r line || [[ -n $line ]]; do
      [[ -z $line ]] || n=$((n + 1))
   done <"$1"
   printf '%s\n' "$n"
}

# Slime's prompt datasets: one row per task ({prompt, label: task id, metadata: {setting, task_id}}), the
# train split for --prompt-data, the held-out split for --eval-prompt-data. Written in dry runs too.
agent_export_tasks() {
   agent_find_cli
   mkdir -p "${RUN_DIR}"
   local split out cmd
   openclaw_note "the ${AGENT_SETTING} tasks as Slime prompt datasets (written with DRY_RUN=1 too):"
   for split in train heldout; do
      out="${RUN_DIR}/${AGENT_SETTING}-${split}.jsonl"
      cmd=("${AGENT_CLI[@]}" env export --setting "${AGENT_SETTING}" --split "${split}" --out "${out}")
      openclaw_show "${cmd[@]}"
      "${cmd[@]}" || openclaw_die "exporting the ${split} tasks of the ${AGENT_SETTING} setting failed (the message above says why)"
   done
   AGENT_N_TRAIN=$(agent_count_rows "${AGENT_TRAIN_DATA}")
   AGENT_N_HELDOUT=$(agent_count_rows "${AGENT_EVAL_DATA}")
   ((AGENT_N_TRAIN > 0)) || openclaw_die "the ${AGENT_SETTING} setting has no train tasks"
   ((ROLLOUT_BATCH_SIZE <= AGENT_N_TRAIN)) ||
      openclaw_die "ROLLOUT_BATCH_SIZE=${ROLLOUT_BATCH_SIZE} is more than the ${AGENT_N_TRAIN} train tasks of the ${AGENT_SETTING} setting"
}

# ---------------------------------------------------------------------------------------- Slime arguments

agent_model_ckpt_args() {
   # MODEL_ARGS (the architecture, from Slime's own file; MODEL_ARGS_ROTARY_BASE=5000000 for the 2507
   # checkpoints) and CKPT_ARGS, the same for RL and the warm start. --load = --save: a restart with the same
   # RUN_DIR resumes from the latest checkpoint (the SFT mid-epoch: Slime checkpoints its place).
   # shellcheck source=/dev/null
   source "${SLIME_DIR}/scripts/models/${SLIME_MODEL}.sh"
   declare -p MODEL_ARGS >/dev/null 2>&1 || openclaw_die "${SLIME_DIR}/scripts/models/${SLIME_MODEL}.sh did not set MODEL_ARGS"
   [[ -z $MODEL_PROVIDER ]] || MODEL_ARGS+=(--custom-model-provider-path "${MODEL_PROVIDER}")
   CKPT_ARGS=(
      --hf-checkpoint "${HF_CKPT}"
      --ref-load "${REF_LOAD}"
      --load "${SAVE_DIR}"
      --save "${SAVE_DIR}"
      --save-interval "${SAVE_INTERVAL}"
   )
}

agent_build_args() {
   agent_model_ckpt_args

   ROLLOUT_ARGS=(
      # Slime's default rollout over our task dataset; the generate hook plays each sample as an episode
      # (settings: the openclaw_rl_env mapping of the plugin config) and fills in its reward.
      --prompt-data "${AGENT_TRAIN_DATA}"
      --input-key prompt
      --label-key label
      --metadata-key metadata
      --rollout-shuffle
      --custom-generate-function-path "${AGENT_GENERATE_HOOK}"
      --custom-config-path "${AGENT_CONFIG}"
      --num-rollout "${NUM_ROLLOUT}"
      --rollout-batch-size "${ROLLOUT_BATCH_SIZE}"
      --n-samples-per-prompt "${N_SAMPLES_PER_PROMPT}"
      # per model message; the whole episode is bounded by context_budget (plugin config)
      --rollout-max-response-len "${MAX_RESPONSE_LEN}"
      --rollout-max-context-len "${CONTEXT_LENGTH}"
      --rollout-temperature 1.0
      # One optimizer step per rollout step (Slime splits steps by rollout id, so SAMPLES=step, which
      # returns several samples per episode, keeps one step too).
      --global-batch-size "$((ROLLOUT_BATCH_SIZE * N_SAMPLES_PER_PROMPT))"
      --balance-data
   )
   if ((AGENT_DYNAMIC_FILTER)); then
      # A task whose episodes all earned the same reward has every advantage 0: drop it and sample another
      # (failed episodes left out; fan-out groups of SAMPLES=step read per episode). Slime counts the drops
      # per step (rollout/dynamic_filter/drop_zero_std_-1.0: nothing solved, ..._1.0: all solved).
      ROLLOUT_ARGS+=(--dynamic-sampling-filter-path "${AGENT_FILTER_HOOK}")
      ((OVER_SAMPLING_BATCH_SIZE == ROLLOUT_BATCH_SIZE)) ||
         ROLLOUT_ARGS+=(--over-sampling-batch-size "${OVER_SAMPLING_BATCH_SIZE}")
   fi

   EVAL_ARGS=()
   if ((EVAL_INTERVAL > 0 && AGENT_N_HELDOUT > 0)); then
      EVAL_ARGS=(
         --eval-interval "${EVAL_INTERVAL}"
         --eval-prompt-data "${AGENT_SETTING}" "${AGENT_EVAL_DATA}"
         --n-samples-per-eval-prompt "${N_SAMPLES_PER_EVAL_PROMPT}"
         --eval-max-response-len "${MAX_RESPONSE_LEN}"
      )
   fi

   # GRPO on the outcome: each episode's reward (the task's checks, from the environment) minus the mean
   # of its task's N_SAMPLES_PER_PROMPT episodes, divided by their std (RolloutManager._post_process_rewards,
   # slime/ray/rollout.py), broadcast over the episode's model tokens; observation tokens have loss mask 0.
   # --use-rollout-logprobs: the PPO ratio is taken against the log-probs SGLang recorded for every sampled
   # token (exact per token; 0.0 under the mask), not recomputed by Megatron.
   GRPO_ARGS=(
      --advantage-estimator grpo
      --use-rollout-logprobs
      --entropy-coef 0.00
      --eps-clip 0.2
      --eps-clip-high 0.28
   )
   openclaw_kl_args
   openclaw_slime_common_args
}

# ------------------------------------------------------------------------------------------------ launching

# The plugin config: Slime sets every top-level key of --custom-config-path onto its args, so ours sit
# under one new key, openclaw_rl_env (the settings of slime_ext.hooks.generate.EnvSettings).
agent_write_config() {
   OPENCLAW_YAML=()
   OPENCLAW_YAML_SHOWN=()
   openclaw_yaml_str setting "${AGENT_SETTING}"
   openclaw_yaml_num max_turns "${MAX_TURNS}"
   openclaw_yaml_str samples "${SAMPLES}"
   openclaw_yaml_num context_budget "${CONTEXT_BUDGET}"
   # settings of the user's own (envs/loader.py), loaded by the generate hook on the rollout workers
   [[ -z ${OPENCLAW_RL_SETTINGS:-} ]] || openclaw_yaml_str setting_paths "${OPENCLAW_RL_SETTINGS}"
   if ((AGENT_VISION)); then # the screenshots go to SGLang and into each sample (chat/vision.py)
      OPENCLAW_YAML+=("  vision: true")
      OPENCLAW_YAML_SHOWN+=("  vision: true")
   fi
   mkdir -p "${RUN_DIR}"
   local tmp="${AGENT_CONFIG}.tmp.$$"
   {
      echo "# openclaw-rl agent settings for Slime (--custom-config-path), written by scripts/slime_agents.sh."
      echo "# Slime sets each top-level key onto its args; slime_ext.hooks.generate reads args.openclaw_rl_env."
      echo "openclaw_rl_env:"
      printf '%s\n' "${OPENCLAW_YAML[@]}"
   } >"$tmp"
   mv -f "$tmp" "${AGENT_CONFIG}"
}

agent_launch() {
   agent_write_config
   openclaw_runtime_env
   openclaw_ray_commands "${RAY_GPU_LIST}" "$((ACTOR_GPUS + ROLLOUT_GPUS))"
   local ray_start_cmd=("${OPENCLAW_RAY_START_CMD[@]}")
   local placement=(--rollout-num-gpus "$((ROLLOUT_GPUS * NUM_NODES))")
   if ((OPENCLAW_COLOCATE)); then
      placement=(--colocate) # Slime gives the rollout every actor GPU, in turn
      ((NUM_NODES > 1)) || openclaw_one_gpu_args
   fi
   local submit_cmd=("${OPENCLAW_SUBMIT_CMD[@]}" python3 "${AGENT_TRAIN_PY}"
      --actor-num-nodes "${NUM_NODES}"
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
      "${EVAL_ARGS[@]}"
      "${SGLANG_ARGS[@]}"
      "${MISC_ARGS[@]}")

   openclaw_note "openclaw-rl agent RL on Slime: setting ${AGENT_SETTING}, ${AGENT_TRAIN_PY}$(openclaw_is_dry_run && echo ' (DRY_RUN=1: nothing is started)')"
   openclaw_note "Slime: ${SLIME_DIR}   Megatron: ${MEGATRON_DIR}   model: ${HF_CKPT} (torch_dist: ${REF_LOAD})"
   if ((OPENCLAW_COLOCATE)); then
      openclaw_note "GPUs: actor and rollout colocated on ${RAY_GPU_LIST} per node, ${NUM_NODES} node(s) (NVLink: ${OPENCLAW_HAS_NVLINK})"
   else
      openclaw_note "GPUs: actor ${ACTOR_GPUS} + rollout ${ROLLOUT_GPUS} on ${RAY_GPU_LIST} per node, ${NUM_NODES} node(s) (NVLink: ${OPENCLAW_HAS_NVLINK})"
   fi
   openclaw_note "tasks: ${AGENT_N_TRAIN} train (${AGENT_TRAIN_DATA}), ${AGENT_N_HELDOUT} held-out (${AGENT_EVAL_DATA})"
   openclaw_note "per step: ${ROLLOUT_BATCH_SIZE} tasks x ${N_SAMPLES_PER_PROMPT} episodes, up to ${MAX_TURNS} messages each; ${NUM_ROLLOUT} steps"
   if ((AGENT_DYNAMIC_FILTER)); then
      openclaw_note "a task whose episodes all earned the same reward is dropped and another sampled (${AGENT_FILTER_HOOK}; DYNAMIC_FILTER=0 keeps them)"
   else
      openclaw_note "every group is trained on, constant-reward ones too (DYNAMIC_FILTER=0)"
   fi
   if ((EVAL_INTERVAL == 0)); then
      openclaw_note "no evaluation (EVAL_INTERVAL=0)"
   elif ((AGENT_N_HELDOUT == 0)); then
      openclaw_note "no evaluation: the ${AGENT_SETTING} setting has no held-out tasks"
   else
      openclaw_note "evaluation: every ${EVAL_INTERVAL} steps, ${N_SAMPLES_PER_EVAL_PROMPT} episodes per held-out task"
   fi
   openclaw_note "run directory: ${RUN_DIR}"
   openclaw_note "plugin config: ${AGENT_CONFIG}"
   printf '#   %s\n' "openclaw_rl_env:" "${OPENCLAW_YAML_SHOWN[@]}"

   if openclaw_is_dry_run; then
      openclaw_note "the Ray head (refused if a Ray cluster is already running here, unless REUSE_RAY=1):"
      openclaw_show "${ray_start_cmd[@]}"
      openclaw_note "the training job, from ${SLIME_DIR}:"
      openclaw_show "${submit_cmd[@]}"
      openclaw_note "on exit: ray job stop ${SUBMISSION_ID}; ray stop if this script started the Ray head"
      return 0
   fi

   openclaw_take_over
   openclaw_start_ray "${ray_start_cmd[@]}"
   openclaw_submit_and_wait "${submit_cmd[@]}"
}

# ----------------------------------------------------------------------------------- the warm start (SFT)
#
# Supervised fine-tuning on the setting's scripted solutions before agent RL, with Slime's SFT path as in its
# examples/retool/retool_qwen3_4b_sft.sh: --loss-type sft_loss, --debug-train-only (no SGLang: nothing is
# sampled), --num-epoch over the prompt dataset. The dataset is the demonstrations file itself
# (`openclaw-rl env demos`: token ids, response length, loss mask per train task), read by our rollout function
# slime_ext.hooks.sft.generate_rollout, which hands Slime each row's ids and loss mask exactly as written (the
# observations' tokens masked out; nothing re-tokenized).
#
# Settings (environment variables, all optional; the RL launchers' where the name is the same):
#   SLIME_DIR, MEGATRON_DIR, SLIME_MODEL, HF_CKPT, REF_LOAD, NUM_GPUS, ACTOR_GPUS (default: all of them),
#   NUM_NODES, ACTOR_TP, MAX_TURNS, MODEL_PROVIDER, OPENCLAW_RL_SETTINGS, OPENCLAW_PYTHON, MASTER_ADDR,
#   RAY_DASHBOARD_PORT, REUSE_RAY, KEEP_RAY, MODEL_ARGS_ROTARY_BASE
#   DEMOS            a demonstrations file written before (by `openclaw-rl env demos` with HF_CKPT's tokenizer):
#                    used as it is; default: written to $RUN_DIR/<setting>-demos.jsonl (kept when it is already
#                    there: a restart in the same RUN_DIR resumes in the same rows)
#   NUM_EPOCH        passes over the demonstrations (default 3); ROLLOUT_BATCH_SIZE demonstrations per step and
#                    optimizer step (default 16; at most the number of demonstrations)
#   LR (1e-5), MIN_LR (1e-6): cosine decay after a warm-up of LR_WARMUP_FRACTION (0.1) of the steps
#   CONTEXT_LENGTH   the longest demonstration, in tokens (default 32768); MAX_TOKENS_PER_GPU (CONTEXT_LENGTH)
#   SAVE_INTERVAL    steps between checkpoints (default 1000; Slime also saves after every epoch and the last step)
#   ASYNC=0          train.py instead of train_async.py (Slime's SFT scripts use train_async.py)
#   RUN_DIR          run directory (default runs/<setting>-sft-<time>); SAVE_DIR ($RUN_DIR/megatron): the
#                    checkpoint agent RL starts from: REF_LOAD=$SAVE_DIR bash <setting>-rl/<the RL launcher>
#   DRY_RUN=1        write the demonstrations (when HF_CKPT is here) and the plugin config, print every command

agent_sft_settings() {
   AGENT_SETTING="${1:-}"
   [[ $AGENT_SETTING =~ ^[a-z][a-z0-9_-]*$ ]] ||
      openclaw_die "agent_sft_settings: expected a setting name (terminal, toolcall, swe, gui), got '${AGENT_SETTING}'"
   MAX_TURNS="${MAX_TURNS:-${2:-8}}"
   OPENCLAW_REPO_ROOT="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")/.." &>/dev/null && pwd)"
   export PYTHONUNBUFFERED=1

   ASYNC="${ASYNC:-1}"
   agent_model_and_nodes
   # GPUs: nothing is sampled (--debug-train-only), so every GPU trains.
   ACTOR_GPUS="${ACTOR_GPUS:-$NUM_GPUS}"
   if ! openclaw_is_uint "$ACTOR_GPUS" || ((ACTOR_GPUS < 1 || ACTOR_GPUS > NUM_GPUS)); then
      openclaw_die "ACTOR_GPUS=${ACTOR_GPUS}: expected 1 .. NUM_GPUS (${NUM_GPUS})"
   fi
   ROLLOUT_GPUS=0
   RAY_GPU_LIST="$(IFS=,; echo "${OPENCLAW_GPU_IDS[*]:0:ACTOR_GPUS}")"
   openclaw_parallel_sizes
   local vision
   openclaw_flag vision VISION "the setting's images go to a vision-language model"
   ((vision == 0)) ||
      openclaw_die "VISION=1: the demonstrations carry no images (the SFT trains on their tokens alone); leave VISION unset"
   MODEL_PROVIDER="${MODEL_PROVIDER:-}"
   [[ -z $MODEL_PROVIDER || $MODEL_PROVIDER =~ ^[A-Za-z_][A-Za-z0-9_.]*\.[A-Za-z_][A-Za-z0-9_]*$ ]] ||
      openclaw_die "MODEL_PROVIDER=${MODEL_PROVIDER}: expected module.function (Slime's --custom-model-provider-path)"

   MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
   NUM_EPOCH="${NUM_EPOCH:-3}"
   ROLLOUT_BATCH_SIZE="${ROLLOUT_BATCH_SIZE:-16}"
   CONTEXT_LENGTH="${CONTEXT_LENGTH:-32768}"
   MAX_TOKENS_PER_GPU="${MAX_TOKENS_PER_GPU:-$CONTEXT_LENGTH}"
   SAVE_INTERVAL="${SAVE_INTERVAL:-1000}"
   LR="${LR:-1e-5}"
   MIN_LR="${MIN_LR:-1e-6}"
   LR_WARMUP_FRACTION="${LR_WARMUP_FRACTION:-0.1}"
   RAY_DASHBOARD_PORT="${RAY_DASHBOARD_PORT:-8265}"
   local name
   for name in MAX_TURNS NUM_EPOCH ROLLOUT_BATCH_SIZE CONTEXT_LENGTH MAX_TOKENS_PER_GPU SAVE_INTERVAL RAY_DASHBOARD_PORT; do
      openclaw_is_uint "${!name}" || openclaw_die "${name}=${!name}: expected a whole number"
   done
   for name in LR MIN_LR LR_WARMUP_FRACTION; do
      openclaw_is_number "${!name}" || openclaw_die "${name}=${!name}: expected a number"
   done
   ((MAX_TURNS >= 1 && NUM_EPOCH >= 1 && ROLLOUT_BATCH_SIZE >= 1)) ||
      openclaw_die "MAX_TURNS, NUM_EPOCH and ROLLOUT_BATCH_SIZE must be at least 1"

   local run_dir="${RUN_DIR:-${OPENCLAW_REPO_ROOT}/runs/${AGENT_SETTING}-sft-$(date +%Y%m%d-%H%M%S)}"
   [[ $run_dir == /* ]] || run_dir="${PWD}/${run_dir}"
   RUN_DIR="${run_dir%/}"
   SAVE_DIR="${SAVE_DIR:-${RUN_DIR}/megatron}"
   AGENT_CONFIG="${RUN_DIR}/plugin.yaml"
   AGENT_DEMOS="${DEMOS:-${RUN_DIR}/${AGENT_SETTING}-demos.jsonl}"
   [[ $AGENT_DEMOS == /* ]] || AGENT_DEMOS="${PWD}/${AGENT_DEMOS}"
   SUBMISSION_ID="openclaw-rl-${AGENT_SETTING}-sft-$(date +%Y%m%d-%H%M%S)-$$"
   openclaw_preflight
}

# The demonstrations: the train split's scripted solutions played through the environment, in HF_CKPT's chat
# template (its tokenizer, on the CPU), one JSON line per task whose script earned +1. DEMOS: a file written
# before; a file already in RUN_DIR (a restart) is kept. In a dry run they are written too when HF_CKPT is on
# this machine; otherwise the command is shown.
agent_write_demos() {
   agent_find_cli
   mkdir -p "${RUN_DIR}"
   AGENT_N_DEMOS=""
   if [[ -n ${DEMOS:-} ]]; then
      [[ -s $AGENT_DEMOS ]] || openclaw_die "DEMOS=${DEMOS}: no such file, or empty (write it with: openclaw-rl env demos --setting ${AGENT_SETTING} --model ${HF_CKPT} --out FILE)"
      openclaw_note "demonstrations: ${AGENT_DEMOS} (DEMOS: written before; not rewritten)"
   elif [[ -s $AGENT_DEMOS ]]; then
      # a restart in the same RUN_DIR resumes mid-epoch (Slime checkpoints its place in the file): same rows
      openclaw_note "demonstrations: ${AGENT_DEMOS} (written before in this RUN_DIR; delete it to write it again)"
   else
      local cmd=("${AGENT_CLI[@]}" env demos --setting "${AGENT_SETTING}" --model "${HF_CKPT}"
         --max-turns "${MAX_TURNS}" --out "${AGENT_DEMOS}")
      if openclaw_is_dry_run && [[ ! -e $HF_CKPT ]]; then
         openclaw_note "the ${AGENT_SETTING} train tasks' scripted solutions, in ${HF_CKPT}'s chat template (not written: HF_CKPT is not on this machine):"
         openclaw_show "${cmd[@]}"
         return 0
      fi
      openclaw_note "the ${AGENT_SETTING} train tasks' scripted solutions, in ${HF_CKPT}'s chat template (written with DRY_RUN=1 too):"
      openclaw_show "${cmd[@]}"
      "${cmd[@]}" || openclaw_die "writing the ${AGENT_SETTING} demonstrations failed (the message above says why)"
   fi
   AGENT_N_DEMOS=$(agent_count_rows "${AGENT_DEMOS}")
   ((AGENT_N_DEMOS > 0)) || openclaw_die "no ${AGENT_SETTING} demonstrations in ${AGENT_DEMOS}"
   ((ROLLOUT_BATCH_SIZE <= AGENT_N_DEMOS)) ||
      openclaw_die "ROLLOUT_BATCH_SIZE=${ROLLOUT_BATCH_SIZE} is more than the ${AGENT_N_DEMOS} demonstrations in ${AGENT_DEMOS}"
}

agent_build_sft_args() {
   agent_model_ckpt_args

   SFT_ARGS=(
      # The demonstrations file is the prompt dataset: Slime reads, shuffles and counts its rows; each sample's
      # prompt is its row's token ids (--input-key tokens), and our rollout function adds the row's response
      # length and loss mask (slime_ext/hooks/sft.py). Nothing is tokenized again.
      --rollout-function-path "${AGENT_SFT_HOOK}"
      --prompt-data "${AGENT_DEMOS}"
      --input-key tokens
      --label-key label
      --metadata-key metadata
      --custom-config-path "${AGENT_CONFIG}"
      --rollout-shuffle
      --num-epoch "${NUM_EPOCH}"
      --rollout-batch-size "${ROLLOUT_BATCH_SIZE}"
      --global-batch-size "${ROLLOUT_BATCH_SIZE}"

      # Slime's SFT: the negative log-likelihood of the response tokens under their loss mask (the agent's
      # tokens; the observations' are 0), no advantages, no SGLang
      --loss-type sft_loss
      --calculate-per-token-loss
      --disable-compute-advantages-and-returns
      --debug-train-only
   )

   openclaw_slime_common_args
   OPTIMIZER_ARGS=(
      --optimizer adam
      --lr "${LR}"
      --lr-decay-style cosine
      --min-lr "${MIN_LR}"
      --lr-warmup-fraction "${LR_WARMUP_FRACTION}"
      --weight-decay 0.1
      --adam-beta1 0.9
      --adam-beta2 0.95
   )
}

# The plugin config of the SFT: the setting every demonstration must be of, and settings of the user's own.
agent_write_sft_config() {
   OPENCLAW_YAML=()
   OPENCLAW_YAML_SHOWN=()
   openclaw_yaml_str setting "${AGENT_SETTING}"
   openclaw_yaml_num max_turns "${MAX_TURNS}"
   [[ -z ${OPENCLAW_RL_SETTINGS:-} ]] || openclaw_yaml_str setting_paths "${OPENCLAW_RL_SETTINGS}"
   mkdir -p "${RUN_DIR}"
   local tmp="${AGENT_CONFIG}.tmp.$$"
   {
      echo "# openclaw-rl warm-start settings for Slime (--custom-config-path), written by scripts/slime_agents.sh."
      echo "# Slime sets each top-level key onto its args; slime_ext.hooks.sft reads args.openclaw_rl_env."
      echo "openclaw_rl_env:"
      printf '%s\n' "${OPENCLAW_YAML[@]}"
   } >"$tmp"
   mv -f "$tmp" "${AGENT_CONFIG}"
}

agent_sft_launch() {
   agent_write_sft_config
   openclaw_runtime_env
   openclaw_ray_commands "${RAY_GPU_LIST}" "${ACTOR_GPUS}"
   local ray_start_cmd=("${OPENCLAW_RAY_START_CMD[@]}")
   ((NUM_NODES > 1)) || openclaw_one_gpu_args
   local submit_cmd=("${OPENCLAW_SUBMIT_CMD[@]}" python3 "${AGENT_TRAIN_PY}"
      --actor-num-nodes "${NUM_NODES}"
      --actor-num-gpus-per-node "${ACTOR_GPUS}"
      --num-gpus-per-node "${ACTOR_GPUS}"
      "${MODEL_ARGS[@]}"
      "${CKPT_ARGS[@]}"
      "${SFT_ARGS[@]}"
      "${OPTIMIZER_ARGS[@]}"
      "${WANDB_ARGS[@]}"
      "${PERF_ARGS[@]}"
      "${MISC_ARGS[@]}")

   local steps="${NUM_EPOCH} x (demonstrations / ${ROLLOUT_BATCH_SIZE})"
   [[ -z $AGENT_N_DEMOS ]] || steps=$((NUM_EPOCH * (AGENT_N_DEMOS / ROLLOUT_BATCH_SIZE)))
   openclaw_note "openclaw-rl warm start (SFT) on Slime: setting ${AGENT_SETTING}, ${AGENT_TRAIN_PY}$(openclaw_is_dry_run && echo ' (DRY_RUN=1: nothing is started)')"
   openclaw_note "Slime: ${SLIME_DIR}   Megatron: ${MEGATRON_DIR}   model: ${HF_CKPT} (torch_dist: ${REF_LOAD})"
   openclaw_note "GPUs: ${ACTOR_GPUS} training on ${RAY_GPU_LIST} per node, ${NUM_NODES} node(s), no rollout engines (--debug-train-only)"
   openclaw_note "demonstrations: ${AGENT_N_DEMOS:-?} (${AGENT_DEMOS}), train split only; ${ROLLOUT_BATCH_SIZE} per step, ${NUM_EPOCH} epochs: ${steps} steps"
   openclaw_note "loss: Slime's sft_loss on the agent's tokens (loss mask 1), through ${AGENT_SFT_HOOK}"
   openclaw_note "run directory: ${RUN_DIR}; checkpoints: ${SAVE_DIR}"
   openclaw_note "plugin config: ${AGENT_CONFIG}"
   printf '#   %s\n' "openclaw_rl_env:" "${OPENCLAW_YAML_SHOWN[@]}"
   openclaw_note "then agent RL from this checkpoint: REF_LOAD=${SAVE_DIR} HF_CKPT=${HF_CKPT} with the ${AGENT_SETTING} RL launcher (a new RUN_DIR)"

   if openclaw_is_dry_run; then
      openclaw_note "the Ray head (refused if a Ray cluster is already running here, unless REUSE_RAY=1):"
      openclaw_show "${ray_start_cmd[@]}"
      openclaw_note "the training job, from ${SLIME_DIR}:"
      openclaw_show "${submit_cmd[@]}"
      openclaw_note "on exit: ray job stop ${SUBMISSION_ID}; ray stop if this script started the Ray head"
      return 0
   fi

   openclaw_take_over
   openclaw_start_ray "${ray_start_cmd[@]}"
   openclaw_submit_and_wait "${submit_cmd[@]}"
}
