#!/usr/bin/env bash
# Experiment 8 (pre-registered in docs/exp8-protocol.md): can GEPA with the edit proposer improve the embedded
# 1.5B reviewer, plain or SAAG-informed (--proposer add, with rewrite as the control), over its seed and over saag+abstain?
#
#   experiments/exp8_optimizer.sh STAGE [OUT]
#     STAGE  seeds    base, saag+abstain, plain r2 and informed r2 (reviewer@v2) on the primary test sample
#            gepa     the four GEPA arms (add / rewrite proposer x plain / informed), each: optimize on train/val
#                     from reviewer@v2 with the same budget, then its best evaluated on the primary test sample
#            whole    the seeds stage on the whole test split (secondary, exploratory)
#            confirm  only the runs the two confirmatory questions read, in order: abstain, informed r2,
#                     add-informed (optimize, then its best on the primary sample)
#            explore  the rest of the arms: plain r2, rewrite-informed, add-plain, rewrite-plain
#     OUT    default runs/exp8
#   env SAAG_OPT (the command), LOCK (flock file held per run), MODEL (default local), EXTRA (more flags)
# Every run is resumable (evaluate --resume DIR / optimize --resume DIR); evaluate works round-robin over the
# categories, so a run stopped early holds a stratified sample (collect it with --partial).
# Then: python experiments/recompute.py exp8 --collect OUT [--partial]
set -euo pipefail
STAGE=${1:?usage: exp8_optimizer.sh seeds|gepa|whole|confirm|explore [OUT]}
OUT=${2:-runs/exp8}
SAAG=${SAAG_OPT:-saag-opt}
MODEL=${MODEL:-local}
DATASET=bfcl:single_turn
GROUP="$OUT/${MODEL//[:\/@]/_}+${MODEL//[:\/@]/_}"
evaluate() {  # evaluate SAMPLE VARIANT flags...
  local sample=$1 variant=$2; shift 2
  local where=(--split test --skip 640 --limit 286)
  [ "$sample" = whole ] && where=(--split test)
  ${LOCK:+flock "$LOCK"} $SAAG evaluate --base "$MODEL" --reviewer "$MODEL" --dataset "$DATASET" "${where[@]}" \
    ${EXTRA:-} --runs-dir "$GROUP/${DATASET//[:\/@]/_}-$sample/$variant" "$@"
}
seeds() {
  evaluate "$1" abstain --mechanism saag+abstain
  evaluate "$1" informed-v2 --mechanism r2 --prompt reviewer@v2 --saag-informed
  evaluate "$1" plain-v2 --mechanism r2 --prompt reviewer@v2
}
gepa() {  # gepa PROPOSER INFORMED(yes|no)
  local name="$1-$([ "$2" = yes ] && echo informed || echo plain)"
  local flags=(--proposer "$1")
  [ "$2" = yes ] && flags+=(--saag-informed)
  ${LOCK:+flock "$LOCK"} $SAAG optimize --base "$MODEL" --reviewer "$MODEL" --reflection "$MODEL" --prompt reviewer@v2 \
    --mechanism r2 --dataset "$DATASET" --train-limit 40 --val-limit 20 --max-metric-calls 120 --minibatch 3 \
    --accept equal --seed 0 --no-test "${flags[@]}" --store "$OUT/prompt-store-$name" ${EXTRA:-} \
    --runs-dir "$GROUP/${DATASET//[:\/@]/_}-gepa/$name"
  local best
  best=$($SAAG prompts show reviewer@best --store "$OUT/prompt-store-$name" --format json | python3 -c \
    'import json,sys; print(json.load(sys.stdin)["version"])')
  evaluate primary "$name-$best" --mechanism r2 --prompt "reviewer@$best" --store "$OUT/prompt-store-$name" \
    "${flags[@]:2}"
}
case "$STAGE" in
  seeds) seeds primary ;;
  whole) seeds whole ;;
  gepa)
    gepa add yes
    gepa rewrite yes
    gepa add no
    gepa rewrite no ;;
  confirm)
    evaluate primary abstain --mechanism saag+abstain
    evaluate primary informed-v2 --mechanism r2 --prompt reviewer@v2 --saag-informed
    gepa add yes ;;
  explore)
    evaluate primary plain-v2 --mechanism r2 --prompt reviewer@v2
    gepa rewrite yes
    gepa add no
    gepa rewrite no ;;
  *) echo "unknown stage $STAGE (seeds, gepa, whole, confirm or explore)" >&2; exit 2 ;;
esac
