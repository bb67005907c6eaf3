#!/bin/bash
# The v5 run in ONE GPU call (train/README.md, "v5 run"): build the data, start the row producer
# with a fresh seed (rows v2-v4 never saw; renames and string literals take rare vocabulary
# pieces as new values, make_rows.py --rare-vocab) and training from the shipped model (v4) with
# the learning rate annealed to its end at TRAIN_END inside this call; return the final
# checkpoint (bf16 parts of at most 15 MB), the held-out set and the logs, then a teacher-forced
# evaluation on the GPU in the seconds left. v4's two-call scheme lost its second half when the
# machine was given back between the calls; nothing here depends on a later call.
. .devtrain/train/gpu/common.sh
CALL_SECONDS=${CALL_SECONDS:-540}
TRAIN_END=${TRAIN_END:-$(( T0 + CALL_SECONDS - ${TAIL_SECONDS:-80} ))}
build_data
start_producer --seed ${ROWS_SEED:-2027} --rare-vocab ${RARE_VOCAB:-1}
start_training --init-from $REPO/app/strata/models/strata-tiny --loss-on answer --lr ${LR:-7e-4} \
    --warmup ${WARMUP:-30} --changed-weight ${CHANGED_WEIGHT:-6} --code-weight ${CODE_WEIGHT:-0.5} ${TRAIN_ARGS:-}
make_tasks
finish_one_call logs_v5.tgz
