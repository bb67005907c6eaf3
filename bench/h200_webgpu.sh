#!/usr/bin/env bash
# One self-contained measurement of the webgpu backend on a GPU machine (issue 11's H200 run):
# build strata with the WebGPU backend, show the adapter, time the WGSL matmul kernel
# (bandwidth, cost(T)/cost(1)), then on two random bf16 qwen3_next checkpoints, the anchor shape
# (preset bench, 145M) and the Qwen3-Next-80B-A3B layer shape (preset a3b: hidden 2048, 512
# experts top-10, expert width 512, 8 layers, resident, ~27 GB): T=1 decode on webgpu (tok/s,
# weight bytes per step / time against the card's measured copy rate), window cost(4)/cost(1)
# and cost(8)/cost(1) on webgpu, transformers CUDA eager on the same checkpoint; drafting off
# vs on over an edit workload of sessions/ on webgpu (identical output, speedup).
#
#   bench/h200_webgpu.sh [STAGE]
#
# STAGE (default .devgpu) may hold: whl/*.whl (wgpu 0.32.0, pybind11 3, platformdirs: unpacked
# into $SITE), pyinclude.tar.gz (Python.h of the interpreter's minor version, used only when the
# interpreter ships none). GL_DIR (default .gl) may hold *.deb, the Vulkan loader, unpacked into
# / when the system has no libvulkan (needs root). Every step has a timeout and the whole script stops by $DEADLINE_S
# seconds; results print as they come and the table prints last.
#
# Knobs (the defaults are the H200 run; the lavapipe rehearsal shrinks them; the lists
# MATMUL_SIZES, XLOADS and PROFILE_XLOADS take their default only when unset, so "" skips them):
#   ADAPTER=auto|any|software  MATMUL_SIZES="8192x8192 2048x512"  MATMUL_ITERS=50
#   PRESET=bench  BIG_PRESET=a3b  BIG_SET="" (preset overrides for a small rehearsal, e.g.
#   "hidden_size=256 num_experts=32")  BIG=1 (0 skips the big model)  TOKENS=64  BIG_TOKENS=32
#   WORKLOAD=edit-cmake  SPEC_MAX_NEW=160  WARM_PROMPT=256 (a warm-up prefill: every expert uploaded)
#   XLOADS="lanes direct" (the matmul probe's row loops, STRATA_WEBGPU_XLOAD)  BIG_XLOADS=""
#   (the big model's decode once more with each of these row loops)  PROFILE_XLOADS="lanes"
#   (bench/webgpu_profile.py on the big model, GPU time per kernel at T=1 and T=8, per row loop;
#   "" skips)  ANCHOR=1 HF=1 SPEC=1 CPU=1 (0 skips the anchor decode, transformers, drafting,
#   strata's CPU decode)  DEADLINE_S=420  PY=python3  JOBS=$(nproc)  SITE=/tmp/site
#   BUILD=/tmp/strata-build  MODEL=/tmp/strata-model  OUT=/tmp/strata-out  WORK=/tmp/strata-work
#   HF_DEVICE=cuda
#   GGUF_FILES="" (quantized GGUF files to time on webgpu and cpu: T=1 decode, cost(T))
#   GGUF_MIX="" (e.g. "Q4_K_M Q8_0": also write the anchor checkpoint as such GGUFs and time them;
#   needs the `gguf` package, bench/webgpu_decode.py make-gguf)  PROFILE_GGUF=0 (1: GPU time per
#   kernel of each GGUF file too)  CPU=0 also skips the GGUF files' cpu decode
#   STREAM=0 (1: the anchor checkpoint converted to a pack, its experts streamed: decode and
#   window cost, and dispatches/submits per window with a cache of STREAM_SLOTS=64 slots into
#   $OUT/stream_host.jsonl)
#   GGUF_AB="" (environment assignments, e.g. STRATA_WEBGPU_QUANT_FOLD=0: each GGUF file's webgpu
#   decode + window cost once more under them, labelled "LABEL GGUF_AB", for an A/B in one run)
#   DISPATCH=0 (1: bench/webgpu_dispatch.py, the floor per dispatch: chain / shared output /
#   distinct outputs, without and with STRATA_WEBGPU_PROFILE=1)  STEPS="" (bench/webgpu_steps.py on
#   the big model, one run per entry: "256" the bench's warm prompt, "256p" the same with
#   STRATA_WEBGPU_PROFILE=1, "0" no warm prompt; every decode step's time split into encode,
#   wait and the rest, against the window-cost rounds; with a warm prompt also the first pass's
#   time and submits)  EARLY_AB="" (e.g. "48,8": those runs also alternate STRATA_WEBGPU_EARLY_FIRST
#   over these values, an A/B in one process)
#   AB_SRC="" (a second source tree, e.g. main's unpacked beside this one: built too, in parallel,
#   and each STEPS run done with it as well, right after this tree's, labelled "...-ab", with
#   this tree's bench scripts over its own app and engine: a side-by-side A/B in one call)
#   BIG_DECODE=1 (0 skips the big model's decode + window cost and its transformers run)
#   BIG_AB="" (alternatives separated by '|', each a list of environment assignments, e.g.
#   "STRATA_WEBGPU_FOLD=0|STRATA_WEBGPU_ROW_SPLIT=0": the big model's decode + window cost once
#   more under each, labelled "a3b ASSIGNMENTS", then once more as it was: an A/B in one run)
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/.."
SRC=$(pwd)
STAGE=$(cd "${1:-.devgpu}" 2>/dev/null && pwd || echo "")
: "${ADAPTER:=auto}" "${MATMUL_SIZES=8192x8192 2048x512}" "${MATMUL_ITERS:=50}"
: "${PRESET:=bench}" "${TOKENS:=64}" "${DEADLINE_S:=420}" "${PY:=python3}" "${JOBS:=$(nproc)}"
: "${WARM_PROMPT:=256}" "${BIG_PRESET:=a3b}" "${BIG_SET:=}" "${BIG:=1}" "${BIG_TOKENS:=32}" "${WORKLOAD:=edit-cmake}" "${SPEC_MAX_NEW:=160}"
: "${SITE:=/tmp/site}" "${BUILD:=/tmp/strata-build}" "${MODEL:=/tmp/strata-model}" "${OUT:=/tmp/strata-out}"
: "${BIG_MODEL:=/tmp/strata-model-big}" "${XLOADS=lanes direct}" "${BIG_XLOADS:=}" "${PROFILE_XLOADS=lanes}"
: "${ANCHOR:=1}" "${HF:=1}" "${SPEC:=1}" "${CPU:=1}"
: "${DISPATCH:=0}" "${STEPS:=}" "${EARLY_AB:=}" "${AB_SRC:=}" "${BIG_DECODE:=1}" "${BIG_AB:=}"
: "${HF_DEVICE:=cuda}" "${GGUF_FILES:=}" "${GGUF_MIX:=}" "${PROFILE_GGUF:=0}" "${STREAM:=0}" "${STREAM_SLOTS:=64}" "${GGUF_AB:=}"
WORK=${WORK:-/tmp/strata-work}  # build and step outputs (only the log and results go to $OUT)
mkdir -p "$OUT" "$WORK"
LOG=$OUT/h200_webgpu.log
RES=$OUT/results.jsonl
: >"$RES"
export PYTHONUNBUFFERED=1
if [ -z "${XDG_RUNTIME_DIR:-}" ]; then  # else the Vulkan loader/Mesa complain on every open
  export XDG_RUNTIME_DIR=/tmp/xdg-$(id -u); mkdir -p -m 700 "$XDG_RUNTIME_DIR"
