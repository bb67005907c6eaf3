#!/bin/bash
# The v3 run in ONE GPU call (train/README.md, "v3"): build the data, start the row producer,
# continue training the shipped model (--init-from, loss on the answers only) until TRAIN_END,
# return the checkpoint at once, then evaluate it with transformers in the time left.
# Run from the repository root with the scripts in .devtrain/ (train/, tok/).
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
CALL_SECONDS=${CALL_SECONDS:-580}
REPO=$PWD
D=$REPO/.devtrain
W=${W:-/tmp/w}
SEQ=${SEQ:-8192}
MAX_CHARS=${MAX_CHARS:-15000}
mkdir -p $W $OUT
export PYTHONPATH=$REPO/app
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>/dev/null
python3 $D/train/build_data.py --out $W/corpus > $W/build.log 2>&1 || { cat $W/build.log; exit 2; }
tail -1 $W/build.log
echo "data built at +$(( $(date +%s) - T0 ))s"
setsid nohup python3 $D/train/make_rows.py --corpus $W/corpus/train.jsonl.gz --tok $D/tok --out $W/rows \
    --seq-len $SEQ --max-chars $MAX_CHARS --max-tokens ${MAX_TOKENS:-400e6} --workers ${WORKERS:-11} \
    > $W/producer.log 2>&1 < /dev/null &
echo $! > $W/producer.pid
setsid nohup python3 $D/train/train.py --rows $W/rows --tok $D/tok --out $W/run --deadline $TRAIN_END \
    --init-from $REPO/app/strata/models/strata-tiny --loss-on answer --lr ${LR:-1e-3} --warmup ${WARMUP:-30} ${TRAIN_ARGS:-} \
    >> $W/train.log 2>&1 < /dev/null &
echo $! > $W/train.pid
python3 $D/train/file_tasks.py --corpus $W/corpus/heldout.jsonl.gz --out $W/tasks.jsonl.gz --per-kind 20 \
    > $W/tasks.log 2>&1 || tail -3 $W/tasks.log
cp $W/corpus/heldout.jsonl.gz $W/tasks.jsonl.gz $OUT/ 2>/dev/null
while [ ! -f $W/run/DONE ]; do
  sleep 3
  if ! kill -0 $(cat $W/train.pid) 2>/dev/null; then echo "training exited"; break; fi
  if [ $(( $(date +%s) - T0 )) -gt $(( CALL_SECONDS - 60 )) ]; then echo "training not done in time"; break; fi
done
echo "training done at +$(( $(date +%s) - T0 ))s"
grep -E "gdn:|probe|peak|initialised|step (1|2|3|10|50) |Error|error" $W/train.log | tail -12
tail -3 $W/train.log
kill $(cat $W/producer.pid) 2>/dev/null
cp $W/run/ckpt_*.safetensors $W/run/config.json $OUT/ 2>/dev/null
LEFT=$(( CALL_SECONDS - ($(date +%s) - T0) ))
timeout $(( LEFT - 20 )) python3 $D/train/evaluate.py --ckpt $W/run --tok $D/tok \
    --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz --out $W/ev_v3 --per-kind 20 \
    --bpb-window 8192 --bpb-files 100 --chats 8 --gen-batch 200 --max-time $(( LEFT - 75 )) ${EVAL_ARGS:-} \
    > $W/ev_v3.log 2>&1
tail -4 $W/ev_v3.log
tar czf $OUT/logs.tgz -C $W train.log producer.log build.log tasks.log ev_v3.log ev_v3 rows/producer.json \
    run/loss.csv run/run.json run/train_log.txt corpus/recipe.json 2>/dev/null
ls -la $OUT
echo "call ends at +$(( $(date +%s) - T0 ))s"
