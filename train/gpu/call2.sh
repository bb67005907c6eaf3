#!/bin/bash
# Second GPU call: wait for training (started by call1.sh) to end, return the final checkpoint at
# once (copied to $OUT before anything else can fail), then evaluate it on the GPU for a bounded
# time (held-out whole-file edits, bpb, chat, with transformers) and return evaluation and logs.
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
CALL_SECONDS=${CALL_SECONDS:-480}
REPO=$PWD
D=$REPO/.devtrain
W=${W:-/tmp/w}
mkdir -p $OUT
export PYTHONPATH=$REPO/app
if [ ! -d $W/run ]; then echo "no training on this machine (a fresh one?)"; exit 3; fi
while [ ! -f $W/run/DONE ]; do
  sleep 3
  if [ $(( $(date +%s) - T0 )) -gt $(( CALL_SECONDS - 120 )) ]; then echo "training not done in time"; break; fi
done
echo "training done at +$(( $(date +%s) - T0 ))s"
tail -4 $W/train.log
kill $(cat $W/producer.pid) 2>/dev/null  # the producer (started by call1.sh) is no longer needed
cp $W/run/ckpt_*.safetensors $W/run/config.json $OUT/
LEFT=$(( CALL_SECONDS - ($(date +%s) - T0) ))
timeout $(( LEFT - 25 )) python3 $D/train/evaluate.py --ckpt $W/run --tok $D/tok \
    --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz --out $W/ev_v2 --per-kind 20 \
    --bpb-window 8192 --bpb-files 100 --chats 8 --gen-batch 200 --max-time $(( LEFT - 90 )) ${EVAL_ARGS:-} \
    > $W/ev_v2.log 2>&1
tail -4 $W/ev_v2.log
tar czf $OUT/logs2.tgz -C $W train.log producer.log ev_v2.log ev_v2 rows/producer.json run/loss.csv run/run.json \
    run/train_log.txt 2>/dev/null
ls -la $OUT
echo "call 2 ends at +$(( $(date +%s) - T0 ))s"
