#!/usr/bin/env bash
# Experiment 4: experiments 1-3 with the papers' models, --base gpt-4o --reviewer gpt-5-mini (needs
# OPENAI_API_KEY; not run in this repository). Every run is capped with --max-cost (dollars per run);
# `--dry-run` in EXTRA prints the estimate instead. Data: shipped sets by default; set DATASET=bfcl:non_live
# (after `saag-opt datasets fetch bfcl`) for the paper's full BFCL table.
#
#   experiments/exp4_openai.sh [OUT]        env MAX_COST (default 10), BASE (gpt-4o), REVIEWER (gpt-5-mini)
# Then: python experiments/recompute.py exp4-1 --collect OUT/exp1 (and exp4-2, exp4-3 likewise).
set -euo pipefail
OUT=${1:-runs/exp4}
HERE=$(cd "$(dirname "$0")" && pwd)
BASE=${BASE:-gpt-4o}
REVIEWER=${REVIEWER:-gpt-5-mini}
export EXTRA="--max-cost ${MAX_COST:-10} ${EXTRA:-}"
"$HERE/exp1_saag_repair.sh" "$BASE" 60 "$OUT/exp1"
"$HERE/exp2_reviewer.sh" "$BASE" "$REVIEWER" 39 "$OUT/exp2"
TEST=${TEST:-39} "$HERE/exp3_gepa.sh" "$BASE" "$REVIEWER" "$OUT/exp3"
