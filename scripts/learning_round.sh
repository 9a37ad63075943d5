#!/usr/bin/env bash
# One round of issue 32's expert iteration on this machine's hardware key, in resumable steps:
# every step skips what it already did (cached references, finished collection units), so the
# same command, run again in a later session, goes on where it stopped. Meant for the background:
# measurements wait for a quiet host (TLM_BUSY_WAIT_S, collectors/host_load.py), and a benchmark
# started beside it refuses to judge.
#
#   ROUND=1 MODEL=work/ei/seed-model scripts/learning_round.sh      # logs: work/ei/round-<ROUND>.log
#
#   0. a working corpus (a copy of data/corpus) and a seeding model: MODEL, else the key's own
#      shipped model (models/tlm-small-<key without cpu->), else the shipped Rocket Lake model with
#      this key's shipped cost model beside it (models/cost-models/<key>); a model without a cost
#      model of its own ranks with the key's shipped one (tlm.service.catalog.ranker_for)
#   1. MetaSchedule@256 references of the fixed training sample (bench.references --set train; the
#      sample is pinned in bench/results/training_sample.json when first drawn)
#   2. the teacher and the seeding model (the student) before the round (bench.learning teacher
#      and student --round ROUND-1: its fit on its training workloads), unless judged already
#   3. the round: the model-seeded search (64 trials) on the sample's workloads (tlm collect
#      --workloads), then the teacher after it (bench.learning teacher --round ROUND: judged on the
#      sample, so final once the sample is searched; hours sooner than after every workload)
#   4. the seeded search on every other training workload of the key (ResNet-50's 43 and
#      EfficientNet-B0's 90: the zoo's training CNNs the corpus measures on every key; ~10 min each)
# Fine-tuning round ROUND+1 on the new best programs and judging the student follow (issue 32):
#   tlm dataset build --corpus CORPUS --hardware KEY --top-k 1 --per-sketch 0 --rules --measured-repeats 2 --out SETS
#   tlm train --stage finetune --hardware KEY --base models/tlm-small-pretrain --dataset SETS --epochs 16 --lr 1e-3 ...
set -euo pipefail
cd "$(dirname "$0")/.."
ROUND=${ROUND:-1}
TASKS=${TASKS:-16}
WORK=${WORK:-work/ei}
CORPUS=${CORPUS:-$WORK/corpus}
MODELS=${MODELS:-resnet50 efficientnet_b0}
PY=${PY:-.venv/bin/python}
export TLM_BUSY_WAIT_S=${TLM_BUSY_WAIT_S:-3600}
mkdir -p "$WORK"
exec > >(tee -a "$WORK/round-$ROUND.log") 2>&1
echo "== round $ROUND, $(date -u +%FT%TZ), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
KEY=$($PY -c "from collectors.hardware import detect_hardware; print(detect_hardware('cpu').key)")
if [ ! -d "$CORPUS" ]; then
  cp -r data/corpus "$CORPUS"
fi
if [ -z "${MODEL:-}" ] && [ -f "models/tlm-small-${KEY#cpu-}/model.safetensors" ]; then
  MODEL=models/tlm-small-${KEY#cpu-}
fi
if [ -z "${MODEL:-}" ]; then
  MODEL=$WORK/seed-model
  if [ ! -d "$MODEL" ]; then
    cp -r models/tlm-small-rocketlake-2c "$MODEL"
    if [ -d "models/cost-models/$KEY" ]; then cp "models/cost-models/$KEY"/cost_model.* "$MODEL"/; fi
  fi
fi
echo "key $KEY, corpus $CORPUS, seeding model $MODEL"
# a benchmark refuses to judge beside another measuring job: wait until it is alone
wait_alone() {
  until $PY -c 'import sys; from collectors.host_load import other_measuring_jobs as o; sys.exit(bool(o()))'; do
    sleep 30
  done
}
wait_alone
$PY -m bench.references --set train --tasks "$TASKS" --trials 256 --corpus "$CORPUS"
wait_alone
$PY -m bench.learning teacher --round $((ROUND - 1)) --corpus "$CORPUS" --tasks "$TASKS" --if-missing
wait_alone
$PY -m bench.learning student --round $((ROUND - 1)) --model "$MODEL" --corpus "$CORPUS" --tasks "$TASKS" --if-missing
seeded() {
  for m in $MODELS; do
    $PY -m cluster.cli collect --no-ray --model "$m" --strategy tlm-seeded --trials 64 --tlm-model "$MODEL" \
        --corpus "$CORPUS" --no-progress "$@"
  done
}
# the judged sample's workloads first: the round's teacher is final once they are searched
for m in $MODELS; do
  # the sample's workloads that are tasks of model m, as the corpus's index records them
  SAMPLE=$($PY - "$KEY" "$m" "$CORPUS" <<'PY'
import json, sys
from storage import Corpus
key, model, corpus = sys.argv[1:]
sample = set(json.load(open("bench/results/training_sample.json"))[key])
with Corpus.open(corpus) as c:
    print(",".join(sorted(w["workload_key"] for w in c.workloads() if w["workload_key"] in sample and model in (w.get("models") or {}))))
PY
)
  if [ -n "$SAMPLE" ]; then MODELS=$m seeded --workloads "$SAMPLE"; fi
done
wait_alone
$PY -m bench.learning teacher --round "$ROUND" --corpus "$CORPUS" --tasks "$TASKS" --if-missing
echo "== round $ROUND: the teacher judged, $(date -u +%FT%TZ); the other training workloads next (the student's rows)"
seeded
echo "== round $ROUND done, $(date -u +%FT%TZ)"
