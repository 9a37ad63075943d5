#!/usr/bin/env bash
# Collects the seed corpus (data/corpus/) with the project's own `tlm collect` on a local Ray:
# every task of the six zoo models at the paper's shapes (batch 1, 224x224 images, sequence 128),
# MetaSchedule's evolutionary search at 64 trials per task, then replay-trace samples (random
# valid programs) for diversity. Resumable: a unit (task, hardware, tuner, trials) already done
# is skipped, so run it again after a stop, on any machine (its CPU gives its own hardware key).
# Stop it with Ctrl-C in a terminal, or with `kill` (SIGTERM) when it runs in the background:
# background jobs of a shell ignore SIGINT. Every measured batch is already durable.
#
# Usage: scripts/collect_seed.sh [CORPUS_DIR]        (default data/corpus; log in work/seed-logs/)
# Environment: MODELS (the order models are taken in), STRATEGIES (default "evolutionary
# replay-trace"), EVO_TRIALS (64), REPLAY_TRIALS (128), REPLAY_MAX_MFLOP (unset: every task; e.g.
# 1000 leaves the multi-GFLOP LM heads, whose random samples take an hour per task, to the search).
set -uo pipefail
cd "$(dirname "$0")/.."
CORPUS=${1:-data/corpus}
MODELS=${MODELS:-"resnet50 mobilenetv2 efficientnet_b0 bert_base gpt2 llama7b_layer"}
EVO_TRIALS=${EVO_TRIALS:-64}
REPLAY_TRIALS=${REPLAY_TRIALS:-128}
STRATEGIES=${STRATEGIES:-"evolutionary replay-trace"}
LOGS=work/seed-logs
mkdir -p "$LOGS" "$CORPUS"
export RAY_USAGE_STATS_ENABLED=0  # Ray token authentication: cluster.ray_session.AUTH_MODE
status=0
for strategy in $STRATEGIES; do
  trials=$EVO_TRIALS
  cap=()
  if [[ $strategy == replay-trace ]]; then
    trials=$REPLAY_TRIALS
    [[ -n ${REPLAY_MAX_MFLOP:-} ]] && cap=(--max-mflop "$REPLAY_MAX_MFLOP")
  fi
  for model in $MODELS; do
    echo "== $(date -u +%FT%TZ) $model $strategy $trials trials" | tee -a "$LOGS/seed.log"
    .venv/bin/tlm collect --model "$model" --strategy "$strategy" --trials "$trials" \
      --seq-len 128 --corpus "$CORPUS" "${cap[@]}" --no-progress >>"$LOGS/$model-$strategy.log" 2>&1 || status=1
    tail -n 3 "$LOGS/$model-$strategy.log" | tee -a "$LOGS/seed.log"
  done
done
exit $status
