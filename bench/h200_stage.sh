#!/usr/bin/env bash
# Stage what bench/h200_webgpu.sh needs on a bare GPU machine that reaches no registry:
#   bench/h200_stage.sh STAGE_DIR [GL_DIR]
# STAGE_DIR/src.tar.gz   this commit's sources (engine, app without the bundled weights, shaders,
#                        bench, tests/gguf_helpers.py for GGUF_MIX) plus .commit
# STAGE_DIR/whl/         wgpu 0.32.0 (headers + libwgpu_native), pybind11 3, platformdirs, gguf (GGUF_MIX), for
#                        CPython 3.12 manylinux x86_64
# STAGE_DIR/pyinclude.tar.gz  Python 3.12 headers, used there only if the interpreter has none
#                        (PYINCLUDE=path/to/include/python3.12)
# STAGE_DIR/ab.tar.gz    with AB_REF=REF (e.g. main): that commit's sources likewise, for h200_webgpu.sh's
#                        AB_SRC (tar -xzf STAGE/ab.tar.gz -C /tmp/ab, then AB_SRC=/tmp/ab)
# GL_DIR/*.deb           the Vulkan/GL loaders (libvulkan1 ...), amd64, from apt
# On the machine:  tar -xzf STAGE/src.tar.gz -C /tmp/src && GL_DIR=GL bash /tmp/src/bench/h200_webgpu.sh STAGE
set -euo pipefail
cd "$(dirname "$0")/.."
stage=$(mkdir -p "$1" && cd "$1" && pwd)
gl=${2:-}
sources() {  # sources REF OUT.tar.gz
  local tmp; tmp=$(mktemp -d)
  git archive --format=tar "$1" CMakeLists.txt pyproject.toml LICENSE engine_ext app shaders bench sessions/workloads tests/gguf_helpers.py \
    ':(exclude)app/strata/models/*/model.safetensors' >"$tmp/src.tar"
  git rev-parse --short "$1" >"$tmp/.commit"
  tar -rf "$tmp/src.tar" -C "$tmp" .commit
  gzip -9c "$tmp/src.tar" >"$2"
  rm -rf "$tmp"
}
sources HEAD "$stage/src.tar.gz"
if [ -n "${AB_REF:-}" ]; then sources "$AB_REF" "$stage/ab.tar.gz"; fi
if ! ls "$stage"/whl/wgpu-0.32.0-*.whl >/dev/null 2>&1; then
  python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$stage/whl" wgpu==0.32.0 "pybind11>=3,<4" platformdirs gguf
fi
if [ -n "${PYINCLUDE:-}" ]; then
  tar -czf "$stage/pyinclude.tar.gz" -C "$(dirname "$PYINCLUDE")" "$(basename "$PYINCLUDE")"
fi
if [ -n "$gl" ] && ! ls "$gl"/libvulkan1_*.deb >/dev/null 2>&1; then
  mkdir -p "$gl" /tmp/amd64/partial
  o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
  apt-get "${o[@]}" update >/dev/null
  (cd "$gl" && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
du -sh "$stage" ${gl:+"$gl"}
