#!/bin/bash
# Prepare, on a machine with package-registry access, NVSHMEM4Py (NVIDIA's nvshmem package) for the GPU host
# (Python 3.12, CUDA 13, no network), for bench/run.py --impls ...,nv4py:
#   DIR/nv4py  the nvshmem4py-cu13 wheel, and cuda-pathfinder's (installed there only where the image's is
#              older than NVSHMEM4Py needs); about 5 MB
# Usage: bash tests/gpu/pack_nv4py.sh [DIR]     (DIR defaults to .dw; carry DIR/nv4py beside DIR/base)
# tests/gpu/prelude.sh installs them into /tmp/site when DIR/nv4py is there. The rest of what NVSHMEM4Py needs
# the image has (numba-cuda, cuda-core, cuda-bindings, cupy, numpy) or .dw/base brings (cffi); its NVSHMEM is
# nvshmem_dsl's (the carried 3.8 with .dw/nv38: bench/_nv4py.py).
set -eu
DIR=${1:-.dw}
mkdir -p "$DIR/nv4py" && DIR=$(cd "$DIR" && pwd)
VERSION=${NVSHMEM4PY_VERSION:-0.4.1}
PLAT="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_34_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
rm -f "$DIR"/nv4py/*.whl
python3 -m pip download -q --no-deps $PLAT -d "$DIR/nv4py" "nvshmem4py-cu13==$VERSION" "cuda-pathfinder>=1.2.3"
du -sh "$DIR/nv4py" && ls "$DIR/nv4py"