fi

PATH=$(dirname "$(command -v "$PY")"):$PATH  # cmake and ninja may be pip packages beside python
elapsed() { echo $(( $(date +%s) - T0 )); }
# step NAME CAP CMD...: run CMD under min(CAP, time left before the deadline) seconds
step() {
  local name=$1 cap=$2; shift 2
  local left=$(( DEADLINE_S - $(elapsed) - 8 ))
  (( cap > left )) && cap=$left
  if (( cap < 5 )); then echo "== $name: SKIPPED (no time left, t=$(elapsed)s)" >&3; return 124; fi
  echo "== $name (cap ${cap}s, t=$(elapsed)s)" >&3
  timeout -k 3 "$cap" "$@"
  local rc=$?
  (( rc == 124 || rc == 137 )) && echo "== $name: TIMED OUT after ${cap}s" >&3
  (( rc != 0 && rc != 124 && rc != 137 )) && echo "== $name: FAILED rc=$rc" >&3
  return $rc
}

main() {
exec 3>&1  # step's own lines go here, also when a step's output goes to a file
echo "== h200_webgpu: $(date -u +%FT%TZ) src=$SRC commit=$(cat "$SRC/.commit" 2>/dev/null || git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "== host: $(uname -m) $(nproc) cores; $($PY --version 2>&1); $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo 'no nvidia-smi')"

