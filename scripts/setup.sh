#!/usr/bin/env bash
# Creates .venv and installs vit-jax into it; `scripts/setup.sh test` adds the test extra
# (pytest, timm + torch for the interop tests). Installs Debian's Fashion-MNIST files (the
# offline default dataset) when they are missing and apt-get is usable, and for `test` a C++
# compiler (the tests build matmul_impl='blas''s OpenBLAS handler).
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-}
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".${extra:+[$extra]}"
can_apt() { command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; }
if [ "$extra" = test ] && ! command -v "${CXX:-g++}" >/dev/null; then
  if can_apt; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  else
    echo "note: no C++ compiler; the matmul_impl='blas' tests need g++ (apt-get install g++)" >&2
  fi
fi
fmnist=/usr/share/datasets/fashion-mnist
if [ ! -d "$fmnist" ] && [ -z "${FASHION_MNIST_DIR:-}" ]; then
  if can_apt; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "note: $fmnist missing; run 'sudo apt-get install dataset-fashion-mnist' or set FASHION_MNIST_DIR" >&2
  fi
fi
