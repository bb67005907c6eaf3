#!/bin/bash
# The v7 run in ONE GPU call (train/README.md, "v7 run"): as call_v6.sh (data, producer, training
# from the shipped model, v6, annealed to TRAIN_END), with rows seed 2029, half of the edit files
# scrambled, and the v7 recipe (make_rows.py marks the newline tokens at an edit's joins as
# changed; renames reach strings and comments, file_tasks.py). After training, in the same call:
# the run's final weights exported, the element-wise average of v6 and them (average.py), and the
# teacher-forced evaluation in float32 of all three (v6 beside training; the run and the average
# after it) on the same 200 held-out tasks. Returns at most 8 files: the final checkpoint (bf16
# parts of at most 15 MB) and its config, the tasks, the logs, the three evaluations.
# GROW_AFTER=I,J,...: grow the shipped model first (grow.py: new layers after those, the same
# function) and use that as the base; the tasks then come back inside forced.tgz only.
# PART=1 / PART=2: one run over TWO calls on the same held machine (training is detached and
# outlives call 1; TRAIN_END must then lie in call 2). Call 1 does everything up to training and the
# base's evaluation and returns, at its end, the latest periodic checkpoint (a fallback should the
# machine be lost between the calls) with the tasks; call 2, sent within the machine's idle release,
# waits for DONE and does the rest as the one-call run does.
# MEAN_WEIGHTS="0.3 ...": more averages than the mean (average.py --weight: the run's share), each
# evaluated like it. Every model (base, run, the averages) is also checked teacher-forced on the
# README's own edits (gate_tasks.py): one that gets them wrong must not ship (v9's 0.5 mean did).
. .devtrain/train/gpu/common.sh
CALL_SECONDS=${CALL_SECONDS:-540}
TRAIN_END=${TRAIN_END:-$(( T0 + CALL_SECONDS - ${TAIL_SECONDS:-130} ))}
BASE=$REPO/app/strata/models/strata-tiny
PART=${PART:-0}
if [ $PART = 2 ]; then  # the second call of a two-call run: training was started by PART=1
  [ -d $W/run ] || { echo "no training on this machine (a fresh one?)"; exit 3; }
  [ -n "${GROW_AFTER:-}" ] && BASE=$W/grown
elif [ -n "${GROW_AFTER:-}" ]; then  # a deeper model with the same function first (grow.py; "A larger model from v8")
  python3 $D/train/grow.py --model $BASE --after $GROW_AFTER --out $W/grown > $W/grow.log 2>&1 || { cat $W/grow.log; exit 2; }
  tail -1 $W/grow.log
  BASE=$W/grown
fi
gate() {  # $1: model folder, $2: name; the README's edits, teacher-forced (the per-kind cap lifted)
  python3 $D/train/evaluate.py --model $1 --tasks $W/gate.jsonl.gz --heldout $W/gate.jsonl.gz \
      --out $W/gate/$2 --forced --f32 --skip bpb,chat ${EVAL_ARGS:-} --per-kind 3 > $W/gate/$2.log 2>&1
  echo "gate $2: $(tail -1 $W/gate/$2.log)"
}
forced() {  # $1: model folder, $2: name under $W; teacher-forced, float32
  python3 $D/train/evaluate.py --model $1 --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz \
      --out $W/$2 --forced --f32 --skip bpb,chat ${EVAL_ARGS:-} > $W/$2.log 2>&1
  echo "$2: $(tail -1 $W/$2.log)"
}
if [ $PART != 2 ]; then
  build_data
  start_producer --seed ${ROWS_SEED:-2029} --p-scramble ${P_SCRAMBLE:-0.5} ${ROWS_ARGS:-}
  start_training --init-from $BASE --loss-on answer --lr ${LR:-7e-4} --warmup ${WARMUP:-30} \
      --changed-weight ${CHANGED_WEIGHT:-6} --code-weight ${CODE_WEIGHT:-0.5} ${TRAIN_ARGS:-}
  make_tasks
  rm -f $OUT/heldout.jsonl.gz  # 10 MB and one of the 8 files a call returns; the tasks carry their files
  # a checkpoint of v9's size (or a grown one) is 4 files: the tasks come back inside forced.tgz only
  rm -f $OUT/tasks.jsonl.gz
  ( timeout ${BASE_SECONDS:-200} bash -c "$(declare -f forced); D=$D W=$W EVAL_ARGS='${EVAL_ARGS:-}' forced $BASE forced_base" \
        > $W/forced_base.out 2>&1 ) &
  BASE_PID=$!