# 1. Vulkan loader (only where the system has none) and the carried wheels
GL_DIR=${GL_DIR:-$SRC/.gl}
if ! ldconfig -p 2>/dev/null | grep -q libvulkan.so.1; then
  if ls "$GL_DIR"/*.deb >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    for f in "$GL_DIR"/*.deb; do dpkg -x "$f" /; done; ldconfig
    echo "== vulkan loader unpacked from $GL_DIR"
  else
    echo "== WARNING: no libvulkan.so.1 and no loader debs in $GL_DIR"
  fi
fi
NV_ICD=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
if [ -z "${VK_DRIVER_FILES:-}" ] && [ -f "$NV_ICD" ] \
   && ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
  export VK_DRIVER_FILES=$NV_ICD  # the driver's ICD lives outside the loader's search path there
  echo "== VK_DRIVER_FILES=$VK_DRIVER_FILES"
fi
if [ -n "$STAGE" ] && ls "$STAGE"/whl/*.whl >/dev/null 2>&1; then
  step wheels 60 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$STAGE"/whl/*.whl || exit 1
  export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
fi

# 2. the random checkpoints (numpy only) in the background while the engine builds
mkdir -p "$MODEL" "$BIG_MODEL"
( PYTHONPATH=$SRC/app${PYTHONPATH:+:$PYTHONPATH} timeout 90 $PY bench/webgpu_decode.py make "$MODEL" \
    --preset "$PRESET" --label anchor --out "$RES" >"$WORK/make.txt" 2>&1
  if [ "$BIG" = 1 ]; then
    PYTHONPATH=$SRC/app${PYTHONPATH:+:$PYTHONPATH} timeout 150 $PY bench/webgpu_decode.py make "$BIG_MODEL" \
      --preset "$BIG_PRESET" --repeat-experts --label "$BIG_PRESET" --set $BIG_SET --out "$RES" >>"$WORK/make.txt" 2>&1
  fi ) &
MAKE_PID=$!

# 3. build: cmake + ninja, Release, WebGPU on
PYINC=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
extra=()
if [ ! -f "$PYINC/Python.h" ] && [ -f "$STAGE/pyinclude.tar.gz" ]; then
  mkdir -p /tmp/pyinclude && tar -xzf "$STAGE/pyinclude.tar.gz" -C /tmp/pyinclude
  extra+=(-DPython_INCLUDE_DIR="$(ls -d /tmp/pyinclude/*/ | head -1)")
  echo "== no Python.h at $PYINC: using the carried headers"
fi
WGPU_INC=$($PY -c "import importlib.util, os; s = importlib.util.find_spec('wgpu'); print(os.path.join(os.path.dirname(s.origin), 'resources') if s else '')")
PB_DIR=$($PY -m pybind11 --cmakedir)
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
step configure 60 cmake -S "$SRC" -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DPython_EXECUTABLE="$(command -v $PY)" -Dpybind11_DIR="$PB_DIR" -DSTRATA_WEBGPU=ON \
  -DSTRATA_WGPU_INCLUDE_DIR="$WGPU_INC" "${extra[@]}" >"$WORK/configure.txt" 2>&1 \
  || { tail -30 "$WORK/configure.txt"; exit 1; }
