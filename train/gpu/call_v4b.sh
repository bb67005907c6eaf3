#!/bin/bash
# Second GPU call of the v4 run: wait for the training started by call_v4a.sh to end, return
# the final checkpoint at once, evaluate it with transformers (the same 200 held-out tasks,
# bpb and chats as v2/v3) in the time left, return the evaluation and logs.
. .devtrain/train/gpu/common.sh
CALL_SECONDS=${CALL_SECONDS:-460}
if [ ! -d $W/run ]; then echo "no training on this machine (a fresh one?)"; exit 3; fi
wait_training $(( CALL_SECONDS - 150 ))
grep -E "caught up|Error|error" $W/train.log | tail -3
tail -3 $W/train.log
kill $(cat $W/producer.pid) 2>/dev/null
return_checkpoint
evaluate ev_v4
pack_logs logs_b.tgz ev_v4.log ev_v4
echo "call b ends at $(since)"
