#!/usr/bin/env bash
# The CUDA path on a lent GPU machine, in one run of about 8 minutes: a small CUDA corpus, the
# shipped pretrained model fine-tuned for that GPU's key, and the held-out tasks generated and
# measured against MetaSchedule at the same budget. Every candidate is built, run and checked on the GPU.
#
# Usage (on the GPU machine, from the repository root, after `bash scripts/setup.sh`):
#   OUT=${OUT:-work/gpu} scripts/gpu_path.sh
# Environment: OUT (where the corpus, model and gpu.json go), TASKS (ResNet-50 tasks collected, 3),
# TRIALS (evolutionary trials per task, 32), K (TLM candidates = search trials on held-out tasks, 8),
# JUDGED (held-out MobileNetV2 tasks, 2), STEPS (fine-tuning steps, 60). Each step is resumable.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-work/gpu}; TASKS=${TASKS:-3}; TRIALS=${TRIALS:-32}; K=${K:-8}; JUDGED=${JUDGED:-2}; STEPS=${STEPS:-60}
export RAY_USAGE_STATS_ENABLED=0  # Ray token authentication: cluster.ray_session.AUTH_MODE
T=.venv/bin/tlm; PY=.venv/bin/python; C=$OUT/corpus
KEY=$($PY -c "from collectors.hardware import detect_hardware; print(detect_hardware('cuda').key)")
echo "== $(date -u +%T) $KEY: collect $TASKS ResNet-50 tasks x $TRIALS trials"
$T collect --model resnet50 --device cuda --tasks "$TASKS" --trials "$TRIALS" --no-ray --corpus "$C" --no-progress
echo "== $(date -u +%T) fine-tune the shipped pretrained model for $KEY ($STEPS steps)"
[[ -f $OUT/sets/finetune.parquet ]] || $T dataset build --corpus "$C" --out "$OUT/sets" --per-sketch 0 --top-k 4 --hardware "$KEY"
[[ -f $OUT/models/tlm-gpu/model.safetensors ]] || $T train --stage finetune --hardware "$KEY" --base shipped \
  --dataset "$OUT/sets" --workers 1 --gpu --max-steps "$STEPS" --batch-size 8 --out "$OUT/models" --name tlm-gpu --corpus "$C"
echo "== $(date -u +%T) held-out MobileNetV2: the model's $K candidates vs MetaSchedule@$K"
$T collect --model mobilenetv2 --device cuda --tasks "$JUDGED" --strategy tlm --trials "$K" \
  --tlm-model "$OUT/models/tlm-gpu" --corpus "$C" --no-progress
$T collect --model mobilenetv2 --device cuda --tasks "$JUDGED" --trials "$K" --trials-per-iter "$K" --no-ray \
  --corpus "$C" --no-progress
$PY -m bench.gpu "$C" "$KEY" --out "$OUT/gpu.json"
echo "== $(date -u +%T) done: $OUT/gpu.json"