grep -i "webgpu\|python" "$WORK/configure.txt" | head -5
AB_BUILD=$BUILD-ab
if [ -n "$AB_SRC" ]; then  # the A/B tree: configured alike, built beside this one with half the cores each
  AB_SRC=$(cd "$AB_SRC" && pwd)
  step "configure $AB_SRC" 60 cmake -S "$AB_SRC" -B "$AB_BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v $PY)" -Dpybind11_DIR="$PB_DIR" -DSTRATA_WEBGPU=ON \
    -DSTRATA_WGPU_INCLUDE_DIR="$WGPU_INC" "${extra[@]}" >"$WORK/configure-ab.txt" 2>&1 \
    || { tail -30 "$WORK/configure-ab.txt"; exit 1; }
  ( step "build $AB_SRC" 150 cmake --build "$AB_BUILD" -j $(( (JOBS + 1) / 2 )) >"$WORK/build-ab.txt" 2>&1 \
    || tail -40 "$WORK/build-ab.txt" ) &
  AB_PID=$!
  JOBS_A=$(( (JOBS + 1) / 2 ))
else
  JOBS_A=$JOBS
fi
step build 150 cmake --build "$BUILD" -j "$JOBS_A" >"$WORK/build.txt" 2>&1 || { tail -40 "$WORK/build.txt"; exit 1; }
echo "== built $(ls "$BUILD"/_engine*.so) at t=$(elapsed)s"
if [ -n "$AB_SRC" ]; then
  wait $AB_PID
  if ls "$AB_BUILD"/_engine*.so >/dev/null 2>&1; then
    echo "== built the A/B tree $(ls "$AB_BUILD"/_engine*.so) (commit $(cat "$AB_SRC/.commit" 2>/dev/null || echo '?')) at t=$(elapsed)s"
    cp "$SRC"/bench/webgpu_steps.py "$SRC"/bench/webgpu_decode.py "$AB_SRC"/bench/  # one procedure for both
  else
    echo "== the A/B tree did not build: no A/B"; AB_SRC=
  fi
fi
export STRATA_DEV_BUILD=$BUILD PYTHONPATH=$SRC/app${PYTHONPATH:+:$PYTHONPATH} STRATA_WEBGPU_ADAPTER=$ADAPTER

# 4. the adapter and its limits
step "strata info --gpu $ADAPTER" 30 $PY -m strata info --gpu "$ADAPTER"

