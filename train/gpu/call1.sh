#!/bin/bash
# First GPU call of the v2 run (see train/README.md): build the data on the GPU machine from its
# own Python installation, start the row producer and training in their own sessions (they
# outlive this call while the machine stays held), watch the first minute of training and
# restart it with the fallback settings if it is far slower than planned, then return logs,
# the held-out evaluation set and a fallback checkpoint through $OUT.
# Run from the repository root with the scripts in .devtrain/ (train/, tok/).
# TRAIN_END: unix time at which training must end (the second call then evaluates).
# The same script rehearses on a CPU with small settings (train/README.md, "Rehearsal").
set -u
export PYTHONUNBUFFERED=1
T0=$(date +%s)
CALL_SECONDS=${CALL_SECONDS:-540}
REPO=$PWD
D=$REPO/.devtrain
W=${W:-/tmp/w}
SEQ=${SEQ:-8192}
MAX_CHARS=${MAX_CHARS:-15000}   # file + rewrite of up to ~15k characters fit an 8192-token row
MIN_TOKS=${MIN_TOKS:-120000}    # below this many tokens/s in the first minute: fallback settings
FALLBACK_ARGS=${FALLBACK_ARGS:---crop 4096 --max-batch 64}
mkdir -p $W $OUT
export PYTHONPATH=$REPO/app
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv 2>/dev/null
nproc
python3 $D/train/build_data.py --out $W/corpus > $W/build.log 2>&1 || { cat $W/build.log; exit 2; }
tail -1 $W/build.log
echo "data built at +$(( $(date +%s) - T0 ))s"
setsid nohup python3 $D/train/make_rows.py --corpus $W/corpus/train.jsonl.gz --tok $D/tok --out $W/rows \
    --seq-len $SEQ --max-chars $MAX_CHARS --max-tokens ${MAX_TOKENS:-400e6} --workers ${WORKERS:-13} \
    > $W/producer.log 2>&1 < /dev/null &
echo $! > $W/producer.pid

start_training() {  # $1: extra train.py arguments
  setsid nohup python3 $D/train/train.py --rows $W/rows --tok $D/tok --out $W/run --deadline $TRAIN_END \
      --lr ${LR:-3e-3} ${TRAIN_ARGS:-} $1 >> $W/train.log 2>&1 < /dev/null &
  echo $! > $W/train.pid
  TRAIN_T0=$(date +%s)
}
start_training ""
python3 $D/train/file_tasks.py --corpus $W/corpus/heldout.jsonl.gz --out $W/tasks.jsonl.gz --per-kind 20 \
    > $W/tasks.log 2>&1 || tail -3 $W/tasks.log

# watchdog: the tok/s logged at step 20 (or nothing after 150 s) decides whether to fall back
while true; do
  sleep 5
  RATE=$(grep -E "step (2[0-9]|[3-9][0-9]) loss" $W/train.log | tail -1 | sed -E 's/.* ([0-9]+) tok\/s.*/\1/')
  if [ -n "$RATE" ]; then break; fi
  if ! kill -0 $(cat $W/train.pid) 2>/dev/null; then RATE=0; echo "training exited early"; break; fi
  if [ $(( $(date +%s) - TRAIN_T0 )) -gt ${WATCH_SECONDS:-150} ]; then RATE=0; echo "no step 20 after ${WATCH_SECONDS:-150}s"; break; fi
done
grep -E "gdn|probe|peak|attention|step (1|2|3|10|20) |Error|error" $W/train.log | tail -14
echo "throughput at step 20: $RATE tok/s (planned >= $MIN_TOKS) at +$(( $(date +%s) - T0 ))s"
if [ "$RATE" -lt "$MIN_TOKS" ]; then
  echo "FALLBACK: restarting training with $FALLBACK_ARGS"
  kill $(cat $W/train.pid) 2>/dev/null; sleep 3
  mv $W/run $W/run_first 2>/dev/null
  start_training "$FALLBACK_ARGS"
fi

while [ $(( $(date +%s) - T0 )) -lt $(( CALL_SECONDS - 25 )) ]; do sleep 5; done
tail -5 $W/train.log; tail -1 $W/producer.log
nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv 2>/dev/null
cp $W/run/ckpt_*.safetensors $OUT/ 2>/dev/null
cp $W/run/config.json $OUT/ 2>/dev/null
cp $W/corpus/heldout.jsonl.gz $W/tasks.jsonl.gz $OUT/ 2>/dev/null
tar czf $OUT/logs1.tgz -C $W train.log producer.log build.log tasks.log rows/producer.json run/loss.csv run/run.json \
    corpus/recipe.json 2>/dev/null
ls -la $OUT
echo "call 1 ends at +$(( $(date +%s) - T0 ))s"
