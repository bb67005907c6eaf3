#!/usr/bin/env bash
# One self-contained measurement of the webgpu backend on a GPU machine (issue 11's H200 run):
# build strata with the WebGPU backend, show the adapter, time the WGSL matmul kernel
# (bandwidth, cost(T)/cost(1)) and end-to-end T=1 decode on webgpu vs cpu vs transformers.
#
#   bench/h200_webgpu.sh [STAGE]
#
# STAGE (default .devgpu) may hold: whl/*.whl (wgpu 0.32.0, pybind11 3, platformdirs: unpacked
# into $SITE), pyinclude.tar.gz (Python.h of the interpreter's minor version, used only when the
# interpreter ships none). GL_DIR (default .gl) may hold *.deb, the Vulkan loader, unpacked into
# / when the system has no libvulkan (needs root). Every step has a timeout and the whole script stops by $DEADLINE_S
# seconds; results print as they come and the table prints last.
#
# Knobs (the defaults are the H200 run; the lavapipe rehearsal shrinks them):
#   ADAPTER=auto|any|software  MATMUL_SIZES="8192x8192 10240x2048 512x2048 2048x512"  MATMUL_ITERS=50
#   PRESET=bench  TOKENS=64  DEADLINE_S=285  PY=python3  JOBS=$(nproc)  SITE=/tmp/site
#   BUILD=/tmp/strata-build  MODEL=/tmp/strata-model  OUT=/tmp/strata-out  WORK=/tmp/strata-work
#   HF_DEVICE=cuda  HF_CHECK_F32=1 (a float32 transformers run: greedy agreement with strata cpu)
set -uo pipefail
T0=$(date +%s)
cd "$(dirname "$0")/.."
SRC=$(pwd)
STAGE=$(cd "${1:-.devgpu}" 2>/dev/null && pwd || echo "")
: "${ADAPTER:=auto}" "${MATMUL_SIZES:=8192x8192 10240x2048 512x2048 2048x512}" "${MATMUL_ITERS:=50}"
: "${PRESET:=bench}" "${TOKENS:=64}" "${DEADLINE_S:=285}" "${PY:=python3}" "${JOBS:=$(nproc)}"
: "${SITE:=/tmp/site}" "${BUILD:=/tmp/strata-build}" "${MODEL:=/tmp/strata-model}" "${OUT:=/tmp/strata-out}"
: "${HF_DEVICE:=cuda}" "${HF_CHECK_F32:=1}"
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

# 2. the random checkpoint (numpy only) in the background while the engine builds
mkdir -p "$MODEL"
( PYTHONPATH=$SRC/app${PYTHONPATH:+:$PYTHONPATH} timeout 90 $PY bench/webgpu_decode.py make "$MODEL" \
    --preset "$PRESET" --out "$RES" >"$WORK/make.txt" 2>&1 ) &
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
step build 150 cmake --build "$BUILD" -j "$JOBS" >"$WORK/build.txt" 2>&1 || { tail -40 "$WORK/build.txt"; exit 1; }
echo "== built $(ls "$BUILD"/_engine*.so) at t=$(elapsed)s"
export STRATA_DEV_BUILD=$BUILD PYTHONPATH=$SRC/app:$PYTHONPATH STRATA_WEBGPU_ADAPTER=$ADAPTER

# 4. the adapter and its limits
step "strata info --gpu $ADAPTER" 30 $PY -m strata info --gpu "$ADAPTER"

# 5. the WGSL matmul probe: bandwidth and cost(T)/cost(1)
for size in $MATMUL_SIZES; do
  r=${size%x*}; c=${size#*x}
  step "webgpu_matmul f16 ${r}x${c}" 40 $PY bench/webgpu_matmul.py --adapter "$ADAPTER" --rows "$r" --cols "$c" \
    --format f16 --iters "$MATMUL_ITERS" --windows 1,2,4,8,16 --json >"$WORK/matmul_$size.json" \
    && $PY -c "import json,sys; d=json.load(open(sys.argv[1])); d['what']='matmul'; print(json.dumps(d))" \
       "$WORK/matmul_$size.json" | tee -a "$RES"
done

# 6. end-to-end decode: wait for the checkpoint, then webgpu, cpu, transformers, one at a time
wait $MAKE_PID; cat "$WORK/make.txt"
if [ -f "$MODEL/config.json" ]; then
  step "decode strata webgpu" 70 $PY bench/webgpu_decode.py strata "$MODEL" --backend webgpu --tokens "$TOKENS" \
    --max-seconds 40 --out "$RES"
  step "decode strata cpu" 45 $PY bench/webgpu_decode.py strata "$MODEL" --backend cpu --tokens "$TOKENS" \
    --max-seconds 25 --out "$RES"
  step "decode transformers $HF_DEVICE eager bf16" 70 $PY bench/webgpu_decode.py hf "$MODEL" --device "$HF_DEVICE" \
    --tokens "$TOKENS" --max-seconds 30 --out "$RES"
else
  echo "== no checkpoint at $MODEL: decode skipped"
fi

# 7. the card's own ceilings (torch copy, cuBLAS matvec), for the ratios
step "torch ceiling" 30 $PY bench/webgpu_decode.py ceiling --out "$RES"

# 8. transformers in float32: is strata computing the same function (greedy ids vs strata cpu)?
if [ -f "$MODEL/config.json" ] && [ "$HF_CHECK_F32" = 1 ]; then
  step "decode transformers $HF_DEVICE eager f32 (agreement check)" 40 $PY bench/webgpu_decode.py hf "$MODEL" \
    --device "$HF_DEVICE" --dtype float32 --tokens "$TOKENS" --max-seconds 20 --out "$RES"
fi

echo
echo "================ h200_webgpu table (t=$(elapsed)s, $(date -u +%FT%TZ)) ================"
$PY bench/webgpu_decode.py table "$RES"
}

main "$@" 2>&1 | tee "$LOG"
