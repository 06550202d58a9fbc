#!/usr/bin/env bash
# Experiment 2 (the reviewer paper's BFCL table, plus two mechanisms no paper has): base alone vs `r2`
# with reviewer v1 and v2, `r2` with the gold-free SAAG report shown to the reviewer (--saag-informed),
# and `gate+r2` (the reviewer is called only when the SAAG cascade does not pass). Per category
# (simple, multiple, parallel, parallel_multiple, irrelevance) with help, harm, McNemar p and CI, and
# the latency overhead over the base alone. Add the best GEPA version with PROMPTS="reviewer@v1 reviewer@v2 reviewer@best".
#
#   experiments/exp2_reviewer.sh [MODEL] [REVIEWER] [LIMIT] [OUT]
#     MODEL     base agent (default local = qwen2.5-coder-1.5b)    REVIEWER  default: MODEL
#     LIMIT     test-split examples, round-robin over the 5 categories (default 30; the split has 39)
#     OUT       default runs/exp2
#   env SAAG_OPT (the command), LOCK (flock file held per run), EXTRA (more flags, e.g. --max-cost 5 or
#       --grounding paper: the SAAG mode behind --saag-informed and the gate; default calibrated),
#       DATASET (default shipped:bfcl; bfcl:non_live with the full BFCL), PROMPTS (r2 prompts to compare)
# Latency is only meaningful on a machine nothing else is using (the embedded server shares the CPU).
# Then: python experiments/recompute.py exp2 --collect OUT
set -euo pipefail
MODEL=${1:-local}
REVIEWER=${2:-$MODEL}
LIMIT=${3:-30}
OUT=${4:-runs/exp2}
SAAG=${SAAG_OPT:-saag-opt}
DATASET=${DATASET:-shipped:bfcl}
TAG="${MODEL//[:\/@]/_}+${REVIEWER//[:\/@]/_}"
DIR="$OUT/$TAG/${DATASET//[:\/@]/_}"
run() {  # run VARIANT evaluate-flags...
  local variant=$1; shift
  ${LOCK:+flock "$LOCK"} $SAAG evaluate --base "$MODEL" --reviewer "$REVIEWER" --dataset "$DATASET" \
    --split test --limit "$LIMIT" ${EXTRA:-} --runs-dir "$DIR/$variant" "$@"
}
for p in ${PROMPTS:-reviewer@v1 reviewer@v2}; do
  run "r2-${p#reviewer@}" --mechanism r2 --prompt "$p"
done
run r2-v2-saag-informed --mechanism r2 --prompt reviewer@v2 --saag-informed
run gate+r2-v2 --mechanism gate+r2 --prompt reviewer@v2
