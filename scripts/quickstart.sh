#!/usr/bin/env bash
# The README's first command: set up, then pretrain a small ViT on Fashion-MNIST at 28px,
# export the published-format npz, fine-tune from it at 42px and evaluate on all 10,000 test
# images. Offline; extra arguments go to vit_jax.main (e.g. --workdir=runs/q2). With huge pages
# for malloc (scripts/hugepages.sh): 14-18% less CPU time per step (docs/performance.md).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec scripts/hugepages.sh .venv/bin/python -m vit_jax.main \
  --config=configs/fashion_mnist_quickstart.py \
  --workdir="${WORKDIR:-runs/quickstart}" "$@"
