#!/usr/bin/env bash
# Experiment 7 (the reviewer paper's tau2-bench table): base alone vs `rN` vs `gate+rN` inside tau2's own
# orchestrator, user simulator and evaluator, per domain. Every tentative tool call is reviewed before it
# runs (a withheld call never enters tau2's trajectory); tau2's reward judges each task trial. Per task trial
# help, harm, McNemar p and CI against the base of the same run (same trial seeds), pass^1..k (tau2's),
# steps withheld / revised, LM seconds per trial and per step; recompute puts the paper's per-domain table
# (gpt-4o baseline and 4o-r5-4o-v1, average of 3 runs; 2.4x latency per episode) beside ours.
#
#   experiments/exp7_tau2.sh [SETTING] [OUT]
#     SETTING  local  (default) MODEL (default local = qwen2.5-coder-1.5b) as base agent, reviewer and tau2's
#                     user simulator; r2 and gate+r2 with reviewer@v2; 1 trial; LIMIT 10 test tasks per domain
#                     (mock: all 9); MAX_STEPS 30 (the 1.5B rarely finishes a task, so every run would
#                     otherwise spend tau2's 100 steps; on mock, 2 cores: ~5 s per agent or user message,
#                     ~9 s per review);
#                     DOMAINS "mock airline retail"
#              paper  the paper's OpenAI setting (its 4o-r5-4o-v1 row): gpt-4o base, reviewer and user
#                     simulator; r5 and gate+r5 with reviewer@v1; 3 trials; LIMIT 10 test tasks per domain
#                     (LIMIT= for the whole test split: airline 20, retail 40, telecom 40; mock has 9);
#                     DOMAINS "mock airline retail telecom"; every run capped with --max-cost MAX_COST
#                     (dollars per run, default 50). Needs OPENAI_API_KEY. Plan it first, nothing is sent:
#                       EXTRA=--dry-run experiments/exp7_tau2.sh paper
#                     (each run's expected calls, tokens and dollars for agent, reviewer and user), then
#                     run it without --dry-run.
#     OUT      default runs/exp7
#   env MODEL / REVIEWER / USER_MODEL, ROUNDS (the N of rN), PROMPT, TRIALS, LIMIT, DOMAINS, MAX_COST (paper),
#       MAX_STEPS (tau2's max_steps; paper: tau2's 100),
#       SPLIT (default test), SAAG_OPT (the command), LOCK (flock file held per run), EXTRA (more flags),
#       SAAG_OPT_LOCAL_CTX (the embedded server's context, exported; default 16384: tau2's policy and tool
#       docs are 4-8k tokens per step before the conversation)
# Each run is resumable (evaluate --resume DIR, per task trial; a capped run stops cleanly: collect it with
# --partial). Then: python experiments/recompute.py exp7 --collect OUT [--partial]
# On a new machine, first: python experiments/recompute.py exp7 --restore-base-cache (the base agent's
#   first answers the collected runs computed, so an added condition or a resumed run replays them).
set -euo pipefail
SETTING=${1:-local}
OUT=${2:-runs/exp7}
SAAG=${SAAG_OPT:-saag-opt}
case "$SETTING" in
  local)
    MODEL=${MODEL:-local} ROUNDS=${ROUNDS:-2} PROMPT=${PROMPT:-reviewer@v2} TRIALS=${TRIALS:-1}
    LIMIT=${LIMIT-10} DOMAINS=${DOMAINS:-mock airline retail} CAP= MAX_STEPS=${MAX_STEPS:-30} ;;
  paper)
    MODEL=${MODEL:-gpt-4o} ROUNDS=${ROUNDS:-5} PROMPT=${PROMPT:-reviewer@v1} TRIALS=${TRIALS:-3}
    LIMIT=${LIMIT-10} DOMAINS=${DOMAINS:-mock airline retail telecom} CAP="--max-cost ${MAX_COST:-50}" ;;
  *) echo "unknown setting $SETTING (local or paper)" >&2; exit 2 ;;
esac
REVIEWER=${REVIEWER:-$MODEL}
USER_MODEL=${USER_MODEL:-$MODEL}
export SAAG_OPT_LOCAL_CTX=${SAAG_OPT_LOCAL_CTX:-16384}
TAG="${MODEL//[:\/@]/_}+${REVIEWER//[:\/@]/_}"
run() {  # run DOMAIN VARIANT evaluate-flags...
  local domain=$1 variant=$2; shift 2
  ${LOCK:+flock "$LOCK"} $SAAG evaluate --base "$MODEL" --reviewer "$REVIEWER" --user-model "$USER_MODEL" \
    --dataset "tau2:$domain" --split "${SPLIT:-test}" ${LIMIT:+--limit "$LIMIT"} --tau2-trials "$TRIALS" $CAP \
    ${MAX_STEPS:+--max-steps "$MAX_STEPS"} ${EXTRA:-} \
    --runs-dir "$OUT/$TAG/tau2_$domain/$variant" "$@"
}
for domain in $DOMAINS; do
  run "$domain" "r$ROUNDS-${PROMPT#reviewer@}" --mechanism "r$ROUNDS" --prompt "$PROMPT"
  run "$domain" "gate+r$ROUNDS-${PROMPT#reviewer@}" --mechanism "gate+r$ROUNDS" --prompt "$PROMPT"
done