fi
if [ $PART = 1 ]; then  # the rest is call 2's; until then, the base's evaluation and a fallback checkpoint
  wait $BASE_PID 2>/dev/null; cat $W/forced_base.out
  while [ $(( $(date +%s) - T0 )) -lt $(( CALL_SECONDS - 25 )) ] && kill -0 $(cat $W/train.pid) 2>/dev/null; do sleep 3; done
  training_lines
  tail -2 $W/train.log; tail -1 $W/producer.log
  return_checkpoint
  cp $W/tasks.jsonl.gz $OUT/
  pack_logs logs_part1.tgz $( [ -n "${GROW_AFTER:-}" ] && echo grow.log ) forced_base.log forced_base
  echo "call 1 ends at $(since); training goes on until $(date -d @$TRAIN_END +%T) (now $(date +%T))"
  exit 0
fi
wait_training $(( CALL_SECONDS - 60 ))
kill $(cat $W/producer.pid) 2>/dev/null
training_lines
tail -3 $W/train.log; tail -1 $W/producer.log
return_checkpoint
pack_logs logs_v7.tgz
if [ -f $W/run/DONE ]; then
  python3 $D/train/export.py --ckpt $W/run --tok $D/tok --out $W/run_hf > $W/export.log 2>&1 || tail -3 $W/export.log
  python3 $D/train/average.py --a $BASE --b $W/run_hf --out $W/avg 2>&1 | tee $W/average.log
  extra=""
  for w in ${MEAN_WEIGHTS:-}; do
    python3 $D/train/average.py --a $BASE --b $W/run_hf --out $W/avg_w$w --weight $w 2>&1 | tee -a $W/average.log
    extra="$extra forced $W/avg_w$w forced_avg_w$w &"
  done
  mkdir -p $W/gate && python3 $D/train/gate_tasks.py --example $REPO/examples/arith.py --out $W/gate.jsonl.gz
  left=$(( CALL_SECONDS - ($(date +%s) - T0) - 15 ))  # timeout 0 would mean no limit: none is run then
  [ $left -gt 0 ] && timeout $left bash -c "$(declare -f forced gate); D=$D W=$W EVAL_ARGS='${EVAL_ARGS:-}'
      forced $W/run_hf forced_run & forced $W/avg forced_avg & $extra wait
      gate $BASE base; gate $W/run_hf run; gate $W/avg avg; for w in ${MEAN_WEIGHTS:-}; do gate $W/avg_w\$w avg_w\$w; done"
fi
[ $PART = 2 ] || { wait $BASE_PID 2>/dev/null; cat $W/forced_base.out; }
for e in forced_base forced_run forced_avg; do  # stopped by its timeout (or failed): the rows it did are kept
  [ -f $W/$e/eval.json ] || echo "$e: no result, $(cat $W/$e/forced_tasks.jsonl 2>/dev/null | wc -l) tasks done ($e.log)"
done
tar czf $OUT/forced.tgz -C $W forced_base forced_base.log forced_run forced_run.log forced_avg forced_avg.log \
    $(for w in ${MEAN_WEIGHTS:-}; do echo forced_avg_w$w forced_avg_w$w.log; done) gate \
    export.log average.log tasks.jsonl.gz $( [ -n "${GROW_AFTER:-}" ] && echo grow.log ) 2>/dev/null
ls -la $OUT
echo "call ends at $(since)"
