#!/bin/bash
# The v6 run in ONE GPU call (train/README.md, "v6 run"): build the data, start the row producer
# with a fresh seed (rows v2-v5 never saw), the pruned tokenizer (the shipped one, staged in
# .devtrain/tok) and a share of the edit files scrambled before their tasks are drawn
# (make_rows.py --p-scramble: names replaced by other files' names, so a rewrite is only right by
# copying), and training from the shipped model (v5's weights) with the learning rate annealed to
# its end at TRAIN_END inside this call; return the final checkpoint (bf16 parts of at most
# 15 MB), the held-out set and the logs, then a teacher-forced evaluation on the GPU in the
# seconds left. Nothing depends on a later call.
. .devtrain/train/gpu/common.sh
CALL_SECONDS=${CALL_SECONDS:-520}
TRAIN_END=${TRAIN_END:-$(( T0 + CALL_SECONDS - ${TAIL_SECONDS:-85} ))}
build_data
start_producer --seed ${ROWS_SEED:-2028} --p-scramble ${P_SCRAMBLE:-0.3}
start_training --init-from $REPO/app/strata/models/strata-tiny --loss-on answer --lr ${LR:-7e-4} \
    --warmup ${WARMUP:-30} --changed-weight ${CHANGED_WEIGHT:-6} --code-weight ${CODE_WEIGHT:-0.5} ${TRAIN_ARGS:-}
make_tasks
# the shipped model (v5's weights, pruned tokenizer) on the same tasks, beside training (a forward pass
# per task; small next to the training steps), so that v6 has a baseline on the GPU machine's tasks
( timeout ${BASE_SECONDS:-150} python3 $D/train/evaluate.py --model $REPO/app/strata/models/strata-tiny \
      --tasks $W/tasks.jsonl.gz --heldout $W/corpus/heldout.jsonl.gz --out $W/forced_base --forced \
      --skip bpb,chat ${EVAL_ARGS:-} > $W/forced_base.log 2>&1
  tar czf $OUT/forced_base.tgz -C $W forced_base forced_base.log 2>/dev/null ) &
finish_one_call logs_v6.tgz
