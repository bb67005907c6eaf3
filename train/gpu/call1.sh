#!/bin/bash
# First GPU call of the v2 run (see train/README.md): build the data on the GPU machine from its
# own Python installation, start the row producer and training in their own sessions (they
# outlive this call while the machine stays held), evaluate v1 on the held-out edits while
# training runs, and return logs plus a fallback checkpoint through $OUT.
# Run from the repository root with the scripts in .devtrain/ (train/, tok/, whl/).
# TRAIN_END: unix time at which training must end (the second call then evaluates).
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
CALL_SECONDS=${CALL_SECONDS:-555}
REPO=$PWD
D=$REPO/.devtrain
W=${W:-/tmp/w}
mkdir -p $W
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target ${SITE:-/tmp/site} $D/whl/*.whl || echo "fla wheels not installed"
export PYTHONPATH=${SITE:-/tmp/site}:$REPO/app
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv
nproc
python3 $D/train/build_data.py --out $W/corpus
setsid nohup python3 $D/train/make_rows.py --corpus $W/corpus/train.jsonl.gz --tok $D/tok --out $W/rows \
    --seq-len 16384 --max-tokens 400e6 --workers ${WORKERS:-13} > $W/producer.log 2>&1 < /dev/null &
echo $! > $W/producer.pid
python3 $D/train/file_tasks.py --corpus $W/corpus/heldout.jsonl.gz --out $W/tasks.jsonl.gz --per-kind 20
setsid nohup python3 $D/train/train.py --rows $W/rows --tok $D/tok --out $W/run --deadline $TRAIN_END \
    --batch ${BATCH:-8} --lr ${LR:-3e-3} ${EXTRA_TRAIN_ARGS:-} > $W/train.log 2>&1 < /dev/null &
sleep 45
tail -5 $W/train.log
# v1 on the same held-out edits (and bpb with v1's 1024-token context), while training runs
timeout $(( CALL_SECONDS - 60 - ($(date +%s) - T0) )) python3 $D/train/evaluate.py --model $REPO/app/strata/models/strata-tiny \
    --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz --out $W/ev_v1 --per-kind 20 \
    --bpb-window 1024 --chats 6 --max-time ${V1_MAX_TIME:-240} ${EXTRA_EVAL_ARGS:-} > $W/ev_v1.log 2>&1
tail -4 $W/ev_v1.log
while [ $(( $(date +%s) - T0 )) -lt $(( CALL_SECONDS - 25 )) ]; do sleep 5; done
tail -8 $W/train.log; tail -2 $W/producer.log
cp $W/run/ckpt_*.safetensors $OUT/ 2>/dev/null
cp $W/run/config.json $OUT/ 2>/dev/null
tar czf $OUT/logs1.tgz -C $W train.log producer.log ev_v1.log ev_v1 rows/producer.json run/loss.csv run/run.json corpus/recipe.json tasks.jsonl.gz 2>/dev/null
ls -la $OUT
