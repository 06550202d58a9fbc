#!/usr/bin/env bash
# Experiment 5 (can any reviewer set-up beat the embedded 1.5B base, on a test split with power?):
# the single-turn BFCL categories (bfcl:single_turn: non-live and live, irrelevance and live_irrelevance
# included), test n = 320 stratified (38-39 of each large category), every set-up paired with the same
# base per example (McNemar, bootstrap CI, help/harm per category).
#
#   experiments/exp5_powered.sh STAGE [OUT]
#     STAGE  fixed  the pre-declared set-ups on test: r2, gate+r2 and saag+s3 with the 1.5B base, and the
#                   asymmetric pair (0.5B base, 1.5B reviewer) with r2
#            tune   optuna over experiments/spaces/exp5-offline.toml on val; its front re-evaluated on test
#            gepa   GEPA (rails on) on train/val from reviewer@v2, seed vs best on test
#            abstain  saag+abstain with the 1.5B base, pre-registered in docs/design.md §25: on the 320 test
#                   examples that suggested it (exploratory), then on the next 320 of the same stratified
#                   order (--skip 320, FRESH examples; OUT/<pair>/bfcl_single_turn-fresh): the confirmation
#     OUT    default runs/exp5
#   env SAAG_OPT (the command), LOCK (flock file held per run), LIMIT (test examples, default 320),
#       EXTRA (more flags, e.g. --max-cost 5 with an OpenAI model, --dry-run for the plan), MODEL / SMALL
#       (default local / local:qwen2.5-coder-0.5b), TRAIN / VAL / CALLS for gepa (default 40 / 20 / 80)
# Each run is resumable (evaluate --resume DIR); evaluate works round-robin over the categories, so a run
# stopped early holds a stratified sample (collect it with --partial).
# Then: python experiments/recompute.py exp5 --collect OUT [--partial]
# On a new machine, first: python experiments/recompute.py exp5 --restore-base-cache (the base agent's
#   first answers the collected runs computed, so an added condition or a resumed run replays them).
set -euo pipefail
STAGE=${1:?usage: exp5_powered.sh fixed|tune|gepa|abstain [OUT]}
OUT=${2:-runs/exp5}
SAAG=${SAAG_OPT:-saag-opt}
MODEL=${MODEL:-local}
SMALL=${SMALL:-local:qwen2.5-coder-0.5b}
LIMIT=${LIMIT:-320}
DATASET=bfcl:single_turn
tag() { echo "${1//[:\/@]/_}+${2//[:\/@]/_}"; }
run() {  # run BASE REVIEWER VARIANT evaluate-flags...
  local base=$1 reviewer=$2 variant=$3; shift 3
  ${LOCK:+flock "$LOCK"} $SAAG evaluate --base "$base" --reviewer "$reviewer" --dataset "$DATASET" \
    --split test --limit "$LIMIT" ${EXTRA:-} --runs-dir "$OUT/$(tag "$base" "$reviewer")/${DATASET//[:\/@]/_}/$variant" "$@"
}
case "$STAGE" in
  fixed)
    run "$MODEL" "$MODEL" r2-v2 --mechanism r2 --prompt reviewer@v2
    run "$MODEL" "$MODEL" gate+r2-v2 --mechanism gate+r2 --prompt reviewer@v2
    run "$MODEL" "$MODEL" saag+s3-v2 --mechanism saag+s3 --prompt reviewer@v2
    run "$SMALL" "$MODEL" r2-v2 --mechanism r2 --prompt reviewer@v2 ;;
  tune)
    ${LOCK:+flock "$LOCK"} $SAAG tune --space experiments/spaces/exp5-offline.toml --sampler grid \
      --test-limit "$LIMIT" ${EXTRA:-} --runs-dir "$OUT/tune" ;;
  gepa)
    ${LOCK:+flock "$LOCK"} $SAAG optimize --base "$MODEL" --reviewer "$MODEL" --reflection "$MODEL" \
      --prompt reviewer@v2 --mechanism r2 --dataset "$DATASET" --train-limit "${TRAIN:-40}" --val-limit "${VAL:-20}" \
      --test-limit "$LIMIT" --max-metric-calls "${CALLS:-80}" --accept equal --store "$OUT/prompt-store" ${EXTRA:-} \
      --runs-dir "$OUT/$(tag "$MODEL" "$MODEL")/${DATASET//[:\/@]/_}/gepa" ;;
  abstain)
    run "$MODEL" "$MODEL" saag+abstain --mechanism saag+abstain
    ${LOCK:+flock "$LOCK"} $SAAG evaluate --base "$MODEL" --reviewer "$MODEL" --dataset "$DATASET" --split test \
      --skip "$LIMIT" --limit "${FRESH:-320}" --mechanism saag+abstain ${EXTRA:-} \
      --runs-dir "$OUT/$(tag "$MODEL" "$MODEL")/${DATASET//[:\/@]/_}-fresh/saag+abstain" ;;
  *) echo "unknown stage $STAGE (fixed, tune, gepa or abstain)" >&2; exit 2 ;;
esac
