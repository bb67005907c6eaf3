#!/bin/bash
# Second GPU call: wait for training (started by call1.sh) to end, evaluate the checkpoint on the
# held-out edits / bpb / chat, and return checkpoint, evaluation and logs through $OUT.
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
CALL_SECONDS=${CALL_SECONDS:-560}
REPO=$PWD
D=$REPO/.devtrain
W=${W:-/tmp/w}
export PYTHONPATH=${SITE:-/tmp/site}:$REPO/app
if [ ! -d $W/run ]; then echo "no training on this machine (a fresh one?)"; exit 3; fi
while [ ! -f $W/run/DONE ]; do
  sleep 5
  if [ $(( $(date +%s) - T0 )) -gt $(( CALL_SECONDS - 200 )) ]; then echo "training not done in time"; break; fi
done
tail -6 $W/train.log
kill $(cat $W/producer.pid) 2>/dev/null  # the producer (started by call1.sh) is no longer needed
cp $W/run/ckpt_*.safetensors $W/run/config.json $OUT/
LEFT=$(( CALL_SECONDS - ($(date +%s) - T0) ))
timeout $(( LEFT - 20 )) python3 $D/train/evaluate.py --ckpt $W/run --tok $D/tok \
    --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz --out $W/ev_v2 --per-kind 20 \
    --bpb-window 8192 --chats 10 --max-time $(( LEFT - 110 )) ${EXTRA_EVAL_ARGS:-} > $W/ev_v2.log 2>&1
tail -6 $W/ev_v2.log
tar czf $OUT/logs2.tgz -C $W train.log producer.log ev_v1.log ev_v1 ev_v2.log ev_v2 rows/producer.json run/loss.csv run/run.json corpus/recipe.json tasks.jsonl.gz 2>/dev/null
ls -la $OUT
