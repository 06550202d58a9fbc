#!/usr/bin/env bash
# Experiment 3 (GEPA with a real budget): optimize the reviewer prompt on train (propose) and val
# (select) with at least 60 metric calls and 20 validation examples, then seed vs best on the held-out
# test split (McNemar, CI). The run ends with the seed-vs-best comparison (its rows are in the optimize
# run's records.jsonl) and leaves the new version in a private prompt store under OUT.
#
#   experiments/exp3_gepa.sh [MODEL] [REVIEWER] [OUT]
#     MODEL  base agent (default local)   REVIEWER  reviewer and reflection LM (default MODEL)   OUT  default runs/exp3
#   env SAAG_OPT (the command), LOCK (flock file), EXTRA (more optimize flags, e.g. --max-cost 20),
#       CALLS (metric calls, default 60), TRAIN (default 40), VAL (default 20), TEST (default 39 = the whole
#       shipped:bfcl test split), DATASET (default shipped:bfcl), PROMPT (seed, default reviewer@v2),
#       MECHANISM (default r2)
#   EXTRA="--saag-informed" evolves the prompt of the SAAG-informed reviewer (it sees the gold-free SAAG
#   report of each call, in GEPA's rollouts and on test; add --grounding paper for the paper's stage 3).
#   Those runs go to .../gepa-informed/ (plain ones to .../gepa/), and their saved versions record
#   saag_report, so evaluate warns when such a prompt is run without --saag-informed.
# Then: python experiments/recompute.py exp3 --collect OUT
set -euo pipefail
MODEL=${1:-local}
REVIEWER=${2:-$MODEL}
OUT=${3:-runs/exp3}
SAAG=${SAAG_OPT:-saag-opt}
DATASET=${DATASET:-shipped:bfcl}
TAG="${MODEL//[:\/@]/_}+${REVIEWER//[:\/@]/_}"
case " ${EXTRA:-} " in *" --saag-informed "*) KIND=gepa-informed ;; *) KIND=gepa ;; esac
${LOCK:+flock "$LOCK"} $SAAG optimize --base "$MODEL" --reviewer "$REVIEWER" --reflection "$REVIEWER" \
  --prompt "${PROMPT:-reviewer@v2}" --mechanism "${MECHANISM:-r2}" --dataset "$DATASET" \
  --train-limit "${TRAIN:-40}" --val-limit "${VAL:-20}" --test-limit "${TEST:-39}" \
  --max-metric-calls "${CALLS:-60}" --accept equal --store "$OUT/prompt-store" ${EXTRA:-} \
  --runs-dir "$OUT/$TAG/${DATASET//[:\/@]/_}/$KIND"
