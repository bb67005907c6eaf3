#!/bin/bash
# First GPU call of the v4 run (train/README.md, "v4 run"): build the data, start the row
# producer with a fresh seed (rows v2/v3 never saw, with change marks) and training from the
# shipped model (loss on the answers, changed rewrite tokens weighted); both outlive this call
# (setsid) while the machine stays held and train until TRAIN_END. Returns the held-out set, a
# checkpoint from the middle of the run and the logs so far. call_v4b.sh follows at once.
. .devtrain/train/gpu/common.sh
CALL_SECONDS=${CALL_SECONDS:-530}
build_data
start_producer --seed ${ROWS_SEED:-2026}
start_training --init-from $REPO/app/strata/models/strata-tiny --loss-on answer --lr ${LR:-1e-3} \
    --warmup ${WARMUP:-30} --changed-weight ${CHANGED_WEIGHT:-6} --code-weight ${CODE_WEIGHT:-0.5} ${TRAIN_ARGS:-}
make_tasks
while [ $(( $(date +%s) - T0 )) -lt $(( CALL_SECONDS - 20 )) ]; do
  sleep 5
  if ! kill -0 $(cat $W/train.pid) 2>/dev/null; then echo "training exited at $(since)"; break; fi
done
grep -E "gdn:|probe|peak|weights|initialised|step (1|2|3|10|50) |Error|error" $W/train.log | tail -12
tail -3 $W/train.log; tail -1 $W/producer.log
return_checkpoint
pack_logs logs_a.tgz
echo "call a ends at $(since)"
