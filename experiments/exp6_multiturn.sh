#!/usr/bin/env bash
# Experiment 6 (the reviewer inside BFCL multi-turn conversations; neither paper reports BFCL multi-turn):
# base alone vs `r2` vs `gate+r2` on bfcl:multi_turn_base and bfcl:multi_turn_miss_param, test split. At
# every step the mechanism reviews the proposed calls before they run on BFCL's backends; BFCL's own
# checkers judge each entry. Per entry help, harm, McNemar p and CI against the base of the same run, per
# category, BFCL's leaderboard number, miss_param's abstention turns on their own, steps withheld / revised
# per turn, LM seconds per entry and per step.
#
#   experiments/exp6_multiturn.sh [MODEL] [REVIEWER] [LIMIT] [OUT]
#     MODEL     base agent (default local = qwen2.5-coder-1.5b)    REVIEWER  default: MODEL
#     LIMIT     test-split entries per dataset (default 30; each has 51)
#     OUT       default runs/exp6
#   env SAAG_OPT (the command), LOCK (flock file held per run), EXTRA (more flags, e.g. --max-cost 5 with an
#       OpenAI model, --dry-run for the plan, --workers 4), DATASETS (default "bfcl:multi_turn_base
#       bfcl:multi_turn_miss_param"), PROMPT (reviewer prompt, default reviewer@v2),
#       SAAG_OPT_LOCAL_CTX (the embedded server's context, exported; default 16384: the tool docs and the
#       history average ~4k tokens per step on multi_turn_base, above the server's 4096 default)
# Each run is resumable (evaluate --resume DIR, per entry; collect a stopped one with --partial).
# Then: python experiments/recompute.py exp6 --collect OUT
# On a new machine, first: python experiments/recompute.py exp6 --restore-base-cache (the base agent's
#   first answers the collected runs computed, so an added condition or a resumed run replays them).
set -euo pipefail
MODEL=${1:-local}
REVIEWER=${2:-$MODEL}
LIMIT=${3:-30}
OUT=${4:-runs/exp6}
SAAG=${SAAG_OPT:-saag-opt}
PROMPT=${PROMPT:-reviewer@v2}
export SAAG_OPT_LOCAL_CTX=${SAAG_OPT_LOCAL_CTX:-16384}
TAG="${MODEL//[:\/@]/_}+${REVIEWER//[:\/@]/_}"
run() {  # run DATASET VARIANT evaluate-flags...
  local dataset=$1 variant=$2; shift 2
  ${LOCK:+flock "$LOCK"} $SAAG evaluate --base "$MODEL" --reviewer "$REVIEWER" --dataset "$dataset" \
    --split test --limit "$LIMIT" ${EXTRA:-} --runs-dir "$OUT/$TAG/${dataset//[:\/@]/_}/$variant" "$@"
}
for dataset in ${DATASETS:-bfcl:multi_turn_base bfcl:multi_turn_miss_param}; do
  run "$dataset" "r2-${PROMPT#reviewer@}" --mechanism r2 --prompt "$PROMPT"
  run "$dataset" "gate+r2-${PROMPT#reviewer@}" --mechanism gate+r2 --prompt "$PROMPT"
done
