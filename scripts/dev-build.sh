#!/usr/bin/env bash
# Fast incremental build of strata._engine for development, without reinstalling.
#   scripts/dev-build.sh [NAME]      -> build/dev-NAME/_engine*.so  (NAME defaults to "main")
# Then run with:  PYTHONPATH=app STRATA_DEV_BUILD=build/dev-NAME python -m pytest tests/...
# Separate NAMEs let several people build at once without stepping on each other.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-main}
dir=build/dev-$name
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
# configure when there is no generated build yet (a configure that failed half-way leaves a
# CMakeCache.txt but no build.ninja / Makefile, and the build step alone would fail)
if [ ! -f "$dir/build.ninja" ] && [ ! -f "$dir/Makefile" ]; then
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$(command -v python3)" >/dev/null
fi
cmake --build "$dir" -j2
echo "built: $(ls "$dir"/_engine*.so)"
# the WebGPU backend is compiled only where this python has the wgpu wheel (its headers); say so
# instead of leaving the webgpu tests to skip without a word
if ! grep -q '^STRATA_WEBGPU:BOOL=ON' "$dir/CMakeCache.txt"; then
  echo "note: built WITHOUT the webgpu backend ($(command -v python3) has no wgpu wheel:" \
       "pip install wgpu==0.32.0 pybind11, then rm -rf $dir and build again)" >&2
fi
