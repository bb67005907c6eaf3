#!/bin/bash
# The v7 GPU call (call_v7.sh) rehearsed on a CPU before GPU time is spent on it (train/README.md,
# "v7 recipe"). From the repository root: bash train/gpu/dry_run.sh [DIR]   (default /tmp/v7dry)
# Stages .devtrain/ from this checkout as for the GPU call, runs call_v7.sh unchanged with small
# settings (rows of 2048 tokens from 1M tokens, 512-token crops, batch 1: about ten training steps;
# one task per kind, 10 per evaluation), $OUT = DIR/out and W = DIR/w, then checks that every step
# made what the next one reads, that what comes back fits the device's limits (at most 8 files,
# 16 MiB each, 64 MiB in all, the call's output as the eighth), that the returned checkpoint gives
# the average whose sha256 the call printed, and that this checkout plus .devtrain/ fits the 64 MiB a
# call sends. Exit 0 only if every check passed. About 7 minutes on 2 busy cores; the call's
# settings can be overridden from the environment (e.g. CALL_SECONDS on a slower machine);
# CHECK_ONLY=1 runs only the checks, on what an earlier dry run left in DIR. With GROW_AFTER (as
# for the call) the base is grown here too and checked equal to the call's (sha256).
set -u
DIR=${1:-/tmp/v7dry}
[ -f train/gpu/call_v7.sh ] && [ -d app/strata/models/strata-tiny ] || { echo "run from the repository root"; exit 2; }
T0=$(date +%s)
export OUT=$DIR/out W=$DIR/w
if [ -z "${CHECK_ONLY:-}" ]; then  # CHECK_ONLY=1: only the checks, on what an earlier dry run left in DIR
  rm -rf .devtrain "$OUT" "$W" && mkdir -p .devtrain/{train/gpu,tok} "$OUT"
  cp train/*.py train/data_recipe.json .devtrain/train/ && cp train/gpu/*.sh .devtrain/train/gpu/
  cp app/strata/models/strata-tiny/tokenizer*.json .devtrain/tok/
  export CALL_SECONDS=${CALL_SECONDS:-600} TAIL_SECONDS=${TAIL_SECONDS:-450} BASE_SECONDS=${BASE_SECONDS:-300}
  export SEQ=${SEQ:-2048} MAX_CHARS=${MAX_CHARS:-3000} MAX_TOKENS=${MAX_TOKENS:-1e6} WORKERS=${WORKERS:-1}
  export TRAIN_ARGS=${TRAIN_ARGS:---device cpu --batch 1 --crop 512 --warmup 2 --ckpt-every 30}
  export EVAL_ARGS=${EVAL_ARGS:---device cpu --per-kind 1}
  if [ -n "${TWO_CALLS:-}" ]; then  # PART=1 then PART=2 (a run over two calls); training outlives call 1
    mkdir -p $DIR/out1
    TRAIN_END=$(( $(date +%s) + ${CALL1_SECONDS:-240} + 60 )) PART=1 CALL_SECONDS=${CALL1_SECONDS:-240} OUT=$DIR/out1 \
        bash .devtrain/train/gpu/call_v7.sh 2>&1 | tee $DIR/out1/call.txt
    PART=2 bash .devtrain/train/gpu/call_v7.sh 2>&1 | tee $OUT/call.txt
  else
    bash .devtrain/train/gpu/call_v7.sh 2>&1 | tee $OUT/call.txt
  fi
fi
CALL_END=$(date +%s)

fail=0
rm -rf "$DIR/check" && mkdir -p "$DIR/check"
check() {  # $1: what; the rest: a command that must succeed
  local what=$1; shift
  if "$@" >/dev/null 2>&1; then echo "ok    $what"; else echo "FAIL  $what"; fail=1; fi
}
lines() { zcat -f "$1" 2>/dev/null | wc -l; }
BASE=app/strata/models/strata-tiny
if [ -n "${GROW_AFTER:-}" ]; then  # the call grew the base first; grow it here the same way
  python3 train/grow.py --model $BASE --after $GROW_AFTER --out $DIR/check/grown > $DIR/check/grow.log 2>&1
  BASE=$DIR/check/grown
  check "grow: the call's grown base is this one (sha256)" test "$(grep -o 'sha256 [0-9a-f]*' $W/grow.log)" = \
      "$(grep -o 'sha256 [0-9a-f]*' $DIR/check/grow.log)"
fi
check "git ignores .devtrain/" git check-ignore -q .devtrain
check "build_data: corpus/train.jsonl.gz, corpus/heldout.jsonl.gz" test -s $W/corpus/train.jsonl.gz -a -s $W/corpus/heldout.jsonl.gz
check "make_rows: rows/rows_0000.npy, rows/marks_0000.npy, rows/producer.json" \
    test -s $W/rows/rows_0000.npy -a -s $W/rows/marks_0000.npy -a -s $W/rows/producer.json
check "file_tasks: tasks.jsonl.gz (200 tasks)" test "$(lines $W/tasks.jsonl.gz)" = 200
check "train: run/DONE and the final checkpoint" test -f $W/run/DONE -a -s $W/run/ckpt_0.safetensors -a -s $W/run/config.json
check "export: run_hf/model.safetensors" test -s $W/run_hf/model.safetensors
check "average: avg/model.safetensors" test -s $W/avg/model.safetensors
per=$(lines $W/forced_base/forced_tasks.jsonl)
for e in base run avg; do
  check "evaluate $e: forced_$e/eval.json and a row for every task ($per)" \
      test -s $W/forced_$e/eval.json -a "$(lines $W/forced_$e/forced_tasks.jsonl)" = "$per" -a "$per" -gt 0
done
check "the three evaluations ran on the same tasks" bash -c "for e in run avg; do
    diff <(cut -d, -f1,2 $W/forced_base/forced_tasks.jsonl) <(cut -d, -f1,2 $W/forced_\$e/forced_tasks.jsonl) || exit 1; done"
for e in base run avg $(for w in ${MEAN_WEIGHTS:-}; do echo avg_w$w; done); do
  check "gate $e: the README's 3 edits evaluated (gate/$e)" test "$(lines $W/gate/$e/forced_tasks.jsonl)" = 3
done
for w in ${MEAN_WEIGHTS:-}; do
  check "evaluate avg_w$w: forced_avg_w$w/eval.json, a row for every task" \
      test -s $W/forced_avg_w$w/eval.json -a "$(lines $W/forced_avg_w$w/forced_tasks.jsonl)" = "$per"
done
want="gate/avg.log forced_base/eval.json forced_base.log forced_run/eval.json forced_run.log forced_avg/eval.json forced_avg.log export.log average.log tasks.jsonl.gz"
check "forced.tgz holds $want" bash -c "t=\$(tar tzf $OUT/forced.tgz) && for f in $want; do grep -qx \"\$f\" <<< \"\$t\" || exit 1; done"
check "logs_v7.tgz holds train.log, producer.log, run/loss.csv" bash -c \
    "t=\$(tar tzf $OUT/logs_v7.tgz) && grep -qx train.log <<< \"\$t\" && grep -qx producer.log <<< \"\$t\" && grep -qx run/loss.csv <<< \"\$t\""
if [ -n "${TWO_CALLS:-}" ]; then  # what call 1 returns: a fallback checkpoint and the tasks, within the limits
  n1=$(find $DIR/out1 -mindepth 1 | wc -l)
  check "call 1 returns a checkpoint, its config and the tasks ($n1 files, at most 8)" test -s $DIR/out1/ckpt_0.safetensors \
      -a -s $DIR/out1/config.json -a "$(lines $DIR/out1/tasks.jsonl.gz)" = 200 -a "$n1" -le 8
  check "call 1's logs_part1.tgz holds train.log and the base's evaluation" bash -c \
      "t=\$(tar tzf $DIR/out1/logs_part1.tgz) && grep -qx train.log <<< \"\$t\" && grep -qx forced_base/eval.json <<< \"\$t\""
fi
n=$(find $OUT -mindepth 1 | wc -l)
check "\$OUT holds $n files (at most 8, call.txt included), no folders" test "$n" -le 8 -a -z "$(find $OUT -mindepth 1 -not -type f)"
check "each returned file at most 16 MiB" test -z "$(find $OUT -type f -size +16777216c)"
total=$(cat $OUT/* | wc -c)
check "returned files $total bytes in all (at most 64 MiB)" test $total -le 67108864
check "returned names only letters, digits, '.', '_', '-'" test -z "$(ls $OUT | grep -v '^[A-Za-z0-9._-]*$')"
# afterwards, as after the GPU call (train/README.md): the returned checkpoint gives the call's average
python3 train/export.py --ckpt $OUT --tok $BASE --out $DIR/check/run > $DIR/check/export.log 2>&1
python3 train/average.py --a $BASE --b $DIR/check/run --out $DIR/check/avg > $DIR/check/average.log 2>&1
printed=$(grep -o 'sha256 [0-9a-f]*' $W/average.log | head -1)  # the mean (MEAN_WEIGHTS' averages follow)
check "the returned checkpoint gives the call's average ($printed)" \
    test -n "$printed" -a "$printed" = "$(grep -o 'sha256 [0-9a-f]*' $DIR/check/average.log)"
sent=$( (git ls-files -z --cached --others --exclude-standard | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1) )
dev=$(du -sb .devtrain | cut -f1)
check "this checkout sends $sent + $dev bytes (.devtrain) (at most 64 MiB)" test $(( sent + dev )) -le 67108864
echo "dry run: $([ -z "${CHECK_ONLY:-}" ] && echo "call $(( CALL_END - T0 )) s, ")checks $(( $(date +%s) - CALL_END )) s; $([ $fail = 0 ] && echo 'every check passed' || echo 'FAILED')"
exit $fail
