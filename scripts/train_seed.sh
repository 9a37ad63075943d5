#!/usr/bin/env bash
# Trains the shipped `small` TLM on the seed corpus (data/corpus): sentence sets with the zoo's
# held-out models held out whole (collectors.zoo.HELD_OUT_MODELS: MobileNetV2, a CNN family, and
# BERT-base, a transformer family; a workload they share with another model is held out too), a pretraining run on sampled programs of
# every task, then a fine-tune on this hardware's fastest measured schedules. Both go to
# models/<name>/ (safetensors, tokenizer, tlm_model.json), and the fine-tuned model's cost model
# (cost_model.tar: MetaSchedule's XGBoost model trained on the key's records). Resumable: a stopped step reruns
# with the same --name and continues from its newest checkpoint; a finished step is skipped.
#
# Usage: scripts/train_seed.sh [HARDWARE_KEY]   (default: the one key of data/corpus)
# Environment: PER_SKETCH (48), PRE_EPOCHS (3), FT_EPOCHS (4), WORKERS (2), HELD_OUT (comma-separated
# models; default the zoo's held-out models), EVAL_EVERY (600
# pretraining steps between held-out evaluations: one costs ~70 s here), QUALITY_TASKS (8:
# held-out tasks whose greedy schedules are measured against the corpus's best after the fine-tune).
set -euo pipefail
cd "$(dirname "$0")/.."
CORPUS=data/corpus
SETS=work/sets-seed
PER_SKETCH=${PER_SKETCH:-48}
PRE_EPOCHS=${PRE_EPOCHS:-3}
FT_EPOCHS=${FT_EPOCHS:-4}
WORKERS=${WORKERS:-2}
KEY=${1:-$(.venv/bin/tlm corpus stats --corpus $CORPUS --json | .venv/bin/python -c 'import json,sys; print(*json.load(sys.stdin)["by_hardware"])')}
PRE=tlm-small-pretrain
FT=tlm-small-${KEY#cpu-}
export RAY_USAGE_STATS_ENABLED=0  # Ray token authentication: cluster.ray_session.AUTH_MODE
mkdir -p work
if [[ ! -f $SETS/finetune.parquet ]]; then
  .venv/bin/tlm dataset build --corpus $CORPUS --out $SETS --per-sketch "$PER_SKETCH" --top-k 4 \
    ${HELD_OUT:+--held-out "$HELD_OUT"}
fi
[[ -f models/$PRE/model.safetensors ]] || .venv/bin/tlm train --stage pretrain --dataset $SETS --preset small \
  --workers "$WORKERS" --epochs "$PRE_EPOCHS" --eval-every "${EVAL_EVERY:-600}" --out models --name $PRE --no-register
[[ -f models/$FT/model.safetensors ]] || .venv/bin/tlm train --stage finetune --hardware "$KEY" --base models/$PRE \
  --dataset $SETS --workers "$WORKERS" --epochs "$FT_EPOCHS" --out models --name "$FT" --no-register \
  --corpus $CORPUS --quality-tasks "${QUALITY_TASKS:-8}"
# the cost model that ranks the fine-tuned model's candidates (held-out models left out, as above)
[[ -f models/$FT/cost_model.tar ]] || .venv/bin/tlm cost-model fit --corpus $CORPUS --hardware "$KEY" \
  --out models/$FT ${HELD_OUT:+--held-out "$HELD_OUT"}
rm -rf models/.train-runs
echo "models/$PRE and models/$FT are ready"
