"""Transparent huge pages for XLA:CPU's per-step buffers: fewer page faults, faster steps.

An XLA:CPU executable takes its temporary buffer (hundreds of MB for a training step) from
malloc on a worker thread. glibc serves an allocation that large with a fresh mmap and unmaps
it when the step ends, so every step faults the whole buffer back in, 4 KiB at a time: 130k
page faults per step of the Fashion-MNIST hybrid, 100k for ViT-Ti/16 at batch 8 (measured here,
see docs/performance.md). With the glibc tunable `glibc.malloc.hugetlb=1` (glibc >= 2.35)
malloc asks for transparent huge pages on its mappings (`madvise(MADV_HUGEPAGE)`), which the
kernel honours in its common `madvise` THP mode: 2 MiB per fault, ~100x fewer faults, and the
memory is still returned after each step. Tunables are read when a process starts, so
`python -m vit_jax.main` re-executes itself once with it set (same PID, arguments and
environment otherwise) and `benchmarks/vs_timm.py` starts its workers with it. `VIT_JAX_HUGEPAGES=0`
turns this off.
"""

import os
import re
import sys
from typing import Mapping, Optional

TUNABLES = 'GLIBC_TUNABLES'
SETTING = 'glibc.malloc.hugetlb=1'
OPT_OUT = 'VIT_JAX_HUGEPAGES'
THP_MODE_FILE = '/sys/kernel/mm/transparent_hugepage/enabled'
MIN_GLIBC = (2, 35)  # First glibc with the glibc.malloc.hugetlb tunable.


def thp_mode(path: str = THP_MODE_FILE) -> Optional[str]:
  """The kernel's THP mode ('always', 'madvise' or 'never'), None if unknown."""
  try:
    with open(path) as f:
      match = re.search(r'\[(\w+)\]', f.read())
  except OSError:
    return None
  return match.group(1) if match else None


def glibc_version() -> Optional[tuple]:
  """(major, minor) of the C library if it is glibc, else None (musl, macOS, Windows)."""
  try:
    name, version = os.confstr('CS_GNU_LIBC_VERSION').split()
  except (AttributeError, ValueError, OSError):
    return None
  match = re.match(r'(\d+)\.(\d+)', version)
  return (int(match.group(1)), int(match.group(2))) if name == 'glibc' and match else None


def environment_with_hugepages(environ: Mapping[str, str], mode: Optional[str],
                               libc: Optional[tuple]) -> Optional[dict]:
  """`environ` plus the tunable, or None when it is set already, off, or would do nothing.

  Only THP mode 'madvise' needs it: 'always' gives huge pages anyway, 'never' none at all.
  """
  tunables = environ.get(TUNABLES, '')
  if (environ.get(OPT_OUT, '1') == '0' or 'glibc.malloc.hugetlb' in tunables
      or mode != 'madvise' or libc is None or libc < MIN_GLIBC):
    return None
  return {**environ, TUNABLES: f'{tunables}:{SETTING}' if tunables else SETTING}


def environment_without_hugepages(environ: Mapping[str, str]) -> dict:
  """`environ` with the tunable taken out (the other tunables kept)."""
  kept = [t for t in environ.get(TUNABLES, '').split(':') if t and t != SETTING]
  env = {k: v for k, v in environ.items() if k != TUNABLES}
  return {**env, TUNABLES: ':'.join(kept)} if kept else env


def reexec_with_hugepages() -> None:
  """Replaces this process by itself with the tunable set, when it would help (else returns)."""
  env = environment_with_hugepages(os.environ, thp_mode(), glibc_version())
  argv = getattr(sys, 'orig_argv', None)
  if env is None or not argv:
    return
  sys.stdout.flush()
  sys.stderr.flush()
  os.execve(sys.executable, [sys.executable, *argv[1:]], env)


def active() -> bool:
  """Whether this process started with the tunable (for the log)."""
  return SETTING in os.environ.get(TUNABLES, '')
