#!/usr/bin/env bash
# Creates .venv and installs vit-jax into it; `scripts/setup.sh test` adds the test extra
# (pytest, timm + torch for the interop tests, nbclient for the notebook). Versions are pinned
# by constraints.txt (those of the last passing test run); `CONSTRAINTS= bash scripts/setup.sh`
# installs the newest versions allowed by setup.py's floors instead. Installs Debian's
# Fashion-MNIST files (the offline default dataset) when they are missing and apt-get is usable.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-}
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
constraints=${CONSTRAINTS-constraints.txt}
.venv/bin/python -m pip install -q ${constraints:+-c "$constraints"} -e ".${extra:+[$extra]}"
fmnist=/usr/share/datasets/fashion-mnist
if [ ! -d "$fmnist" ] && [ -z "${FASHION_MNIST_DIR:-}" ]; then
  if command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "note: $fmnist missing; run 'sudo apt-get install dataset-fashion-mnist' or set FASHION_MNIST_DIR" >&2
  fi
fi
