#!/usr/bin/env bash
# Experiment 1 (SAAG paper, sub-4B setting): base alone vs `binary` vs `saag` self-repair on the
# registry-size benchmark with 5, 10 and 15 confusable tools. Each `evaluate` run holds the base-alone
# condition and one repair mechanism; the base predictions are cached, so the second run re-uses them.
#
#   experiments/exp1_saag_repair.sh [MODEL] [LIMIT] [OUT]
#     MODEL  local:qwen2.5-coder-0.5b (default), local, gpt-4o, openai/<m>@URL
#     LIMIT  examples per registry size (--split all: each size has 60, the same questions)   default 20
#     OUT    where the run directories go                                                     default runs/exp1
#   env SAAG_OPT    the command (default saag-opt)
#       SIZES       registry sizes in run order (default "5 15 10": the extremes first)
#       GROUNDINGS  SAAG stage-3 modes that trigger the repair (default "paper calibrated"; each gets
#                   its own run folder OUT/<model>-<mode>/)
#       LOCK        a flock file: each registry size (all its runs) holds it
#       EXTRA       more evaluate flags (e.g. --max-cost 5)
# Then: python experiments/recompute.py exp1 --collect OUT   (writes experiments/results/exp1.*)
set -euo pipefail
MODEL=${1:-local:qwen2.5-coder-0.5b}
LIMIT=${2:-20}
OUT=${3:-runs/exp1}
SAAG=${SAAG_OPT:-saag-opt}
TAG=${MODEL//[:\/@]/_}
run_size() {
  local k=$1 g m
  for g in ${GROUNDINGS:-paper calibrated}; do
    for m in binary saag; do
      $SAAG evaluate --base "$MODEL" --mechanism "$m" --max-repairs 5 --grounding "$g" \
        --dataset "shipped:registry-$k" --split all --limit "$LIMIT" ${EXTRA:-} \
        --runs-dir "$OUT/$TAG-$g/registry-$k/$m"
    done
  done
}
for k in ${SIZES:-5 15 10}; do
  echo "=== registry-$k start $(date -u +%FT%TZ) $(uptime)"
  if [ -n "${LOCK:-}" ]; then
    exec 9>"$LOCK"; flock 9; run_size "$k"; flock -u 9; exec 9>&-
  else
    run_size "$k"
  fi
  echo "=== registry-$k end $(date -u +%FT%TZ) $(uptime)"
done
