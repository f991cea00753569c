#!/usr/bin/env bash
# Runs a command with transparent huge pages for malloc (glibc >= 2.35, THP mode `madvise`):
# XLA:CPU's per-step buffers then fault in 2 MiB at a time, not 4 KiB, and a CPU training step
# is faster (measured in docs/performance.md, "Page faults"). Where the tunable does nothing
# (older glibc, THP `always` or `never`, not Linux) glibc ignores it.
#   scripts/hugepages.sh python -m vit_jax.main --config=configs/fashion_mnist_quickstart.py
# is the same as `GLIBC_TUNABLES=glibc.malloc.hugetlb=1 python -m vit_jax.main ...`; a
# glibc.malloc.hugetlb already in GLIBC_TUNABLES (e.g. =0) is kept, other tunables too.
set -euo pipefail
case ":${GLIBC_TUNABLES:-}:" in
  *:glibc.malloc.hugetlb=*) ;;
  *) export GLIBC_TUNABLES="${GLIBC_TUNABLES:+$GLIBC_TUNABLES:}glibc.malloc.hugetlb=1" ;;
esac
exec "$@"
