#!/bin/bash
# Sourced by the GPU call scripts (call_v4a.sh, call_v4b.sh, call_v5.sh, call_v6.sh): the setup every call repeats and
# the steps they share. Run from the repository root with the scripts in .devtrain/ (train/, tok/);
# $OUT is the folder the call returns. Every step logs under $W (default /tmp/w), which outlives
# one call while the machine stays held.
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
REPO=$PWD
D=$REPO/.devtrain
W=${W:-/tmp/w}
SEQ=${SEQ:-8192}
MAX_CHARS=${MAX_CHARS:-15000}   # file + rewrite of up to ~15k characters fit an 8192-token row
mkdir -p $W $OUT
export PYTHONPATH=$REPO/app

since() { echo "+$(( $(date +%s) - T0 ))s"; }

build_data() {  # corpus (train + held-out packages) from this machine's own Python installation
  nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>/dev/null
  python3 $D/train/build_data.py --out $W/corpus > $W/build.log 2>&1 || { cat $W/build.log; exit 2; }
  tail -1 $W/build.log
  echo "data built at $(since)"
}

start_producer() {  # $@: extra make_rows.py arguments (e.g. --seed)
  setsid nohup python3 $D/train/make_rows.py --corpus $W/corpus/train.jsonl.gz --tok $D/tok --out $W/rows \
      --seq-len $SEQ --max-chars $MAX_CHARS --max-tokens ${MAX_TOKENS:-400e6} --workers ${WORKERS:-11} "$@" \
      > $W/producer.log 2>&1 < /dev/null &
  echo $! > $W/producer.pid
}

start_training() {  # $@: train.py arguments besides rows/tok/out/deadline (TRAIN_END: unix time)
  setsid nohup python3 $D/train/train.py --rows $W/rows --tok $D/tok --out $W/run --deadline $TRAIN_END "$@" \
      >> $W/train.log 2>&1 < /dev/null &
  echo $! > $W/train.pid
}

make_tasks() {  # the held-out evaluation set (200 tasks: 20 per kind, files of 2-10k characters)
  python3 $D/train/file_tasks.py --corpus $W/corpus/heldout.jsonl.gz --out $W/tasks.jsonl.gz --per-kind 20 \
      > $W/tasks.log 2>&1 || tail -3 $W/tasks.log
  cp $W/corpus/heldout.jsonl.gz $W/tasks.jsonl.gz $OUT/ 2>/dev/null
}

wait_training() {  # until DONE, training exits, or $1 seconds into this call
  while [ ! -f $W/run/DONE ]; do
    sleep 3
    if ! kill -0 $(cat $W/train.pid) 2>/dev/null; then [ -f $W/run/DONE ] || echo "training exited without DONE"; break; fi
    if [ $(( $(date +%s) - T0 )) -gt $1 ]; then echo "training not done at $(since)"; break; fi
  done
  echo "training done at $(since)"
}

training_lines() {  # what the training log says about its start (GDN check, memory probe, first steps) and errors
  grep -E "gdn:|probe|peak|weights|initialised|step (1|2|10|50) |Error|error" $W/train.log | tail -12
}

return_checkpoint() {
  cp $W/run/ckpt_*.safetensors $W/run/config.json $OUT/ 2>/dev/null
}

evaluate() {  # $1: name; held-out edits, bpb, chats with transformers in the time this call has left
  local left=$(( CALL_SECONDS - ($(date +%s) - T0) ))
  timeout $(( left - 20 )) python3 $D/train/evaluate.py --ckpt $W/run --tok $D/tok \
      --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz --out $W/$1 --per-kind 20 \
      --bpb-window 8192 --bpb-files 100 --chats 8 --gen-batch 200 --max-time $(( left - 75 )) ${EVAL_ARGS:-} \
      > $W/$1.log 2>&1
  tail -4 $W/$1.log
}

pack_logs() {  # $1: archive name; $2...: extra paths under $W
  local name=$1; shift
  tar czf $OUT/$name -C $W train.log producer.log build.log tasks.log rows/producer.json run/loss.csv \
      run/run.json run/train_log.txt corpus/recipe.json "$@" 2>/dev/null
  ls -la $OUT
}

finish_one_call() {  # $1: log archive name. The end of a one-call run (call_v5.sh, call_v6.sh): wait for
  # training, stop the producer, return the final checkpoint and logs, then a teacher-forced evaluation
  # on the GPU in the seconds left
  wait_training $(( CALL_SECONDS - 45 ))
  kill $(cat $W/producer.pid) 2>/dev/null
  grep -E "rare vocabulary" $W/producer.log | cut -c1-400
  training_lines
  tail -3 $W/train.log; tail -1 $W/producer.log
  return_checkpoint
  pack_logs $1
  local left=$(( CALL_SECONDS - ($(date +%s) - T0) - 10 ))
  if [ -f $W/run/DONE ] && [ $left -gt 30 ]; then
    timeout $left python3 $D/train/evaluate.py --ckpt $W/run --tok $D/tok --tasks $W/tasks.jsonl.gz \
        --heldout $W/corpus/heldout.jsonl.gz --out $W/forced_gpu --forced --skip bpb,chat ${EVAL_ARGS:-} \
        > $W/forced_gpu.log 2>&1
    tail -2 $W/forced_gpu.log
    tar czf $OUT/forced_gpu.tgz -C $W forced_gpu forced_gpu.log 2>/dev/null
  fi
  ls -la $OUT
  echo "call ends at $(since)"
}
