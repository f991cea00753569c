r"""Rotary position embeddings beside round 3's five (issue 64, point 4): the plain ViT at 1%,
three slices, at round 3's choice for it (docs/small_data_study.md, "RoPE").

  python -m research.small_data --grid=research/small_data/fashion_mnist_rope.py \
    --out=runs/study_rope --results=docs/study/rope/results.jsonl

The same recipe and validation rule as round 3's position-embedding arm: the plain ViT's lr,
weight decay and budget round 3 chose on validation at 1% (read from its committed results),
seeds 0-2 on their own slices, with `posemb` = 'rope' (axial: fixed frequencies per row and
column), 'rope_mixed' (learned per-head frequencies in every block) and 'learn' (the official
table) run again beside them on this machine, so each claim pairs runs of one code version.
Every finished run's encoder also gets its few-shot linear accuracy (round 3's `FEWSHOT`).
Pre-registered: `CLAIMS` were written on 2026-12-01, before any run of this grid.
`:runlocal` shrinks it to one smoke run (mixed RoPE at 5% on 8 images per class).
"""

from typing import List

from research.small_data import fashion_mnist_grid as round2
from research.small_data import fashion_mnist_round3 as round3
from research.small_data import fashion_mnist_round4 as round4
from research.small_data import grid as grid_lib
from vit_jax import config_lib

POSEMBS = ('learn', 'rope', 'rope_mixed')
SEEDS = 3


def rope_runs(runlocal: bool) -> List[grid_lib.Run]:
  base = dict(root='{out}/data', runlocal='1' if runlocal else '')
  lr, wd, steps = round4.round3_choice('ViT', 'plain')
  pct, posembs, seeds = (5, ('rope_mixed',), 1) if runlocal else (1, POSEMBS, SEEDS)
  return [round2.run(f'rope_vit_pe-{pe}_p{pct}_s{s}',
                     dict(arm='posemb', posemb=pe, pct=pct, seed=s, lr=lr, wd=wd),
                     base, **round3.values(('vit', 'plain', pct), s, steps, lr=lr, wd=wd,
                                           posemb=pe))
          for pe in posembs for s in range(seeds)]


TABLES = (
    grid_lib.Table('rope_posemb', 'Rotary position embeddings of the plain ViT beside the '
                   'learned table (test)', row='posemb', col='pct', col_label='% of train: ',
                   baseline='learn'),
    grid_lib.Table('rope_posemb_fewshot', 'Rotary position embeddings of the plain ViT: 10-shot '
                   'linear accuracy of the encoder (test)', row='posemb', col='pct',
                   col_label='% of train: ', metric=round3.FEWSHOT_METRIC, baseline='learn'),
)

# Written on 2026-12-01, before any run of this grid (claim_history.py checks it once
# committed). Heo et al. 2024 report mixed > axial > an absolute table on ImageNet-1k.
PREREGISTERED = dict(written='2026-12-01', recorded_then=0)
CLAIMS = (
    grid_lib.difference_claim('Axial RoPE beats the learned table (1%): rope − learn',
                              'rope_posemb', 'rope', 'learn', 1, **PREREGISTERED),
    grid_lib.difference_claim('Mixed RoPE beats the learned table (1%): rope_mixed − learn',
                              'rope_posemb', 'rope_mixed', 'learn', 1, **PREREGISTERED),
    grid_lib.difference_claim('Mixed RoPE beats axial RoPE (1%): rope_mixed − rope',
                              'rope_posemb', 'rope_mixed', 'rope', 1, **PREREGISTERED),
)


def get_grid(arg: str = '') -> grid_lib.Grid:
  """The RoPE grid; `arg` is '' or 'runlocal'."""
  parts, runlocal = config_lib.parse_arg(arg)
  if parts:
    raise ValueError(f'Bad grid arg {arg!r}; use nothing or runlocal.')
  return grid_lib.Grid(runs=rope_runs(runlocal), tables=TABLES,
                       claims=() if runlocal else CLAIMS, folders='{out}/data',
                       folder_limit=8 * runlocal,
                       fewshot=round3.FEWSHOT_LOCAL if runlocal else round3.FEWSHOT)