# 5. the WGSL matmul probe: bandwidth and cost(T)/cost(1), x read straight from storage (the
#    default) and staged in workgroup memory (STRATA_WEBGPU_XLOAD=staged), side by side
for xl in $XLOADS; do
for size in $MATMUL_SIZES; do
  r=${size%x*}; c=${size#*x}
  STRATA_WEBGPU_XLOAD=$xl step "webgpu_matmul f16 ${r}x${c} x=$xl" 40 $PY bench/webgpu_matmul.py --adapter "$ADAPTER" \
    --rows "$r" --cols "$c" --format f16 --iters "$MATMUL_ITERS" --windows 1,2,4,8,16 --json >"$WORK/matmul_$size.json" \
    && $PY -c "import json,sys; d=json.load(open(sys.argv[1])); d['what']='matmul'; d['xload']=sys.argv[2]; print(json.dumps(d))" \
       "$WORK/matmul_$size.json" "$xl" | tee -a "$RES"
done
done

# 5b. the floor a window pays per dispatch, and what timestamps between dispatches add to it
if [ "$DISPATCH" = 1 ]; then
  for prof in "" 1; do
    STRATA_WEBGPU_PROFILE=$prof step "webgpu_dispatch${prof:+ (profiled)}" 30 $PY bench/webgpu_dispatch.py \
      --adapter "$ADAPTER" --json | tee -a "$RES"
  done
fi

# 6. the card's own ceilings (torch copy, cuBLAS matvec): the bandwidth the ratios refer to
step "torch ceiling" 30 $PY bench/webgpu_decode.py ceiling --out "$RES"

# 7. decode on both checkpoints: webgpu (tok/s, weight bytes per step / time, window costs),
#    then transformers on the same checkpoint; the 80B-A3B shape right after the anchor, so a
#    slow step late in the run costs only the extras below
wait $MAKE_PID; cat "$WORK/make.txt"
decode() {  # decode LABEL DIR TOKENS CAP_GPU CAP_HF
  local label=$1 dir=$2 tokens=$3 cap_gpu=$4 cap_hf=$5
  [ -f "$dir/config.json" ] || { echo "== no checkpoint at $dir: $label skipped"; return; }
  step "[$label] strata webgpu decode + window cost" "$cap_gpu" $PY bench/webgpu_decode.py strata "$dir" \
    --backend webgpu --tokens "$tokens" --max-seconds 30 --window-cost 2,4,8,16 --warm-prompt "$WARM_PROMPT" \
    --label "$label" --out "$RES"
  [ "$HF" = 1 ] && step "[$label] transformers $HF_DEVICE eager bf16" "$cap_hf" $PY bench/webgpu_decode.py hf "$dir" \
    --device "$HF_DEVICE" --tokens "$tokens" --max-seconds 30 --label "$label" --out "$RES"
}
# GPU time per kernel (timestamp queries) on the big model, T=1 and T=8 windows, per row loop
for xl in $PROFILE_XLOADS; do
  [ "$BIG" = 1 ] && [ -f "$BIG_MODEL/config.json" ] && STRATA_WEBGPU_XLOAD=$xl step \
    "[$BIG_PRESET] GPU profile x=$xl" 90 $PY bench/webgpu_profile.py "$BIG_MODEL" --windows 1,8 --reps 8 \
    --warm-prompt "$WARM_PROMPT" --label "$BIG_PRESET-$xl" --out "$RES" | grep -v '^{'
done
# each decode step's time split (host encode / waiting submit / the rest) against the window rounds
for st in $STEPS; do
  for side in this ${AB_SRC:+ab}; do  # then the A/B tree (its engine and app, this tree's script)
    [ "$side" = ab ] && tree=$AB_SRC build=$AB_BUILD tag=-ab || tree=$SRC build=$BUILD tag=
    [ "$BIG" = 1 ] && [ -f "$BIG_MODEL/config.json" ] && STRATA_WEBGPU_PROFILE=$([ "${st%p}" != "$st" ] && echo 1) \
      STRATA_DEV_BUILD=$build step "[$BIG_PRESET$tag] decode steps, warm prompt ${st%p}$([ "${st%p}" != "$st" ] && echo ', profiled')" \
      75 $PY "$tree"/bench/webgpu_steps.py "$BIG_MODEL" --warm-prompt "${st%p}" --tokens "$BIG_TOKENS" \
      --early-ab "$EARLY_AB" --label "$BIG_PRESET-steps-$st$tag" --out "$RES" >/dev/null
  done
done
[ "$ANCHOR" = 1 ] && decode anchor "$MODEL" "$TOKENS" 60 60
[ "$BIG" = 1 ] && [ "$BIG_DECODE" = 1 ] && decode "$BIG_PRESET" "$BIG_MODEL" "$BIG_TOKENS" 120 120

# 8. lossless drafting on the GPU: an edit workload, drafting off vs on, the model's own output
#    (identical?) and forced to the recorded answers (the speed of a model that copies well)
if [ "$SPEC" = 1 ] && [ -f "$MODEL/config.json" ]; then
  for mode in model forced; do
    flag=(); [ $mode = forced ] && flag=(--forced)
    step "[anchor] drafting off/on on webgpu ($mode)" 45 $PY bench/spec_decode.py --model "$MODEL" --backend webgpu \
      --only "$WORKLOAD" --max-new "$SPEC_MAX_NEW" "${flag[@]}" --wait-quiet 0 --retry-busy 0 \
      --results "$RES" --label anchor >"$WORK/spec_$mode.txt" 2>&1
    tail -6 "$WORK/spec_$mode.txt"
  done
fi

# 9. strata's own CPU path on the anchor, for scale
[ "$CPU" = 1 ] && [ -f "$MODEL/config.json" ] && step "[anchor] strata cpu decode" 30 $PY bench/webgpu_decode.py strata "$MODEL" \
  --backend cpu --tokens "$TOKENS" --max-seconds 15 --label anchor --out "$RES"

# 10. the big model again with other row loops (what each changes end to end)
for xl in $BIG_XLOADS; do
  [ "$BIG" = 1 ] && [ -f "$BIG_MODEL/config.json" ] && STRATA_WEBGPU_XLOAD=$xl step \
    "[$BIG_PRESET] strata webgpu decode + window cost, x=$xl" 90 \
    $PY bench/webgpu_decode.py strata "$BIG_MODEL" --backend webgpu --tokens "$BIG_TOKENS" --max-seconds 20 \
    --window-cost 2,4,8,16 --warm-prompt "$WARM_PROMPT" --label "$BIG_PRESET-x$xl" --out "$RES"
done

# 10b. the big model under other settings (BIG_AB), then as it was again, so drift shows
if [ -n "$BIG_AB" ] && [ "$BIG" = 1 ] && [ -f "$BIG_MODEL/config.json" ]; then
  IFS='|' read -r -a alts <<<"$BIG_AB"
  for ab in "${alts[@]}" ""; do
    tag=${ab:-again}
    step "[$BIG_PRESET] strata webgpu decode + window cost, $tag" 80 env $ab \
      $PY bench/webgpu_decode.py strata "$BIG_MODEL" --backend webgpu --tokens "$BIG_TOKENS" --max-seconds 20 \
      --window-cost 2,4,8,16 --warm-prompt "$WARM_PROMPT" --label "$BIG_PRESET $tag" --out "$RES"
  done
fi

# 11. quantized GGUF files (the GGUF block formats' WGSL kernels) on webgpu and on cpu
gguf_files=($GGUF_FILES)
for mix in $GGUF_MIX; do
  [ -f "$MODEL/config.json" ] && step "[anchor] make a $mix GGUF" 120 $PY bench/webgpu_decode.py make-gguf "$MODEL" \
    "$WORK/anchor-$mix.gguf" --mix "$mix" --label "anchor-$mix" --out "$RES" && gguf_files+=("$WORK/anchor-$mix.gguf")
done
for f in "${gguf_files[@]}"; do
  label=$(basename "$f" .gguf)
  step "[$label] strata webgpu decode + window cost" 60 $PY bench/webgpu_decode.py strata "$f" --backend webgpu \
    --tokens "$TOKENS" --max-seconds 20 --window-cost 2,4,8,16 --warm-prompt "$WARM_PROMPT" --label "$label" --out "$RES"
  [ -n "$GGUF_AB" ] && step "[$label] strata webgpu decode + window cost, $GGUF_AB" 60 env $GGUF_AB $PY bench/webgpu_decode.py \
    strata "$f" --backend webgpu --tokens "$TOKENS" --max-seconds 20 --window-cost 2,4,8,16 --warm-prompt "$WARM_PROMPT" \
    --label "$label $GGUF_AB" --out "$RES"
  [ "$PROFILE_GGUF" = 1 ] && step "[$label] GPU profile" 60 $PY bench/webgpu_profile.py "$f" --windows 1,8 --reps 8 \
    --warm-prompt "$WARM_PROMPT" --label "$label" --out "$RES"
  [ "$CPU" = 1 ] && step "[$label] strata cpu decode + window cost" 45 $PY bench/webgpu_decode.py strata "$f" --backend cpu \
    --tokens "$TOKENS" --max-seconds 15 --window-cost 2,4,8,16 --label "$label" --out "$RES"
done

# 12. streamed experts (a pack): the expert cache's device slots and the routed kernels
if [ "$STREAM" = 1 ] && [ -f "$MODEL/config.json" ]; then
  step "[anchor] convert to a pack" 60 $PY -m strata convert "$MODEL" "$WORK/anchor.strata" --force >/dev/null \
  && step "[anchor pack] strata webgpu decode + window cost" 60 $PY bench/webgpu_decode.py strata "$WORK/anchor.strata" \
    --backend webgpu --tokens "$TOKENS" --max-seconds 20 --window-cost 2,4,8,16 --warm-prompt "$WARM_PROMPT" \
    --label anchor-pack --out "$RES" \
  && step "[anchor pack, $STREAM_SLOTS slots] dispatches and submits per window" 60 $PY bench/webgpu_host.py \
    "$WORK/anchor.strata" --expert-cache-slots "$STREAM_SLOTS" --steps 4 >"$OUT/stream_host.jsonl"
fi

echo
echo "================ h200_webgpu table (t=$(elapsed)s, $(date -u +%FT%TZ)) ================"
$PY bench/webgpu_decode.py table "$RES"
}

main "$@" 2>&1 | tee "$LOG"
